"""The report's analysis: pure over a loaded run (arrays in, the typed `model.result.Result` out,
whose `to_json` is the JSON report).

Pairs are formed by block from trials with status "ok" only (flagged and failed trials never
count); a block missing either arm of a comparison is dropped from that comparison and
counted. Every comparison is `hugelab.stats.paired.compare` on the primary values, and the
report's comparisons are Holm-adjusted together (`hugelab.stats.multiple.adjust`).

Scale: every comparison uses every pair, however many: the Hodges-Lehmann shift and its
signed-rank intervals are exact order statistics of all Walsh averages (selected without
materialising them, ~0.4 s at 250,000 pairs), and block variance components are computed over
every block. Tails also use every pair: bootstrap intervals (at most `TAIL_BOOT_BUDGET`
resampled values, 200-2,000 resamples) up to `tails.BOOT_MAX_VALUES` pairs, distribution-free
order-statistic intervals above that (`hugelab.stats.tails`; the tails' notes say which).

Drift: every comparison also checks whether the effect itself changed over the run
(`hugelab.stats.drift.effect_drift` on the paired log-ratios in block order, at `DRIFT_ALPHA`):
pairing cancels drift common to both arms, not a fading or jumping effect. Its result is the
comparison's ``drift`` entry, and a drifting effect adds a warning.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hugelab.errors import UsageError
from hugelab.experiment import Experiment
from hugelab.report import answer, factorial, latency, lead, servercpu
from hugelab.report import repeats as replicated
from hugelab.report import weighing as cost_section
from hugelab.report.model.base import clean
from hugelab.report.model.comparison import Comparison, Drift, Tails
from hugelab.report.model.replicas import Repetition
from hugelab.report.model.result import (
    BlockVariance,
    Grid,
    Provenance,
    ReportOptions,
    Result,
    RunInfo,
)
from hugelab.report.model.series import Series
from hugelab.report.perseries import series_rows
from hugelab.report.poolnotes import pool_warnings, shared_pools
from hugelab.report.runload import RunData
from hugelab.report.startorder import StartOrder, start_order
from hugelab.report.turns import turns_note
from hugelab.stats import components, drift, grid, multiple, paired, tails, windows
from hugelab.stats._util import StatsInputError
from hugelab.stats.blocks import variance_components

TAIL_BOOT_BUDGET = 2_000_000
DRIFT_ALPHA = 0.01  # a warning, so conservative; Bonferroni over its two tests inside
TCG_WARNING = ("TCG (software emulation) ran some guest trials: TCG results do NOT represent "
               "hardware virtualization (KVM); do not read their numbers as guest performance")


@dataclass(frozen=True)
class Options:
    """What the user asked of the report."""

    alpha: float = 0.05
    margin: float = 0.01
    confidence: float = 0.9999
    pairs: tuple[tuple[str, str], ...] = ()  # (baseline, candidate) series names
    memory_margin: float | None = None  # None: the experiment's `costs.memory_margin`, or 2%


@dataclass
class Paired:
    """One comparison's complete pairs, in block order."""

    name: str
    baseline: str
    candidate: str
    blocks: NDArray[np.int64]
    b: NDArray[np.float64]
    c: NDArray[np.float64]
    better: str
    dropped: int
    notes: list[str] = field(default_factory=list)

    @property
    def log_ratio(self) -> NDArray[np.float64]:
        out: NDArray[np.float64] = np.log(self.c) - np.log(self.b)
        return out


@dataclass
class Report:
    """The analysis (`result`) plus the arrays the plots need."""

    data: RunData
    result: Result
    paired: list[Paired]

    def json(self) -> dict[str, Any]:
        """The JSON report."""
        return self.result.to_json()


# --- helpers ---------------------------------------------------------------------------------

def baseline_arm(run: dict[str, Any]) -> str | None:
    exp = run.get("experiment") or {}
    if exp.get("baseline"):
        return str(exp["baseline"])
    arms = exp.get("arms") or []
    return str(arms[0]["name"]) if arms else None


class Matrix:
    """ok values as a (blocks x series) matrix; NaN where a block has no usable value."""

    def __init__(self, data: RunData) -> None:
        self.blocks, inv = np.unique(data.block, return_inverse=True)
        shape = (self.blocks.size, len(data.series))
        self.values = np.full(shape, np.nan)
        self.present = np.zeros(shape, dtype=bool)
        self.present[inv, data.code] = True
        ok = (data.status == 0) & np.isfinite(data.value)
        self.values[inv[ok], data.code[ok]] = data.value[ok]
        self.nonpositive = np.sum(self.values <= 0, axis=0)
        self.values[self.values <= 0] = np.nan


