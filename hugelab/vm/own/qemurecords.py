"""Which QEMUs are hugelab's: every QEMU that hugelab.vm.own.guest starts is recorded in the
state directory (`HUGELAB_STATE_DIR`, default /var/lib/hugelab) until it is gone, so
`kill_leftover_qemus()` can end the ones a SIGKILLed hugelab left behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

from hugelab import identity
from hugelab.host.journal import write_private
from hugelab.identity import alive, starttime
from hugelab.proc import wait_for

DEFAULT_STATE_DIR = "/var/lib/hugelab"

def state_dir() -> Path:
    """The state directory (created 0700)."""
    d = Path(os.environ.get("HUGELAB_STATE_DIR", DEFAULT_STATE_DIR))
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    return d


def _is_qemu(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("qemu-system")
    except OSError:
        return False


def _record_path(d: Path, pid: int) -> Path:
    return d / f"qemu-{pid}.json"


def register_qemu(d: Path, pid: int, tmpdir: Path) -> Path:
    """Record a QEMU we started (file 0600, written atomically) so a later `recover` can end it."""
    rec = {**identity.record(pid, prefix=""), **identity.record(), "tmpdir": str(tmpdir),
           "started": time.time()}
    path = _record_path(d, pid)
    write_private(path, json.dumps(rec))
    return path


def register_pending(d: Path, tmpdir: Path) -> Path:
    """Record a QEMU about to start, before its pid exists: a SIGKILL between Popen and
    register_qemu then still leaves a trace, and recover finds the QEMU by its tmpdir."""
    path = d / f"pending-qemu-{tmpdir.name}.json"
    write_private(path, json.dumps({"pid": None, **identity.record(), "tmpdir": str(tmpdir)}))
    return path


def _qemus_using(tmpdir: str) -> list[int]:
    """QEMU processes whose command line names `tmpdir` (their sockets and logs live there)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _is_qemu(int(entry.name)):
            continue
        try:
            if tmpdir.encode() in (entry / "cmdline").read_bytes():
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def _terminate(pid: int, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; for processes that are not our children."""
    start = starttime(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not alive(pid, start), grace_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid, start), grace_s)


def _remove_tmpdir(path: str | None) -> None:
    if path and Path(path).name.startswith("hugelab-vm-"):
        shutil.rmtree(path, ignore_errors=True)


def kill_leftover_qemus(state: Path | str | None = None, *, include_live_owners: bool = False) -> list[int]:
    """End QEMUs recorded in the state directory whose hugelab process is gone.

    Returns the pids that were killed. Records of QEMUs that already exited are removed.
    A QEMU whose owning hugelab still runs is left alone unless `include_live_owners`.
    """
    d = Path(state) if state is not None else state_dir()
    killed: list[int] = []
    for path in sorted([*d.glob("qemu-*.json"), *d.glob("pending-qemu-*.json")]):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if identity.recorded_alive(rec) and not include_live_owners:
            continue
        if rec.get("pid") is None:  # killed between Popen and register_qemu: find it by tmpdir
            pids = _qemus_using(str(rec.get("tmpdir"))) if rec.get("tmpdir") else []
        else:
            pid = int(rec["pid"])
            pids = [pid] if identity.recorded_alive(rec, prefix="") and _is_qemu(pid) else []
        for pid in pids:
            _terminate(pid)
            killed.append(pid)
        _remove_tmpdir(rec.get("tmpdir"))
        path.unlink(missing_ok=True)
    return killed
