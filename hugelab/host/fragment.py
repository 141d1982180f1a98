"""An aged host on demand: free memory fragmented to a stated degree, held, measured, released.

    with Fragmenter(FragmentTarget(0.9, seed=1)) as frag:   # recorded before the holder starts
        frag.report["after"]["unusable"]                      # 0.90: measured, not assumed
        ... trials ...
        frag.measure()                                        # buddyinfo now, for each trial
    # everything released: the holder process ended, its pages freed

The degree is the kernel's unusable free space index for a 2 MiB page (`hugelab.host.buddyinfo`):
the share of free memory that is not in free blocks of order 9 or above. 0.9 means nine tenths
of free memory cannot serve a 2 MiB page without compaction. `hugelab.host.fraghold` does the
work (see there how): it faults in small pages, keeps one page in every physical 2 MiB block it
touched, pinned by a pipe so compaction cannot move it, and frees the rest.

What it takes (measured on a 24 GiB, 2-core VM, docs/benchmarks.md): memory held is 4 KiB per
2 MiB block made unusable (about 40 MiB for 20 GiB), but to get there the holder faults in the
memory it fragments, briefly: about 0.9 of free memory for a target of 0.9, at 0.5-1 GiB/s
of one core here (each page's first touch is a fault in the VM's host too), then takes a second or two to choose, pin and free. It refuses a target whose fill would leave less than `reserve_kb`
available (default: the larger of 1 GiB and 5% of memory), and stops (the target missed, and
said) if MemAvailable falls to it meanwhile.

Kill safety: a record `fragment-<token>.json` (0600, in the state directory) names the holder
*before* it starts (its token is on its command line, so a holder whose pid was never written
is still found), and is removed once it is gone. The holder ends by itself when its standard
input closes, which a SIGKILLed hugelab's exit does; `kill_leftover_fragmenters()` (run by
`hugelab recover` and before every run) kills any holder whose hugelab is gone and removes its
record. The holder writes no file: ended, it holds nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab import identity, proc
from hugelab.errors import HostError
from hugelab.host import buddyinfo
from hugelab.host.journal import ensure_private_dir, state_dir, write_private
from hugelab.kernel import meminfo_kb

RECORD_PREFIX = "fragment-"
HOLDER_MODULE = "hugelab.host.fraghold"
READY_TIMEOUT_S = 900.0
STOP_WAIT_S = 10.0
DEFAULT_TOLERANCE = 0.02  # measured index within this of the target: the target was met


@dataclass(frozen=True)
class FragmentTarget:
    """What to make: the unusable index `unusable` (0 < u < 1), at most `max_kb` faulted in,
    the kept page per block chosen by `seed`, pinned against compaction unless `pin` is off."""

    unusable: float
    max_kb: int | None = None
    seed: int = 0
    pin: bool = True
    reserve_kb: int | None = None
    tolerance: float = DEFAULT_TOLERANCE
    prime: bool = True  # first use up memory the kernel has not initialised (deferred pages)
    compact: bool = True  # first compact memory: a start that depends little on the past

    def argv(self, token: str, reserve_kb: int) -> list[str]:
        args = [sys.executable, "-m", HOLDER_MODULE, "--token", token,
                "--target", f"{self.unusable:.4f}", "--seed", str(self.seed),
                "--reserve-kb", str(reserve_kb), "--tolerance", f"{self.tolerance / 2:.4f}"]
        if self.max_kb is not None:
            args += ["--max-kb", str(self.max_kb)]
        return (args + ([] if self.pin else ["--no-pin"]) + (["--prime"] if self.prime else [])
                + (["--compact"] if self.compact else []))


def default_reserve_kb() -> int:
    return max(1 << 20, meminfo_kb("MemTotal") // 20)


def check_reachable(target: FragmentTarget, reserve_kb: int,
                    snap: buddyinfo.Snapshot | None = None) -> None:
    """HostError for a target out of range, or one whose fill (about `unusable` of free memory,
    up to `max_kb`) would leave less than the reserve available."""
    if not 0.0 < target.unusable < 1.0:
        raise HostError(f"fragment target {target.unusable} is not a share between 0 and 1",
                        hint="e.g. fragment = 0.9: nine tenths of free memory unusable for 2 MiB")
    free_kb = (snap or buddyinfo.read()).free_kb()
    need_kb = int(target.unusable * free_kb)
    if target.max_kb is not None:
        need_kb = min(need_kb, target.max_kb)
    avail_kb = meminfo_kb("MemAvailable")
    if avail_kb - need_kb < reserve_kb:
        raise HostError(
            f"fragmenting to {target.unusable:.2f} faults in about {need_kb >> 10} MiB; "
            f"{avail_kb >> 10} MiB is available and {reserve_kb >> 10} MiB must stay free",
            hint="lower the target (the arm's fragment), or run it with more memory free")


def missed(report: dict[str, Any], target: FragmentTarget) -> str | None:
    """Why a holder's measured state misses its target, or None when it meets it."""
    got = (report.get("after") or {}).get("unusable")
    if not isinstance(got, int | float):
        return "no fragmentation measured"
    if got < target.unusable - target.tolerance:
        return (f"fragmentation {got:.3f} below the target {target.unusable:.2f} "
                f"(holder stopped: {report.get('stopped')})")
    return None