def baselines(data: RunData) -> dict[str, str]:
    """Per arm, the arm it is compared with: the experiment's baseline, or in a factorial the
    baseline cell of the arm's own scenario."""
    base = baseline_arm(data.run)
    if base is None and data.series_arm:
        base = data.series_arm[0]
    exp = data.run.get("experiment") or {}
    if exp.get("factors"):
        model = Experiment.from_dict(exp)
        known = {a.name for a in model.arms}
        return {a: model.baseline_of(a) if a in known else str(base) for a in data.series_arm}
    return {a: str(base) for a in data.series_arm}


def default_pairs(data: RunData) -> list[tuple[str, str]]:
    """Each arm against its baseline arm (`baselines`) on the same target; on a target the
    baseline never ran on (a guest arm against a native baseline: "guest as % of native"),
    against the baseline's first series."""
    base_of = baselines(data)
    first: dict[str, int] = {}
    for i, a in enumerate(data.series_arm):
        first.setdefault(a, i)
    out = []
    for target in dict.fromkeys(data.series_target):
        idx = [i for i, t in enumerate(data.series_target) if t == target]
        for i in idx:
            b_arm = base_of[data.series_arm[i]]
            b = next((j for j in idx if data.series_arm[j] == b_arm), first.get(b_arm))
            if b is not None and b != i:
                out.append((data.series[b], data.series[i]))
    return out


def check_pairs(data: RunData, pairs: Sequence[tuple[str, str]]) -> None:
    known = set(data.series)
    for a, b in pairs:
        for name in (a, b):
            if name not in known:
                raise UsageError(f"--pair names '{name}', which is not an arm of this run",
                                 hint=f"arms: {', '.join(data.series)}")
        if a == b:
            raise UsageError(f"--pair {a}:{b} compares an arm with itself")


def _better(data: RunData, i: int, j: int, notes: list[str]) -> str:
    bi, bj = data.details[i].better, data.details[j].better
    chosen = bi or bj
    if bi and bj and bi != bj:
        notes.append(f"the arms disagree on which direction is better ({bi} vs {bj}); "
                     f"using the baseline's ({bi})")
    if chosen not in ("lower", "higher"):
        if not (data.details[i].sampled or data.details[j].sampled):  # a result says it
            notes.append("no ok trial in either arm: nothing to compare (see the failed trials)")
        else:
            notes.append("no trial says whether lower or higher is better: assuming lower (a time)")
        return "lower"
    return chosen


def make_paired(data: RunData, m: Matrix, base: str, cand: str) -> Paired:
    i, j = data.index(base), data.index(cand)
    b, c = m.values[:, i], m.values[:, j]
    both = np.isfinite(b) & np.isfinite(c)
    seen = m.present[:, i] | m.present[:, j]
    dropped = int(np.sum(seen & ~both))
    notes: list[str] = []
    if dropped:
        notes.append(f"{dropped} block(s) dropped: they lack an ok value of {base} or {cand} "
                     "(flagged, failed, missing or non-positive)")
    better = _better(data, i, j, notes)
    return Paired(f"{cand} vs {base}", base, cand, m.blocks[both], b[both], c[both], better,
                  dropped, notes)


# --- comparisons ------------------------------------------------------------------------------

def _compare(p: Paired, opts: Options, data: RunData, order: StartOrder | None = None
             ) -> paired.Comparison:
    # one pair per block, so the labels never repeat: the pair is the unit, every pair counts
    c = p.c if order is None else order.candidate(data.index(p.baseline),
                                                  data.index(p.candidate), p.b)
    return paired.compare(p.b, c, better=p.better,  # type: ignore[arg-type]
                          alpha=opts.alpha, margin=opts.margin, blocks=p.blocks)


def _tails(p: Paired) -> Tails | None:
    n = p.b.size
    if n < 10:
        return None
    boot = n <= tails.BOOT_MAX_VALUES
    n_boot = int(np.clip(TAIL_BOOT_BUDGET / n, 200, 2000))
    t = tails.compare_tails(p.b, p.c, better=p.better, n_boot=n_boot).to_dict()
    return Tails.from_json({**t, "n_boot": n_boot if boot else None, "pairs_used": int(n)})


