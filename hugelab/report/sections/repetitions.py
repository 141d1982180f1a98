"""Variance between boots and within them (or, interleaved, between trials and within their
windows), for series whose boots ran several trials."""

from __future__ import annotations

from hugelab.report.model.replicas import KChoice, Repetition
from hugelab.report.model.result import Result
from hugelab.report.table import Table, num

REPS_NOTE = ("spend repetitions where the variance is: when most of it lies between boots, only "
             "more boots help; when most lies within a boot, more trials per boot average it "
             "away at a fraction of a boot's cost. recommended k = sqrt((boot cost / trial "
             "cost) x within / between), costs as measured in this run (Kalibera & Jones, ISMM "
             "2013); set it as trials_per_boot in the arm's [arms.vm]")


WINDOWS_NOTE = ("between trials: placement (where each buffer's memory landed) and anything "
                "that differs from one process to the next; within: what the windows of one "
                "trial disagree on, drift included, which cancels in the paired ratio because "
                "every buffer is measured within milliseconds of the others. More windows per "
                "trial (a longer duration, or shorter windows) shrink only the within part; "
                "more trials (blocks) shrink both.")


def _share(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _k_notes(r: Repetition, rec: KChoice | None) -> list[str]:
    if rec is None:
        return [f"{r.name}: no recommended k: the run recorded no boot or trial wall times"]
    return [f"{r.name}: k = {rec.k} measures a boot mean {rec.gain_vs_k1:.2g}x as precisely "
            f"per second of wall time as k = 1 (a boot costs {rec.cost_boot_s:.3g} s beyond "
            f"its workload, a trial {rec.cost_trial_s:.3g} s)",
            *(f"{r.name}: {n}" for n in rec.notes)]


def repetitions(result: Result) -> list[Table]:
    """Variance between boots and within them, for series whose boots ran several trials."""
    reps = result.repetitions
    if not reps:
        return []
    if result.run.design == "interleaved":
        return [_windows_table(reps)]
    t = Table("repetitions", "Repetitions within boots (variance of log values)",
              ["arm", "boots", "k", "between boots", "within boots", "recommended k"], [],
              right={1, 2, 3, 4, 5})
    for r in reps:
        k_run = num(r.k_run, "g")
        if r.error is not None:
            t.rows.append([r.name, f"{r.boots:,}", k_run, "-", "-", "-"])
            t.notes.append(f"{r.name}: {r.error}")
            continue
        rec = r.recommended
        t.rows.append([r.name, f"{r.boots:,}", k_run, _share(r.share_between),
                       _share(r.share_within), "-" if rec is None else str(rec.k)])
        t.notes += _k_notes(r, rec)
        t.notes += [f"{r.name}: {n}" for n in r.notes or []]
    t.notes.append(REPS_NOTE)
    return [t]


REQUESTS_NOTE = ("each arm's effect against the baseline, trial by trial: between trials is "
                 "what fresh servers differ in (where each one's memory landed); within is the "
                 "uncertainty its request windows leave in one trial's estimate (batch means). "
                 "When most lies between trials, longer trials or more windows buy nothing: add "
                 "trials (blocks); when most lies within, a longer duration_s sharpens each.")


def _windows_table(reps: list[Repetition]) -> Table:
    """design 'interleaved': each arm's windows within trials. No recommended count: an arm's
    within-trial variance holds the drift that cancels in the paired ratio, so it would
    overstate what more windows buy. Request-level windows split each arm's effect."""
    requests = any(r.effect_of for r in reps)
    t = Table("repetitions", "Request windows within trials (variance of each arm's effect)"
              if requests else "Windows within trials (variance of log values)",
              ["arm", "trials", "windows", "between trials", "within trials"], [],
              right={1, 2, 3, 4})
    for r in reps:
        if r.error is not None:
            t.rows.append([r.name, f"{r.boots:,}", num(r.k_run, "g"), "-", "-"])
            t.notes.append(f"{r.name}: {r.error}")
            continue
        t.rows.append([r.name, f"{r.boots:,}", num(r.k_run, "g"),
                       _share(r.share_between), _share(r.share_within)])
        t.notes += [f"{r.name}: {n}" for n in r.notes or []]
    t.notes.append(REQUESTS_NOTE if requests else WINDOWS_NOTE)
    return t
