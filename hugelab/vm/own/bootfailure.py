"""Why a guest failed to boot, for its error: a hint from QEMU's or the console's words, and the
last lines of its serial log."""

from __future__ import annotations

from pathlib import Path

SERIAL_TAIL_LINES = 25

_HINTS = (
    ("could not set up host forwarding", "a forwarded 127.0.0.1 port was taken between choosing "
     "it and starting QEMU: run the trial again"),
    ("unable to map backing store", "the host hugetlb pool is too small for the guest's RAM: "
     "reserve more pages (nr_hugepages) of that size, or use a smaller guest"),
    ("cannot allocate memory", "the host could not allocate guest RAM: reserve more huge pages "
     "or free host memory"),
    ("failed to set msr", "KVM is present but cannot run this guest: use accel='tcg'"),
    ("could not access kvm", "KVM is not usable here: use accel='tcg'"),
    ("kvm", "KVM failed: use accel='tcg' (or accel='auto' to probe)"),
    ("kernel panic", "the guest kernel panicked: see the serial log lines above"),
    ("hugelab-init: fatal", "the guest init failed: see the serial log lines above"),
)


def failure_hint(text: str) -> str:
    low = text.lower()
    for needle, hint in _HINTS:
        if needle in low:
            return hint
    return "see the QEMU and serial log lines above; try a larger boot timeout under TCG"


def log_tail(path: Path, n: int = SERIAL_TAIL_LINES) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def failure_detail(workdir: Path | None) -> str:
    """The last lines of a guest's QEMU log and serial console in its working directory."""
    if workdir is None:
        return ""
    parts = []
    qlog = log_tail(workdir / "qemu.log", 10)
    if qlog:
        parts.append("QEMU says:\n" + qlog)
    serial = log_tail(workdir / "serial.log")
    if serial:
        parts.append("serial console (last lines):\n" + serial)
    return "\n".join(parts)