def _drift(p: Paired) -> Drift:
    # blocks run one after another, so block order is run order
    return Drift.from_json(drift.effect_drift(p.log_ratio, p.blocks,
                                              alpha=DRIFT_ALPHA).to_dict())


def comparisons(data: RunData, m: Matrix, opts: Options,
                extra: dict[str, paired.Comparison] | None = None
                ) -> tuple[list[Paired], list[Comparison], dict[str, paired.Comparison]]:
    """Every cell against its baseline, Holm-adjusted together with `extra` claims (a
    factorial's effects), which come back adjusted."""
    pairs = list(opts.pairs) or default_pairs(data)
    check_pairs(data, pairs)
    ps = [make_paired(data, m, a, b) for a, b in pairs]
    order = start_order(data, m.blocks, m.values)  # request-interleaved runs only
    if order is not None:
        for p in ps:
            p.notes.append(order.note)
    if (turns := turns_note(data)) is not None:  # request-interleaved servers sharing CPUs
        for p in ps:
            p.notes.append(turns)
    raw = {p.name: _compare(p, opts, data, order) for p in ps}
    extra = {f"claim:{k}": v for k, v in (extra or {}).items()}
    adjusted = multiple.adjust({**raw, **extra}) if raw or extra else {}
    out = []
    for p in ps:
        c = adjusted[p.name]
        d = c.to_dict()
        d["notes"] = [*p.notes, *d["notes"]]  # too few pairs: stated once, as a warning
        split = replicated.regimes_of(p)
        out.append(Comparison(p.name, p.baseline, p.candidate, p.dropped, **d,
                              tails=_tails(p), drift=_drift(p), regimes=split,
                              load_effect=replicated.load_effect(p, data, split)))
    return ps, out, {k.removeprefix("claim:"): adjusted[k] for k in extra}


def factorial_section(data: RunData, m: Matrix, opts: Options
                      ) -> tuple[factorial.Plan | None, list[factorial.Claim], list[str]]:
    """The run's factorial layout, its unadjusted claims (none for a flat run) and the claims
    no block could estimate."""
    if opts.pairs:
        return None, [], []  # the user chose the comparisons: only those
    fp = factorial.plan(data.run, data.series_arm, m.values)
    if fp is None:
        return None, [], []
    better = next((d.better for d in data.details if d.better in ("lower", "higher")), "lower")
    claims, empty = factorial.claims(fp, better=str(better), alpha=opts.alpha,
                                     margin=opts.margin)
    return fp, claims, empty


# --- run level ----------------------------------------------------------------------------------

def block_components(data: RunData) -> BlockVariance | None:
    """Variance of log values between blocks after removing each series' mean."""
    ok = (data.status == 0) & (data.value > 0)
    if not np.any(ok):
        return None
    x = np.log(data.value[ok])
    code = data.code[ok]
    means = np.bincount(code, weights=x) / np.maximum(np.bincount(code), 1)
    resid = x - means[code]
    try:
        vc = variance_components(resid, data.block[ok]).to_dict()
    except StatsInputError as exc:
        return BlockVariance(error=exc.message)
    vc["note"] = None
    vc["reading_paired"] = ("blocks differ, and the paired analysis (pairs within a block) "
                            "removes that difference from every comparison"
                            if vc["pooling_warning"] else None)
    return BlockVariance.from_json(clean(vc))


def repetitions(data: RunData) -> list[Repetition] | None:
    """Per series whose boots ran several trials: the variance of log values between boots
    and within them, and the trials per boot that the run's own costs recommend (None when
    no trial has repetitions); for request-level windows, the split of each arm's effect."""
    if data.windows:
        return request_windows(data)
    if not data.reps:
        return None
    out = []
    for i, name in enumerate(data.series):
        boots = data.reps.get((data.series_arm[i], data.series_target[i]))
        if not boots:
            continue
        row: dict[str, Any] = {"name": name, "arm": data.series_arm[i],
                               "target": data.series_target[i]}
        try:
            row.update(components.repetitions(boots).to_dict())
        except StatsInputError as exc:
            row.update({"boots": len(boots), "k_run": float(median(len(b.values) for b in boots)),
                        "error": exc.message})
        out.append(Repetition.from_json(clean(row)))
    return out or None