class Fragmenter:
    """The fragmented host as a resource: recorded, started, measured, released on exit."""

    def __init__(self, target: FragmentTarget, *, state: Path | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        self.target = target
        self.state = state or state_dir()
        self.token = uuid.uuid4().hex
        self.ready_timeout_s = ready_timeout_s
        self.report: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._record = self.state / f"{RECORD_PREFIX}{self.token}.json"

    def _write(self, pid: int | None) -> None:
        rec = {"token": self.token, "pid": pid, "created": time.time(), **identity.record(),
               **(identity.record(pid, prefix="") if pid else {})}
        write_private(self._record, json.dumps(rec))

    def __enter__(self) -> Fragmenter:
        reserve = self.target.reserve_kb or default_reserve_kb()
        check_reachable(self.target, reserve)
        ensure_private_dir(self.state)
        self._write(None)  # before the holder exists: recover finds it by its token
        try:
            self._proc = proc.start(self.target.argv(self.token, reserve), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
            self._write(self._proc.pid)
            self.report = self._await_ready()
        except BaseException:
            self.release()
            raise
        return self

    def _await_ready(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            if sel.select(self.ready_timeout_s):
                line = self._proc.stdout.readline()
                with contextlib.suppress(ValueError):
                    report = json.loads(line)
                    if isinstance(report, dict) and report.get("ready"):
                        return report
        err = b""
        if self._proc.poll() is not None and self._proc.stderr is not None:
            err = self._proc.stderr.read()
        raise HostError("the fragment holder did not get ready "
                        f"within {self.ready_timeout_s:.0f}s: {err.decode(errors='replace')[-500:]}",
                        hint="it needs root (page frame numbers) and Linux 5.14+")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def measure(self) -> dict[str, Any]:
        """The host's free lists now, with the holder's own figures: for a trial's record."""
        now = buddyinfo.read().to_json()
        return {"target": self.target.unusable, "unusable": now["unusable"],
                "free_kb": now["free_kb"], "free_huge_kb": now["free_huge_kb"],
                "zones": {k: z["unusable"] for k, z in now["zones"].items()},
                "made": (self.report.get("after") or {}).get("unusable"),
                "held_kb": self.report.get("held_kb"), "touched_kb": self.report.get("touched_kb"),
                "seconds": self.report.get("seconds"), "seed": self.target.seed,
                "missed": missed(self.report, self.target)}

    def release(self) -> None:
        p = self._proc
        if p is not None:
            with contextlib.suppress(OSError, ValueError):
                if p.stdin is not None:
                    p.stdin.close()  # the holder frees everything at end of input
            try:
                p.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(STOP_WAIT_S)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
            self._proc = None
        self._record.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        self.release()


# -- after a killed hugelab ------------------------------------------------------------------

def _holders_by_token(token: str) -> list[int]:
    """Live processes whose command line carries `--token <token>` of the holder module."""
    want = ["-m", HOLDER_MODULE, "--token", token]
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(argv[i:i + 4] == want for i in range(len(argv))):
            found.append(int(d.name))
    return found


def _record_holders(rec: dict[str, Any]) -> list[int]:
    if rec.get("boot_id") and rec.get("boot_id") != identity.boot_id():
        return []
    pids = _holders_by_token(str(rec.get("token") or ""))
    pid = rec.get("pid")
    if isinstance(pid, int) and identity.recorded_alive(rec, prefix="") and pid not in pids:
        pids.append(pid)  # its command line unreadable: its identity still names it
    return pids


def kill_leftover_fragmenters(state: Path | None = None) -> list[str]:
    """SIGKILL the holders of every record whose hugelab is gone (freeing all they held);
    remove their records. What it did, in words."""
    d = state or state_dir()
    done: list[str] = []
    if not d.is_dir():
        return done
    for path in sorted(d.glob(f"{RECORD_PREFIX}*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if identity.recorded_alive(rec):
            continue
        pids = _record_holders(rec)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        proc.wait_for(lambda r=rec: not _record_holders(r), 10.0)  # type: ignore[misc]
        if pids:
            done.append(f"killed fragment holder pid {', '.join(map(str, pids))} "
                        "(its memory is free again)")
        if not _record_holders(rec):
            path.unlink(missing_ok=True)
    return done


__all__ = ["FragmentTarget", "Fragmenter", "check_reachable", "kill_leftover_fragmenters",
           "missed"]
