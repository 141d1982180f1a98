"""The lead block every renderer prints first: the answer (`answer`), the recommendations,
and the run's warnings said once each: a warning that many comparisons share becomes one line
with the count and the list ("20 comparisons: inconclusive: too few pairs ...").

Pure over the report's findings (`answer.Findings`); the HTML, terminal and Markdown renderers only format it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hugelab.report import answer
from hugelab.report.model.comparison import Comparison
from hugelab.report.model.headline import Lead
from hugelab.report.model.result import Result


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


COUNT = re.compile(r"(\d+) of (\d+) ")
LISTED = 4  # subjects a folded line names with their counts; more: the total (first screen)


def fold_counts(items: list[tuple[str, str]], what: str = "arms") -> list[str]:
    """(subject, text) pairs whose texts differ only in an 'N of M' count and parenthesised
    detail become one line listing each subject's count ('8 arms: trials under high machine
    load: ... (4k: 1 of 2, thp: 2 of 2)'); more than LISTED subjects, their total ('17 arms:
    ... (24 of 44 trials; each arm's ...)'), so that the answer stays on the first screen;
    the others stay as they are."""
    by: dict[str, list[tuple[str, str]]] = {}
    for subject, text in items:
        key = re.sub(r" ?\([^)]*\)", "", COUNT.sub("", text)) if COUNT.search(text) else text
        by.setdefault(key, []).append((subject, text))
    out = []
    for key, group in by.items():
        if len(group) == 1 or key == group[0][1]:
            out += [f"{s}: {t}" for s, t in group]
            continue
        found = [(s, m) for s, t in group if (m := COUNT.search(t))]
        if len(group) > LISTED and len(found) == len(group):
            n, of = (sum(int(m.group(i)) for _, m in found) for i in (1, 2))
            counts = (f"{n} of their {of} trials; each {what[:-1]}'s count in the evidence and "
                      "monitors table: --full, --md, --html")
        else:
            counts = "; ".join(f"{s}: {m.group().strip()}" if (m := COUNT.search(t)) else s
                               for s, t in group)
        out.append(f"{len(group)} {what}: {key} ({counts})")
    return out


def warnings(found: answer.Findings) -> tuple[list[str], list[str]]:
    """(loud, notes): the run's warnings with those about single comparisons folded, and
    those about single arms that differ only in their counts."""
    names = answer.Names.of(found.factorial)
    comps = {c.name: c for c in found.comparisons}
    series = sorted(found.series, key=len, reverse=True)
    loud, plain, per, arms = [], [], [], []
    for w in dict.fromkeys(found.warnings):
        name = next((n for n in comps if w.startswith(n + ": ")), None)
        arm = next((n for n in series if w.startswith(n + ": ")), None)
        if w.startswith("TCG"):
            loud.append(w)
        elif name is None and arm is not None:
            scope = names.scope(arm)
            arms.append((names.short(arm) + (f" [{scope}]" if scope else ""), w[len(arm) + 2:]))
        elif name is None:
            plain.append(w)
        else:
            c = comps[name]
            subject = names.pair(c)
            scope = names.scope(c.candidate)
            per.append((f"{subject} [{scope}]" if scope else subject, w[len(name) + 2:]))
    return loud, plain + fold(per, len(comps)) + fold_counts(arms)


def compared_arms(comps: Sequence[Comparison]) -> set[str]:
    """Every arm some comparison names (candidate or baseline)."""
    return {a for c in comps for a in (c.candidate, c.baseline)}


def skipped_warning(arm: str, why: str) -> str:
    """The warning for an arm the run skipped (its pool could not be had, ...)."""
    return f"arm {arm} was skipped, so it is in no comparison: {why}"


def build(found: answer.Findings) -> Lead:
    loud, notes = warnings(found)
    return Lead(answer.answers(found), answer.recommendations(found), notes, loud)


def of(result: Result) -> Lead:
    """The report's lead: the one the analysis built, or built now."""
    return result.answer or build(answer.Findings.of(result))