def request_windows(data: RunData) -> list[Repetition] | None:
    """Per non-baseline arm of a request-level interleaved run: the variance of its trials'
    window estimates against the baseline, between trials and within them."""
    out = []
    for i, trials in sorted(data.windows.items()):
        row: dict[str, Any] = {"name": data.series[i], "arm": data.series_arm[i],
                               "target": data.series_target[i], "boots": len(trials),
                               "k_run": float(median(t[2] for t in trials)),
                               "effect_of": baseline_arm(data.run) or "the baseline"}
        try:
            split = windows.split_trials([t[0] for t in trials], [t[1] for t in trials])
        except StatsInputError as exc:
            row["error"] = exc.message
        else:
            row.update({"trials": split.trials, "var_between": split.var_between,
                        "var_within": split.var_within, "share_between": split.share_between,
                        "share_within": split.share_within, "notes": [
                            f"SD of its trials' effects {100 * split.var_total ** 0.5:.2g}%, "
                            f"a trial's own SE {100 * split.var_within ** 0.5:.2g}%"]})
        out.append(Repetition.from_json(clean(row)))
    return out or None


def _cell(data: RunData, i: int) -> tuple[str, str]:
    prov = data.details[i].provenance[0] if data.details[i].provenance else {}
    arms = {a.get("name"): a for a in (data.run.get("experiment") or {}).get("arms", [])}
    arm = arms.get(data.series_arm[i], {})
    host = (prov.get("host_backing") or arm.get("host_backing") or arm.get("backing")
            or prov.get("backing") or data.series_arm[i])
    target = data.series_target[i]
    guest = "native" if target == "native" else (
        prov.get("guest_backing") or arm.get("guest_backing") or target)
    return str(host), str(guest)


def grid_view(data: RunData, rows: list[Series]) -> Grid | None:
    """Host x guest medians and guests as % of native, when the run has guest targets."""
    if all(t == "native" for t in data.series_target):
        return None
    cells_of = [_cell(data, i) for i in range(len(data.series))]
    if len(set(cells_of)) < len(cells_of):  # two series in one cell: rows are arms instead
        cells_of = [(data.series_arm[i], g) for i, (_, g) in enumerate(cells_of)]
    cells = {c: r.median for c, r in zip(cells_of, rows, strict=True) if r.median}
    if not cells:
        return None
    g = grid.make_grid(cells)
    better = next((r.better for r in rows if r.better in ("lower", "higher")), "lower")
    out: dict[str, Any] = {"medians": g.to_dict(), "better": better, "percent_of_native": None}
    if grid.NATIVE in g.guests:
        out["percent_of_native"] = grid.percent_of_native(g, better=better).to_dict()
    return Grid.from_json(clean(out))


def provenance(data: RunData) -> Provenance:
    kernels: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    for d in data.details:
        for p in d.provenance:
            kernels[str(p.get("kernel"))] += 1
            versions[str(p.get("hugelab"))] += 1
    return Provenance(data.accel, dict(kernels), dict(versions))


def _too_few(c: Comparison) -> list[str]:
    """A comparison's warning when its pairs are fewer than its verdicts need at the report's
    alpha (exact minimums: any verdict, then an interval or faster/slower)."""
    n, unit = c.n_units, (c.unit or "pair") + ("s" if c.n_units != 1 else "")
    at = answer.level(c.alpha)
    if n < (need := answer.needed_for_any(c)):
        return [f"{c.name}: inconclusive: too few pairs ({n} {unit}, {need} needed for any "
                f"verdict at {at})"]
    if n < (need := answer.needed(c)) and c.verdict == "inconclusive":
        return [f"{c.name}: inconclusive: too few pairs for an interval or a faster/slower "
                f"verdict ({n} {unit}, {need} needed at {at}; an equivalence needs one fewer)"]
    return []


