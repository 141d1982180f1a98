"""A check's outcome: whether measured evidence proves, contradicts or cannot judge what an arm
asked for. The vocabulary every evidence rule shares, host-side (hugelab.trial.evidence) and an
application's own (each workload kind's `judge`, read by hugelab.trial.appevidence). Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass

VERIFIED, CONTRADICTED, NOT_APPLICABLE = "verified", "contradicted", "not applicable"


def human_kb(kb: float) -> str:
    """1239040 -> '1.2 GiB', 6144 -> '6.0 MiB', 340 -> '340 kB'."""
    if kb >= 1 << 20:
        return f"{kb / (1 << 20):.1f} GiB"
    if kb >= 1 << 10:
        return f"{kb / (1 << 10):.1f} MiB"
    return f"{kb:.0f} kB"


@dataclass(frozen=True)
class Check:
    status: str  # VERIFIED | CONTRADICTED | NOT_APPLICABLE
    reason: str = ""
    layer: str = "workload"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
