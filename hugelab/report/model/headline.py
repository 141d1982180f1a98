"""What the report says first: the answer's sentences, the recommendations and the warnings
(built by `hugelab.report.answer` and `hugelab.report.lead`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One sentence (or two) of the answer: what it is about, the words, its verdict."""

    subject: str
    text: str
    verdict: str
    scope: str = ""


@dataclass
class Lead:
    """What the report says first, in this order."""

    answers: list[Answer]
    recommendations: list[str]
    notes: list[str]  # warnings, each once
    loud: list[str] = field(default_factory=list)  # warnings that must stand out (TCG)

    @property
    def heading(self) -> str:
        return "What matters"

    def to_json(self) -> dict[str, Any]:
        """The JSON report's `answer`: the sentences every renderer prints first."""
        return {"what_matters": [{"subject": a.subject, "text": a.text, "verdict": a.verdict}
                                 for a in self.answers],
                "recommendations": list(self.recommendations),
                "warnings": [*self.loud, *self.notes]}
