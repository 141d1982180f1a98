"""The lead block every renderer prints first: the answer (`answer`), the recommendations,
and the run's warnings said once each: a warning that many comparisons share becomes one line
with the count and the list ("20 comparisons: inconclusive: too few pairs ...").

Pure over the report's result dict; the HTML, terminal and Markdown renderers only format it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hugelab.report import answer


@dataclass
class Lead:
    """What the report says first, in this order."""

    answers: list[answer.Answer]
    recommendations: list[str]
    notes: list[str]  # warnings, each once
    loud: list[str] = field(default_factory=list)  # warnings that must stand out (TCG)

    @property
    def heading(self) -> str:
        return "What matters"


def fold(items: list[tuple[str, str]], total: int, what: str = "comparisons") -> list[str]:
    """(subject, text) pairs to lines: a text shared by several subjects is one line with
    their count and names ('3 comparisons: too few pairs: a, b, c'), or 'every one of the
    N comparisons' when all `total` share it. Order: first appearance."""
    by: dict[str, list[str]] = {}
    for subject, text in items:
        by.setdefault(text, [])
        if subject not in by[text]:
            by[text].append(subject)
    out = []
    for text, subjects in by.items():
        if len(subjects) == 1:
            out.append(f"{subjects[0]}: {text}")
        elif len(subjects) == total:
            out.append(f"all {total} {what}: {text}")
        else:
            out.append(f"{len(subjects)} {what}: {text} ({', '.join(subjects)})")
    return out


def warnings(result: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(loud, notes): the run's warnings with those about single comparisons folded."""
    names = answer.Names.of(result)
    comps = {c["name"]: c for c in result["comparisons"]}
    loud, plain, per = [], [], []
    for w in dict.fromkeys(result["warnings"]):
        name = next((n for n in comps if w.startswith(n + ": ")), None)
        if w.startswith("TCG"):
            loud.append(w)
        elif name is None:
            plain.append(w)
        else:
            c = comps[name]
            subject = names.pair(c)
            scope = names.scope(c["candidate"])
            per.append((f"{subject} [{scope}]" if scope else subject, w[len(name) + 2:]))
    return loud, plain + fold(per, len(comps))


def build(result: dict[str, Any]) -> Lead:
    loud, notes = warnings(result)
    return Lead(answer.answers(result), answer.recommendations(result), notes, loud)
