"""A check's outcome: whether measured evidence proves, contradicts or cannot judge what an arm
asked for. The vocabulary every evidence rule shares, host-side (hugelab.trial.evidence) and an
application's own (each workload kind's `judge`, read by hugelab.trial.appevidence). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERIFIED, CONTRADICTED, NOT_APPLICABLE = "verified", "contradicted", "not applicable"


@dataclass(frozen=True)
class Check:
    status: str  # VERIFIED | CONTRADICTED | NOT_APPLICABLE
    reason: str = ""
    layer: str = "workload"
    # an application's own switch that decides its pages itself (Redis's `disable-thp yes`
    # under host THP always): where verified, the arm's backing says what the host offered,
    # not what the workload's pages must be (hugelab.trial.judge.layer_checks)
    governs: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "reason": self.reason, "layer": self.layer}
        if self.governs:
            out["governs"] = True
        return out
