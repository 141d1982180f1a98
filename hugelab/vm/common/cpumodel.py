"""The guest CPU model hugelab asks of QEMU, in one place: the host's own under KVM
(`-cpu host`, libvirt's `host-passthrough`), QEMU's `max` under TCG (libvirt's `maximum`).

`TCG_FEATURES_OFF` names CPUID features to leave out of `max` under TCG; none are. Measured
(docs/benchmarks.md, "Guests under TCG: the CPU model"): without ERMS and FSRM a guest program
copying 64 MiB twenty times ran 2-3 times faster, but examples/001's trials with guest THP
`always` took 2-6 times longer (the guest kernel clears its huge pages without `rep stosb`), so
the whole example ran slower: `max` as it is stays.
"""

from __future__ import annotations

TCG_FEATURES_OFF: tuple[str, ...] = ()  # bench/tcg_cpu.py sets it to compare


def qemu_cpu(accel: str) -> str:
    """`-cpu` for a guest resolved to `accel` (kvm or tcg)."""
    if accel == "kvm":
        return "host"
    return ",".join(["max", *(f"{f}=off" for f in TCG_FEATURES_OFF)])


def libvirt_cpu(accel: str) -> tuple[str, tuple[str, ...]]:
    """libvirt's `<cpu mode=...>` and the features it disables, for the CPU of qemu_cpu."""
    if accel == "kvm":
        return "host-passthrough", ()
    return "maximum", TCG_FEATURES_OFF
