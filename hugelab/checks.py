"""A check's outcome: whether measured evidence proves, contradicts or cannot judge what an arm
asked for. The vocabulary every evidence rule shares, host-side (hugelab.trial.evidence) and an
application's own (each workload kind's `judge`, read by hugelab.trial.appevidence). Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass

VERIFIED, CONTRADICTED, NOT_APPLICABLE = "verified", "contradicted", "not applicable"


@dataclass(frozen=True)
class Check:
    status: str  # VERIFIED | CONTRADICTED | NOT_APPLICABLE
    reason: str = ""
    layer: str = "workload"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)