def _warnings(data: RunData, comps: list[Comparison], vc: BlockVariance | None,
              series: list[Series]) -> list[str]:
    out = [] if data.n_trials else ["the run has no trials yet"]
    if any("tcg" in a for a in data.accel.values()):
        out.append(TCG_WARNING)
    compared = lead.compared_arms(comps)
    for arm, why in (data.run.get("skipped") or {}).items():  # skipped, and in no comparison
        if arm not in compared:  # (a resumed run's arm may have trials of an earlier session)
            out.append(lead.skipped_warning(arm, why))
    for c in comps:
        out += _too_few(c)
        if c.blocks_dropped > 0.1 * (c.n + c.blocks_dropped):
            out.append(f"{c.name}: {c.blocks_dropped} block(s) dropped, more than 10% "
                       "(an arm had no ok trial there)")
        if c.pooling_warning:
            out.append(f"{c.name}: groups of consecutive blocks differ (design effect "
                       f"{c.design_effect:.2f}): the result drifted over the run")
        if c.drift is not None and c.drift.drifting:
            out.append(f"{c.name}: {c.drift.reading}")
    for s in series:
        load = s.monitors.load
        if load is not None and load.high:
            out.append(f"{s.name}: {load.reading}: a shift in the effects over the run "
                       "may be the machine's, not the backing's")
    if vc is not None and vc.pooling_warning:
        out.append("blocks differ from one another: only the paired (within-block) comparisons "
                   "are trustworthy; do not pool trials across blocks")
    if len(kernels := {str(p.get("kernel")) for d in data.details for p in d.provenance}) > 1:
        out.append(f"trials ran on {len(kernels)} different kernels: {', '.join(sorted(kernels))}")
    return out + pool_warnings((data.run.get("host") or {}).get("pool_holders") or [],
                               shared_pools(m for d in data.details for m in d.monitors),
                               {s: d.pool_failed for s, d in zip(data.series, data.details,
                                                                 strict=True)})


def _run_info(data: RunData) -> RunInfo:
    r = data.run
    exp = r.get("experiment") or {}
    return RunInfo.from_json(clean({"id": r.get("id"), "name": r.get("name"), "key": r.get("key"),
            "status": r.get("status"), "created": r.get("created"), "finished": r.get("finished"),
            "baseline": baseline_arm(r), "description": exp.get("description"),
            "workload": exp.get("workload"), "blocks_planned": exp.get("blocks"),
            "seed": exp.get("seed"), "skipped": r.get("skipped") or {},
            "sequential": r.get("sequential") or None, "design": exp.get("design", "paired"),
            "repeats": int(exp.get("repeats") or 1),
            "hardware_counters": (r.get("host") or {}).get("hardware_counters")}))


def memory_margin(data: RunData, opts: Options) -> float:
    """The margin beyond which a memory cost is stated: the report's option, else the
    experiment file's `[costs] memory_margin`, else 2%."""
    if opts.memory_margin is not None:
        return opts.memory_margin
    asked = (data.run.get("experiment") or {}).get("memory_margin")
    return float(asked) if isinstance(asked, int | float) else cost_section.MEMORY_MARGIN


def analyse(data: RunData, opts: Options = Options()) -> Report:
    """Everything the report shows (`Result`, whose JSON is the JSON report), plus the arrays
    the plots need."""
    m = Matrix(data)
    fp, claims, empty = factorial_section(data, m, opts)
    ps, comps, adjusted = comparisons(data, m, opts, {c.name: c.comparison for c in claims})
    family = len(comps) + len(claims)
    rows = series_rows(data, m.nonpositive, opts.confidence)
    fact = None
    if fp is not None:
        better = claims[0].comparison.better if claims else "lower"
        fact = factorial.view(fp, claims, adjusted, better=better, alpha=opts.alpha,
                              margin=opts.margin, family=family, empty=empty,
                              medians=[r.median for r in rows],
                              measured=factorial.measured(fp, data.costs.get("host_unusable", {}),
                                                          data.series_arm))
    vc = block_components(data)
    rep = replicated.replication(ps, data.run, alpha=opts.alpha, margin=opts.margin)
    result = Result(
        run=_run_info(data),
        options=ReportOptions(opts.alpha, opts.margin, opts.confidence, family),
        trials=data.n_trials, blocks=int(m.blocks.size),
        series=rows, comparisons=comps, block_variance=vc,
        grid=grid_view(data, rows), factorial=fact, provenance=provenance(data),
        repetitions=repetitions(data), replication=rep,
        tail_latency=latency.tail_latency(data.latency, ps, data, alpha=opts.alpha,
                                          margin=opts.margin),
        server_cpu=servercpu.server_cpu(data.server_cpu, ps, comps, data, alpha=opts.alpha,
                                        margin=opts.margin),
        costs=cost_section.costs(data.costs, ps, data, alpha=opts.alpha,
                                 margin=memory_margin(data, opts)),
        warnings=_warnings(data, comps, vc, rows) + replicated.warnings(comps, rep),
    )
    result.answer = lead.build(answer.Findings.of(result))  # what every renderer says first
    return Report(data=data, result=result, paired=ps)
