"""One playbook run through ansible-runner (`run_playbook`): its private data directory, the
variables handed to it, ansible-playbook's environment, and Ctrl-C, SIGTERM and SIGHUP turned
into cancelling the run.

Secrets: the store password goes to Ansible as the variable `hugelab_store_password` in
`env/extravars` (mode 0600) of a private data directory (mode 0700) that is deleted, artifacts
and all, when the run ends; the controller's PGPASSWORD is blanked in ansible-playbook's
environment (ansible-runner writes that environment into its artifacts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hugelab.errors import FleetError
from hugelab.fleet.events import EventTranslator

PASSWORD_ENV = "PGPASSWORD"

DEFAULT_FORKS = 50  # hosts driven at once: an async task with polling holds one fork per host
CANCEL_POLL_S = 1  # how often ansible-runner asks whether to cancel
# Ansible's own ssh_args, and keepalives: a connection to a host that stopped answering ends
SSH_ARGS = ("-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=10 "
            "-o ServerAliveCountMax=3")

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
