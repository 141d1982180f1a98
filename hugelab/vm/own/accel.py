"""Which accelerator guests get: KVM when a probe guest really boots under it, else TCG.

`/dev/kvm` existing proves little (on some machines it opens but cannot run a distro kernel), so
the probe boots a small guest under KVM and waits for the agent's answer (the boot itself is
passed in, `boot`: hugelab.vm.own.guest.probe_accel passes its own, so this module needs no Guest). The answer is cached per
kernel image for the life of the process; `probe_reason()` says why.

A probe that fails waits until its guest has been silent on the console for PROBE_SILENCE_S (a
kernel that cannot run under this KVM never prints a line), or for its whole timeout when the
guest prints but its agent never answers; so the answer is also kept on disk, in the cache directory's `accel/`, keyed by what
decides it: the kernel image's content, the QEMU binary (path, size, mtime), /dev/kvm's state
and the host's boot (its boot_id). A host rebooted, a new kernel or QEMU, or /dev/kvm changed
probes again; a cached answer's reason says when it was probed. Deleting the directory forces a
new probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hugelab import owned

PROBE_TIMEOUT_S = 30.0
# A probe guest whose console stays empty this long failed: under a working KVM the kernel
# reaches our init, which prints first thing, in about a second; a kernel that cannot run
# under this KVM spins silently (PVM's /dev/kvm with a distro kernel) and never would.
PROBE_SILENCE_S = 10.0
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


def disk_key(kernel: Path, qemu: str) -> str | None:
    """The on-disk cache key of a probe: what decides its answer (None when some part cannot
    be read, e.g. an unreadable kernel: then nothing is cached)."""
    binary = shutil.which(qemu)
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        st = Path(binary).stat() if binary else None
        parts = {"kernel": owned.file_sha256(kernel), "qemu": binary,
                 "qemu_stat": [st.st_size, st.st_mtime_ns] if st else None,
                 "kvm": kvm_openable(), "boot_id": boot_id}
    except OSError:
        return None
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _read_disk(key: str) -> tuple[str, str] | None:
    try:
        rec = json.loads((owned.cache_path("accel") / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("accel") not in ("kvm", "tcg"):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(rec.get("probed_at", 0))))
    return rec["accel"], f"{rec.get('reason', '')} (probed at {when} this boot, cached)"


def _write_disk(key: str, answer: tuple[str, str]) -> None:
    """Kept 0600 in a 0700 directory, written whole (rename) so a reader never sees half."""
    try:
        where = owned.cache_dir("accel")
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"accel": answer[0], "reason": answer[1], "probed_at": time.time()}, f)
        os.replace(tmp, where / f"{key}.json")
    except OSError:
        pass  # a cache that cannot be written costs the next process a probe, nothing else


def probe_accel(kernel: str | Path | None = None, *, boot: BootProbe,
                qemu: str = "qemu-system-x86_64", timeout: float = PROBE_TIMEOUT_S) -> str:
    """"kvm" if a guest with this kernel boots under KVM (agent answers), else "tcg"."""
    from hugelab.vm.own.initramfs import default_kernel

    k = Path(kernel) if kernel else default_kernel()
    key = (str(k.resolve()), qemu)
    with _LOCK:
        if key not in _CACHE:
            on_disk = disk_key(k, qemu)
            hit = _read_disk(on_disk) if on_disk else None
            if hit is None:
                hit = _probe(k, qemu, timeout, boot)
                if on_disk:
                    _write_disk(on_disk, hit)
            _CACHE[key] = hit
        return _CACHE[key][0]


def probe_reason(kernel: str | Path | None = None, *, qemu: str = "qemu-system-x86_64") -> str | None:
    """Why the cached probe for `kernel` chose its accelerator (None if never probed)."""
    from hugelab.vm.own.initramfs import default_kernel

    k = Path(kernel) if kernel else default_kernel()
    hit = _CACHE.get((str(k.resolve()), qemu))
    return hit[1] if hit else None


def clear_cache() -> None:
    _CACHE.clear()
