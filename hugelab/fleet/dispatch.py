"""The fleet driver: one experiment on many hosts, through Ansible driven by ansible-runner.

`run_fleet` packs hugelab's source (`build_source_tarball`), runs the playbook
`ansible/fleet.yml` on the inventory's hosts and turns ansible-runner's events into small
`HostEvent`s for a progress display (`on_event`) and one `HostOutcome` per host: ok,
selected-out (the preflight found arms it cannot run, with the reasons), failed (with the
message, and whether the host was recovered), unreachable, lost (unreachable after its run
had started: the run may go on there, and the next fleet run resumes it), or - after Ctrl-C - recovered
(its run was stopped and the host put back by `ansible/recover.yml`) or cancelled (it had not
started running). `recover_fleet` runs `recover.yml` alone.

Secrets: the store password comes from the controller's PGPASSWORD only. It goes to Ansible
as the variable `hugelab_store_password` in `env/extravars` (mode 0600) of a private data
directory (mode 0700) that is deleted, artifacts and all, when the run ends; the controller's
PGPASSWORD is blanked in ansible-playbook's environment (ansible-runner writes that
environment into its artifacts); on the host it travels in a no_log task's file that
`hugelab.fleet.launch` deletes before it starts `hugelab run` with it in PGPASSWORD. It is
never on a command line: not here, not in Ansible's `environment:` (which Ansible puts on the
remote shell's command line), not on the host.

The event translation (`EventTranslator`) is pure: it takes ansible-runner's event dicts and
keeps the outcomes, so it is tested with plain dicts.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import hugelab
from hugelab.errors import HugelabError, UsageError

ANSIBLE_DIR = Path(__file__).resolve().parent / "ansible"
FLEET_PLAYBOOK = ANSIBLE_DIR / "fleet.yml"
RECOVER_PLAYBOOK = ANSIBLE_DIR / "recover.yml"

PASSWORD_ENV = "PGPASSWORD"
PHASES = ("install", "preflight", "run", "recover")
# a host's outcome
OK, SELECTED_OUT, FAILED, UNREACHABLE, LOST, RECOVERED, CANCELLED = (
    "ok", "selected-out", "failed", "unreachable", "lost", "recovered", "cancelled")
PENDING = "pending"

# what goes into the source tarball: these top-level files and the package, less build output
SOURCE_FILES = ("bootstrap", "pyproject.toml", "README.md", "LICENSE")
SOURCE_PACKAGE = "hugelab"
EXCLUDED_DIRS = frozenset({"__pycache__", "_bin", ".venv", ".mypy_cache", ".pytest_cache",
                           ".ruff_cache"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
SOURCE_EPOCH = 315532800  # 1980-01-01: every member's mtime, so equal trees give equal bytes

DEFAULT_FORKS = 50  # hosts driven at once: an async task with polling holds one fork per host
CANCEL_POLL_S = 1  # how often ansible-runner asks whether to cancel
# Ansible's own ssh_args, and keepalives: a connection to a host that stopped answering ends
SSH_ARGS = ("-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=10 "
            "-o ServerAliveCountMax=3")


class FleetError(HugelabError):
    """The fleet could not be driven (no source to ship, Ansible missing, a bad inventory)."""


# ---------------------------------------------------------------- the source tarball


@dataclass(frozen=True)
class SourceTarball:
    path: Path
    sha256: str
    files: int


def source_root() -> Path:
    """The repository hugelab runs from (where `./bootstrap` is), from `hugelab.__file__`."""
    root = Path(hugelab.__file__).resolve().parent.parent
    if not (root / "bootstrap").is_file():
        raise FleetError(f"no ./bootstrap beside the hugelab package (looked in {root}): hosts "
                         "are installed from hugelab's source repository",
                         hint="run hugelab fleet from a clone of the repository "
                              "(./bootstrap setup there), not from a wheel")
    return root


def source_files(root: Path) -> list[str]:
    """Paths (relative, sorted) of what a host needs to run `./bootstrap setup`."""
    missing = [name for name in (*SOURCE_FILES, SOURCE_PACKAGE) if not (root / name).exists()]
    if missing:
        raise FleetError(f"the source at {root} lacks {', '.join(missing)}")
    out = list(SOURCE_FILES)
    for dirpath, dirnames, filenames in os.walk(root / SOURCE_PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for name in filenames:
            path = Path(dirpath, name)
            if name.endswith(EXCLUDED_SUFFIXES) or not path.is_file() or path.is_symlink():
                continue
            out.append(str(path.relative_to(root)))
    return sorted(out)


def _member(root: Path, rel: str) -> tuple[tarfile.TarInfo, bytes]:
    data = (root / rel).read_bytes()
    info = tarfile.TarInfo(rel)
    info.size = len(data)
    info.mtime = SOURCE_EPOCH
    info.mode = 0o755 if os.access(root / rel, os.X_OK) else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info, data


def build_source_tarball(dest: Path, root: Path | None = None) -> SourceTarball:
    """Write hugelab's source (`bootstrap pyproject.toml README.md LICENSE hugelab/`, less
    __pycache__, _bin, .venv) to `dest` as a gzip tarball whose bytes depend only on the files'
    paths, contents and executable bits (fixed times, owners and order)."""
    root = source_root() if root is None else root
    names = source_files(root)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs: set[str] = set()
        for rel in names:
            for parent in reversed(Path(rel).parents[:-1]):
                if str(parent) not in dirs:
                    dirs.add(str(parent))
                    d = tarfile.TarInfo(str(parent))
                    d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, SOURCE_EPOCH
                    d.uname = d.gname = "root"
                    tar.addfile(d)
            info, data = _member(root, rel)
            tar.addfile(info, io.BytesIO(data))
    with dest.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0, compresslevel=6) as gz:
        gz.write(buf.getvalue())
    return SourceTarball(dest, hashlib.sha256(dest.read_bytes()).hexdigest(), len(names))


# ---------------------------------------------------------------- events and outcomes


@dataclass(frozen=True)
class HostEvent:
    """One step of one host, for a progress display.

    phase: install | preflight | run | recover ("" for a task outside them); status: started,
    ok, changed, skipped, running (an async poll), failed, unreachable, selected-out."""

    host: str
    phase: str
    status: str
    message: str = ""
    task: str = ""


@dataclass
class HostOutcome:
    """What happened on one host. `timings`: seconds per phase (first task's start to last
    task's end); `reasons`: arm -> why, for a host selected out; `plan`: the preflight's dry
    run there; `result`: `hugelab run --json`'s output there."""

    host: str
    status: str = PENDING
    message: str = ""
    recovered: bool = False
    started_run: bool = False
    reasons: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    result: dict[str, Any] | None = None


@dataclass
class FleetOutcome:
    """The fleet run: one outcome per host the playbook reached, ansible-runner's final status
    (successful, failed, canceled, timeout) and rc, and whether the controller was interrupted."""

    hosts: dict[str, HostOutcome]
    status: str
    rc: int
    interrupted: bool = False
    elapsed_s: float = 0.0

    def with_status(self, status: str) -> list[str]:
        return sorted(h for h, o in self.hosts.items() if o.status == status)

    @property
    def ok(self) -> bool:
        """Every host ran or was selected out, and the controller was not interrupted."""
        return not self.interrupted and all(o.status in (OK, SELECTED_OUT)
                                            for o in self.hosts.values())


def phase_of(task: str) -> tuple[str, str]:
    """("run", "hugelab run x.toml") from the task name "run: hugelab run x.toml"."""
    head, sep, rest = task.partition(": ")
    return (head, rest) if sep and head in PHASES else ("", task)


def _when(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


def failure_message(res: Mapping[str, Any]) -> str:
    """The most telling line(s) of a failed task's result: its msg, or the error lines of its
    stderr, or the end of its stderr."""
    msg = str(res.get("msg") or "")
    if msg and "non-zero return code" not in msg:
        return msg.strip()
    lines = [ln.strip() for ln in str(res.get("stderr") or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or ln.lower().startswith("hint")]
    text = " / ".join(errors or lines[-3:])
    rc = res.get("rc")
    return f"exit {rc}: {text}" if rc is not None and text else text or msg or "failed"


def unreachable_message(res: Mapping[str, Any]) -> str:
    """Why a host could not be reached (for a loop: the first item's reason)."""
    msgs = [str(r.get("msg")) for r in res.get("results") or [] if isinstance(r, dict)
            and r.get("msg")]
    msg = str(res.get("msg") or "")
    msg = (msgs[0] if msgs and (not msg or msg == "All items completed") else msg
           or "unreachable").strip()
    # Ansible's 'Task failed: Data could not be sent ... can be reached over ssh: <ssh's error>'
    return msg.rsplit("reached over ssh: ", 1)[-1].removeprefix("Task failed: ")


def _json_or_none(text: Any) -> dict[str, Any] | None:
    try:
        data = json.loads(str(text))
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class EventTranslator:
    """ansible-runner events in, HostEvents out (to `on_event`), HostOutcomes kept."""

    def __init__(self, on_event: Callable[[HostEvent], None] | None = None) -> None:
        self.on_event = on_event
        self.hosts: dict[str, HostOutcome] = {}
        self._spans: dict[tuple[str, str], list[float]] = {}
        self._current: dict[str, tuple[str, str]] = {}  # host -> (phase, task) it is in
        self.callback_error: Exception | None = None

    def host(self, name: str) -> HostOutcome:
        return self.hosts.setdefault(name, HostOutcome(name))

    def __call__(self, event: Mapping[str, Any]) -> bool:
        """ansible-runner's event_handler: translate, and keep the event (True)."""
        self.feed(event)
        return True

    def feed(self, event: Mapping[str, Any]) -> HostEvent | None:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            self._stats(data)
            return None
        host = data.get("host")
        if not host or not kind.startswith("runner_"):
            return None
        phase, task = phase_of(str(data.get("task") or ""))
        res = data.get("res") or {}
        out = self.host(str(host))
        if kind == "runner_on_async_poll":  # its task is Ansible's own async_status
            phase, task = self._current.get(out.host, (phase, task))
        elif kind == "runner_on_start":
            self._current[out.host] = (phase, task)
        self._time(out, phase, data, event.get("created"))
        ev = self._translate(kind, out, phase, task, data, res)
        if ev is not None and self.on_event is not None and self.callback_error is None:
            try:
                self.on_event(ev)
            except Exception as exc:  # raised after the playbook, not inside it
                self.callback_error = exc
        return ev

    def raise_callback_error(self) -> None:
        """An exception `on_event` raised (later events were not passed to it): raised once
        the playbook is over, so a broken display cannot strand hosts mid-run."""
        if self.callback_error is not None:
            raise self.callback_error

    def _time(self, out: HostOutcome, phase: str, data: Mapping[str, Any],
              created: Any) -> None:
        if not phase:
            return
        span = self._spans.setdefault((out.host, phase), [])
        for stamp in (data.get("start"), data.get("end"), created):
            t = _when(stamp)
            if t is not None:
                span.append(t)
        if span:
            out.timings[phase] = round(max(span) - min(span), 3)

    def _translate(self, kind: str, out: HostOutcome, phase: str, task: str,
                   data: Mapping[str, Any], res: Mapping[str, Any]) -> HostEvent | None:
        action = str(data.get("task_action") or data.get("resolved_action") or "")
        if kind == "runner_on_start":
            if phase == "run" and task.startswith("hugelab run"):
                out.started_run = True
            return HostEvent(out.host, phase, "started", task=task)
        if kind == "runner_on_ok":
            return self._ok(out, phase, task, action, res)
        if kind == "runner_item_on_failed":
            return None  # the task's own runner_on_failed / _unreachable follows
        if kind == "runner_on_failed":
            if data.get("ignore_errors"):
                return None
            out.status, out.message = FAILED, failure_message(res)
            return HostEvent(out.host, phase, "failed", out.message, task)
        if kind == "runner_on_unreachable":
            out.status, out.message = UNREACHABLE, unreachable_message(res)
            if out.started_run:  # mid-run: the others go on, this one is lost for now
                out.status = LOST
                out.message = f"lost during its run: {out.message} (its run may go on there: " \
                              "when the host is back, `hugelab fleet run` again resumes it, " \
                              "or `hugelab fleet recover` stops it and puts the host back)"
            return HostEvent(out.host, phase, out.status, out.message, task)
        if kind == "runner_on_skipped":
            return HostEvent(out.host, phase, "skipped", task=task)
        if kind in ("runner_on_async_poll", "runner_retry"):  # a poll of the running run
            return HostEvent(out.host, phase, "running", task=task)
        return None

    def _ok(self, out: HostOutcome, phase: str, task: str, action: str,
            res: Mapping[str, Any]) -> HostEvent:
        if action.endswith("set_stats"):
            reasons = ((res.get("ansible_stats") or {}).get("data") or {}) \
                .get("hugelab_selected_out", {}).get(out.host)
            if reasons:
                out.status, out.reasons = SELECTED_OUT, dict(reasons)
                out.message = "; ".join(f"{arm}: {why}" for arm, why in out.reasons.items())
                return HostEvent(out.host, phase, SELECTED_OUT, out.message, task)
        if phase == "preflight" and task.startswith("hugelab run --dry-run"):
            verdict = _json_or_none(res.get("stdout"))
            if verdict is not None:
                out.plan = verdict.get("plan")
        elif phase == "run" and task.startswith("hugelab run"):
            if res.get("ansible_job_id") and not res.get("finished"):  # started, not over
                return HostEvent(out.host, phase, "running", task=task)
            out.result = _json_or_none(res.get("stdout"))
            out.status = OK
        elif phase == "recover" and task in ("hugelab recover", "hugelab recover again"):
            out.recovered = res.get("rc") == 0
        return HostEvent(out.host, phase, "changed" if res.get("changed") else "ok", task=task)

    def _stats(self, data: Mapping[str, Any]) -> None:
        """The play's recap: every host it processed; a host that is still pending and did not
        fail got to the end (the run, or the preflight of a preflight-only run)."""
        failed = set(data.get("failures") or {}) | set(data.get("dark") or {})
        for name in data.get("processed") or {}:
            out = self.host(str(name))
            if out.status == PENDING and name not in failed:
                out.status = OK

    def finish(self, canceled: bool, now: float | None = None) -> None:
        """After the playbook: hosts left pending were cancelled (or never got anywhere); a
        cancelled run's time runs to `now` (default: the clock's)."""
        for out in self.hosts.values():
            if out.status == PENDING and canceled and out.started_run:
                span = self._spans.get((out.host, "run"))
                if span:
                    span.append(time.time() if now is None else now)
                    out.timings["run"] = round(max(span) - min(span), 3)
            if out.status == PENDING:
                out.status = CANCELLED if canceled else FAILED
                if not out.message:
                    out.message = "interrupted before it finished" if canceled else \
                        "the playbook ended without an outcome for this host"


# ---------------------------------------------------------------- running ansible-runner


def check_store_url(store_url: str | None) -> None:
    """A store URL must not carry a password (it would be on command lines and in logs)."""
    from hugelab.store.locate import display

    if store_url and "://" in store_url and display(store_url) != store_url:
        raise UsageError("the store URL carries a password",
                         hint=f"leave it out of the URL and set {PASSWORD_ENV} instead")


@contextmanager
def private_data_dir() -> Iterator[Path]:
    """ansible-runner's private data directory: mode 0700, deleted with everything in it."""
    path = Path(tempfile.mkdtemp(prefix="hugelab-fleet-"))
    try:
        os.chmod(path, 0o700)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_extravars(pdd: Path, extravars: Mapping[str, Any]) -> Path:
    """`env/extravars` (mode 0600, dir 0700), read by ansible-runner as `-e @FILE`."""
    env = pdd / "env"
    env.mkdir(mode=0o700, exist_ok=True)
    path = env / "extravars"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(extravars), f)
    return path


def _envvars() -> dict[str, str]:
    """ansible-playbook's environment on top of ours: this Python's ansible first on PATH, the
    controller's password blanked (ansible-runner saves the environment in its artifacts)."""
    bindir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        PASSWORD_ENV: "",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        # a host that vanishes (no RST: a cable, a crash) ends its SSH connection within ~30 s
        # instead of TCP's quarter of an hour
        "ANSIBLE_SSH_ARGS": os.environ.get("ANSIBLE_SSH_ARGS") or SSH_ARGS,
    }


def _runner() -> Any:
    try:
        import ansible_runner
    except ImportError as exc:
        raise FleetError("ansible-runner is not installed",
                         hint="./bootstrap setup installs it (the 'fleet' extra)") from exc
    if shutil.which("ansible-playbook", path=_envvars()["PATH"]) is None:
        raise FleetError("ansible-playbook is not installed",
                         hint="./bootstrap setup installs ansible-core (the 'fleet' extra)")
    return ansible_runner


CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_cancel(cancel: threading.Event) -> Iterator[None]:
    """While the block runs, Ctrl-C, SIGTERM and SIGHUP set `cancel` instead of raising
    KeyboardInterrupt (or ending the process) wherever the main thread happens to be: the
    playbook is cancelled, its directory (with the password file) removed, and the hosts that
    were running recovered. Off the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, lambda _sig, _frame: cancel.set()) for s in CANCEL_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_playbook(playbook: Path, inventory: Path, extravars: Mapping[str, Any], *,
                 limit: str | None, translator: EventTranslator, forks: int = DEFAULT_FORKS,
                 cancel: threading.Event | None = None) -> tuple[str, int, bool]:
    """Run `playbook` through ansible-runner, events to `translator`: (status, rc,
    interrupted). Ctrl-C, SIGTERM, SIGHUP or `cancel` being set cancel the run within a
    second; the artifacts go with the private data directory."""
    ansible_runner = _runner()
    inventory = inventory.resolve()  # ansible-runner reads it from its private data directory
    cancel = cancel or threading.Event()
    done = threading.Event()
    failure: list[BaseException] = []
    with private_data_dir() as pdd, signals_cancel(cancel):
        write_extravars(pdd, extravars)
        runner = ansible_runner.interface.init_runner(
            private_data_dir=str(pdd), playbook=str(playbook), inventory=str(inventory),
            limit=limit, forks=forks, envvars=_envvars(), quiet=True,
            settings={"pexpect_timeout": CANCEL_POLL_S, "suppress_ansible_output": True},
            event_handler=translator, cancel_callback=cancel.is_set)

        def work() -> None:
            try:
                runner.run()
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=work, name="hugelab-fleet-ansible", daemon=True)
        thread.start()
        while not done.wait(0.2):
            pass
        thread.join()
        status, rc = str(runner.status), int(runner.rc if runner.rc is not None else -1)
        said = _tail(pdd) if not translator.hosts else ""
    if failure:
        raise FleetError(f"ansible-runner failed: {failure[0]!r}") from failure[0]
    translator.raise_callback_error()
    if said and not cancel.is_set():  # no host: an empty or bad inventory, or --limit
        raise FleetError(f"ansible-playbook had no host to work on (exit {rc}): {said}",
                         hint="check the inventory and --limit (ansible-inventory -i INVENTORY "
                              "--graph lists its hosts)")
    return status, rc, cancel.is_set()


def _tail(pdd: Path, lines: int = 6) -> str:
    """The last lines ansible-playbook printed (its error, when it reached no host)."""
    out = [ln.strip() for f in sorted(pdd.glob("artifacts/*/stdout"))
           for ln in f.read_text(errors="replace").splitlines() if ln.strip()]
    return " / ".join(out[-lines:]) or "no output"


def fleet_extravars(experiment: Path, source: SourceTarball, *, store_url: str | None,
                    password: str | None, preflight_only: bool, run_args: Sequence[str],
                    extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {**(extra or {}),
                           "hugelab_experiment": str(experiment.resolve()),
                           "hugelab_source_tarball": str(source.path),
                           "hugelab_source_sha256": source.sha256,
                           "hugelab_preflight_only": preflight_only}
    if store_url:
        out["hugelab_store"] = store_url
    if password:
        out["hugelab_store_password"] = password
    if run_args:
        out["hugelab_run_args"] = list(run_args)
    return out


def _check_inputs(experiment: Path, inventory: Path, store_url: str | None) -> None:
    from hugelab.experiment import load_experiment

    if not inventory.exists():
        raise UsageError(f"no inventory at {inventory}")
    check_store_url(store_url)
    load_experiment(experiment)  # a bad file fails here, once, not on every host


def run_fleet(experiment: Path, inventory: Path, *, store_url: str | None = None,
              limit: str | None = None, on_event: Callable[[HostEvent], None] | None = None,
              preflight_only: bool = False, run_args: Sequence[str] = (),
              extravars: Mapping[str, Any] | None = None, forks: int = DEFAULT_FORKS,
              recover_on_interrupt: bool = True) -> FleetOutcome:
    """Run `experiment` on the hosts of `inventory` (an Ansible inventory; `limit`: Ansible's
    --limit): install hugelab on each, select out hosts that cannot run every arm, run it with
    `--label HOST`, and recover a host whose run fails. `store_url`: the shared store (no
    password: that comes from the controller's PGPASSWORD); None: each host keeps its own
    SQLite store in its work directory. `preflight_only`: stop after the preflight.
    `run_args`: more `hugelab run` arguments; `extravars`: more Ansible variables (see the
    role's defaults). `on_event` is called from a worker thread, one event at a time.

    Ctrl-C (or SIGTERM, SIGHUP) cancels the playbook, then runs recover.yml on the hosts that
    had started their run (`recover_on_interrupt`) and returns with `interrupted` set."""
    _check_inputs(experiment, inventory, store_url)
    started = time.monotonic()
    translator = EventTranslator(on_event)
    with tempfile.TemporaryDirectory(prefix="hugelab-source-") as tmp:
        os.chmod(tmp, 0o700)
        source = build_source_tarball(Path(tmp) / "hugelab-source.tar.gz")
        extra = fleet_extravars(experiment, source, store_url=store_url,
                                password=(os.environ.get(PASSWORD_ENV) or None) if store_url
                                else None,  # no shared store: nothing to hand out
                                preflight_only=preflight_only, run_args=run_args,
                                extra=extravars)
        status, rc, interrupted = run_playbook(FLEET_PLAYBOOK, inventory, extra, limit=limit,
                                               translator=translator, forks=forks)
    translator.finish(canceled=interrupted)
    if interrupted and recover_on_interrupt:
        _recover_interrupted(translator, inventory, extravars, on_event, forks)
    return FleetOutcome(translator.hosts, status, rc, interrupted,
                        round(time.monotonic() - started, 3))


def _recover_interrupted(translator: EventTranslator, inventory: Path,
                         extravars: Mapping[str, Any] | None,
                         on_event: Callable[[HostEvent], None] | None, forks: int) -> None:
    running = sorted(h for h, o in translator.hosts.items()
                     if o.started_run and o.status in (CANCELLED, PENDING))
    if not running:
        return
    rec = recover_fleet(inventory, limit=",".join(running), on_event=on_event,
                        extravars=extravars, forks=forks)
    for name in running:
        out, r = translator.hosts[name], rec.hosts.get(name)
        out.timings.update({k: v for k, v in (r.timings if r else {}).items()})
        if r is not None and r.status == RECOVERED:
            out.status, out.recovered = RECOVERED, True
            out.message = "interrupted: its run was stopped and the host put back"
        else:
            out.status = FAILED
            out.message = "interrupted, and recovery failed: " + \
                (r.message if r else "recover.yml did not reach it") + \
                " (run `hugelab fleet recover` again, or `hugelab recover` on the host)"


def recover_fleet(inventory: Path, *, limit: str | None = None,
                  on_event: Callable[[HostEvent], None] | None = None,
                  extravars: Mapping[str, Any] | None = None,
                  forks: int = DEFAULT_FORKS) -> FleetOutcome:
    """Stop a running `hugelab run` on the hosts of `inventory` (`limit`) and put each host
    back (`hugelab recover`): each host ends recovered, failed (with why) or unreachable."""
    if not inventory.exists():
        raise UsageError(f"no inventory at {inventory}")
    started = time.monotonic()
    translator = EventTranslator(on_event)
    status, rc, interrupted = run_playbook(RECOVER_PLAYBOOK, inventory, dict(extravars or {}),
                                           limit=limit, translator=translator, forks=forks)
    translator.finish(canceled=interrupted)
    for out in translator.hosts.values():
        if out.status == OK:
            out.status, out.recovered = RECOVERED, True
    return FleetOutcome(translator.hosts, status, rc, interrupted,
                        round(time.monotonic() - started, 3))


def summarize(outcome: FleetOutcome) -> Iterable[str]:
    """One line per host, for logs and tests."""
    for name in sorted(outcome.hosts):
        o = outcome.hosts[name]
        times = " ".join(f"{p}={o.timings[p]:.1f}s" for p in PHASES if p in o.timings)
        yield f"{name}: {o.status}{' (recovered)' if o.recovered and o.status != RECOVERED else ''}" \
              f"{': ' + o.message if o.message else ''}{' [' + times + ']' if times else ''}"
