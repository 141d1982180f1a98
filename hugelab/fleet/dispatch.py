"""The fleet driver: one experiment on many hosts, through Ansible driven by ansible-runner.

`run_fleet` packs hugelab's source (tarball.py), runs the playbook
`ansible/fleet.yml` on the inventory's hosts and turns ansible-runner's events into small
`HostEvent`s for a progress display (`on_event`) and one `HostOutcome` per host: ok,
selected-out (the preflight found arms it cannot run, with the reasons), failed (with the
message, and whether the host was recovered), unreachable, lost (unreachable after its run
had started: the run may go on there, and the next fleet run resumes it), or - after Ctrl-C - recovered
(its run was stopped and the host put back by `ansible/recover.yml`) or cancelled (it had not
started running). `recover_fleet` runs `recover.yml` alone.

The playbook runs through playbook.py, and its events become outcomes in events.py.

Secrets: the store password comes from the controller's PGPASSWORD only. It goes to Ansible
as the variable `hugelab_store_password` in `env/extravars` (mode 0600) of a private data
directory (mode 0700) that is deleted, artifacts and all, when the run ends; the controller's
PGPASSWORD is blanked in ansible-playbook's environment (ansible-runner writes that
environment into its artifacts); on the host it travels in a no_log task's file that
`hugelab.fleet.launch` deletes before it starts `hugelab run` with it in PGPASSWORD. It is
never on a command line: not here, not in Ansible's `environment:` (which Ansible puts on the
remote shell's command line), not on the host.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hugelab.errors import UsageError
from hugelab.fleet.events import (
    CANCELLED,
    FAILED,
    OK,
    PENDING,
    PHASES,
    RECOVERED,
    EventTranslator,
    FleetOutcome,
    HostEvent,
)
from hugelab.fleet.playbook import DEFAULT_FORKS, PASSWORD_ENV, run_playbook
from hugelab.fleet.tarball import SourceTarball, build_source_tarball

ANSIBLE_DIR = Path(__file__).resolve().parent / "ansible"
FLEET_PLAYBOOK = ANSIBLE_DIR / "fleet.yml"
RECOVER_PLAYBOOK = ANSIBLE_DIR / "recover.yml"

def check_store_url(store_url: str | None) -> None:
    """A store URL must not carry a password (it would be on command lines and in logs)."""
    from hugelab.store.locate import display

    if store_url and "://" in store_url and display(store_url) != store_url:
        raise UsageError("the store URL carries a password",
                         hint=f"leave it out of the URL and set {PASSWORD_ENV} instead")

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
