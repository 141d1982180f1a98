"""Which accelerator guests get: KVM when a probe guest really boots under it, else TCG.

`/dev/kvm` existing proves little (on some machines it opens but cannot run a distro kernel), so
the probe boots a small guest under KVM and waits for the agent's answer (the boot itself is
passed in, `boot`: hugelab.vm.own.guest.probe_accel passes its own, so this module needs no Guest). The answer is cached per
kernel image for the life of the process; `probe_reason()` says why.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

PROBE_TIMEOUT_S = 30.0
_CACHE: dict[tuple[str, str], tuple[str, str]] = {}
_LOCK = threading.Lock()  # guests starting together probe once


def kvm_openable(dev: str = "/dev/kvm") -> str | None:
    """None when /dev/kvm can be opened read-write, else the reason it cannot."""
    try:
        fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"{dev}: {exc.strerror}"
    os.close(fd)
    return None


# Boots a probe guest under KVM with this kernel and qemu within the timeout; None when it
# booted and ran a command, else the reason it did not (hugelab.vm.own.guest provides it).
BootProbe = Callable[[Path, str, float], "str | None"]


def _probe(kernel: Path, qemu: str, timeout: float, boot: BootProbe) -> tuple[str, str]:
    reason = kvm_openable()
    if reason is not None:
        return "tcg", reason
    failed = boot(kernel, qemu, timeout)
    if failed is not None:
        return "tcg", failed
    return "kvm", "probe guest booted under KVM"


def probe_accel(kernel: str | Path | None = None, *, boot: BootProbe,
                qemu: str = "qemu-system-x86_64", timeout: float = PROBE_TIMEOUT_S) -> str:
    """"kvm" if a guest with this kernel boots under KVM (agent answers), else "tcg"."""
    from hugelab.vm.own.initramfs import default_kernel

    k = Path(kernel) if kernel else default_kernel()
    key = (str(k.resolve()), qemu)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = _probe(k, qemu, timeout, boot)
        return _CACHE[key][0]


def probe_reason(kernel: str | Path | None = None, *, qemu: str = "qemu-system-x86_64") -> str | None:
    """Why the cached probe for `kernel` chose its accelerator (None if never probed)."""
    from hugelab.vm.own.initramfs import default_kernel

    k = Path(kernel) if kernel else default_kernel()
    hit = _CACHE.get((str(k.resolve()), qemu))
    return hit[1] if hit else None


def clear_cache() -> None:
    _CACHE.clear()
