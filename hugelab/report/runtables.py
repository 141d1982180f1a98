"""The report's tables as plain strings: one layout, rendered by text, Markdown and HTML.

Nothing here escapes: every renderer escapes every cell for its own format.
"""

from __future__ import annotations

from typing import Any

# Table and the cell formatters live in hugelab.report.table; re-exported here for the renderers
from hugelab.report import answer, lead, repeats
from hugelab.report.table import Table as Table
from hugelab.report.table import num as num
from hugelab.report.table import pct as pct
from hugelab.report.table import pval as pval
from hugelab.report.table import ratio as ratio
from hugelab.stats.drift import part_name


def verdict_text(c: dict[str, Any]) -> str:
    v = str(c["verdict"])
    if v in ("faster", "slower") and c.get("within_margin"):
        v += f" (within ±{100 * c['margin']:g}%)"
    return v


SAID_AS_WARNING = "needed for any verdict"


def comparison_label(result: dict[str, Any], c: dict[str, Any]) -> str:
    """A comparison by the levels that differ ('thp vs 4k [workload=chase]'); its name in a
    flat run."""
    names = answer.Names.of(result)
    scope = names.scope(c["candidate"])
    return names.pair(c) + (f" [{scope}]" if scope else "")


def series_label(result: dict[str, Any], name: str) -> str:
    """An arm by its levels ('thp [workload=chase]'); its name in a flat run."""
    names = answer.Names.of(result)
    scope = names.scope(name)
    return names.short(name) + (f" [{scope}]" if scope else "")


def folded(result: dict[str, Any], notes: list[tuple[str, str]], total: int,
           what: str = "comparisons") -> list[str]:
    """Per-row notes with the ones many rows share said once (`lead.fold`)."""
    return lead.fold(notes, total, what)


def header(result: dict[str, Any]) -> str:
    run = result["run"]
    base = f"baseline '{run['baseline']}'"
    fact = result.get("factorial") or {}
    if any(f["scenario"] and len(f["levels"]) > 1 for f in fact.get("factors", [])):
        base = f"baseline cell '{str(run['baseline']).split(' [')[0]}' of each scenario"
    return (f"run {run['id']} '{run['name']}' ({run['status']}): {result['trials']:,} trials in "
            f"{result['blocks']:,} blocks; {base}")


def verdicts(result: dict[str, Any]) -> Table:
    o = result["options"]
    conf = 100 * (1 - o["alpha"])
    family = f"{o['holm_family']} claims" if result.get("factorial") else \
        f"{o['holm_family']} comparison(s)"
    t = Table("verdicts", f"Paired verdicts (by block; Holm across {family}, "
              f"alpha {o['alpha']:g}, equivalence margin ±{100 * o['margin']:g}%)",
              ["comparison", "verdict", f"effect [{conf:g}% CI]", "p", "TOST p", "n"], [],
              right={2, 3, 4, 5}, full=bool(result.get("factorial")))
    per: list[tuple[str, str]] = []
    for c in result["comparisons"]:
        name = comparison_label(result, c)
        t.rows.append([name, verdict_text(c), _effect(c), pval(c["p_adjusted"]),
                       pval(c["tost_p_adjusted"]), f"{c['n_units']:,} {c['unit']}s"])
        if c["blocks_dropped"]:
            per.append((name, f"{c['blocks_dropped']} block(s) dropped (an arm missing)"))
        # too few pairs is one of the report's warnings: say it once
        per += [(name, n) for n in c["notes"] if SAID_AS_WARNING not in n]
    t.notes += folded(result, per, len(result["comparisons"]))
    t.notes += no_interval_note(result["comparisons"])
    t.notes.append("p and TOST p are Holm-adjusted across the comparisons of this report")
    if not result["comparisons"]:
        t.notes.append("no comparisons: the run has a single arm or no baseline arm")
    t.notes.append("effect: Hodges-Lehmann shift of the paired log-ratios, candidate vs "
                   "baseline (negative = smaller values)")
    return t


def _drift_cell(dr: dict[str, Any]) -> str:
    if not dr["checked"]:
        return "not checked"
    return "CHANGED" if dr["drifting"] else "none detected"


def drift(result: dict[str, Any]) -> Table:
    """The effect in the first and last segment of the run, and whether it changed."""
    comps = [c for c in result["comparisons"] if c.get("drift")]
    first: dict[str, Any] = comps[0]["drift"] if comps else {"segments": 3, "alpha": 0.01}
    part, alpha = part_name(first["segments"]), first["alpha"]
    t = Table("drift", f"Drift of the effect over the run (alpha {alpha:g})",
              ["comparison", f"first {part}", f"last {part}", "trend ρ", "p", "change"], [],
              right={1, 2, 3, 4}, full=not any(c["drift"].get("drifting") for c in comps))
    per: list[tuple[str, str]] = []
    for c in comps:
        dr = c["drift"]
        if dr["checked"]:
            t.rows.append([comparison_label(result, c), pct(dr["first_pct"], 1),
                           pct(dr["last_pct"], 1), num(dr["rho"], "+.2f"), pval(dr["p_value"]),
                           _drift_cell(dr)])
        if dr["drifting"] or not dr["checked"]:
            per.append((comparison_label(result, c), dr["reading"]))
    t.notes += folded(result, per, len(comps))
    if comps and not t.rows:
        return t  # nothing checked: one line, no table of dashes
    if comps:
        t.notes.append(f"segments: Hodges-Lehmann effect of the first and last {part} of the pairs "
                       "in block order; p: Spearman trend with block order and Mann-Whitney "
                       "first vs last, Bonferroni over the two. Pairing cancels drift common to "
                       "both arms; this checks drift of the effect itself")
    return t


def classic(result: dict[str, Any]) -> Table:
    conf = 100 * result["options"]["confidence"]
    t = Table("classic", f"Classic table (t-based margin at {conf:g}% confidence; for reference)",
              ["arm", "mean", "N", "σ", "min", "max", "±MoE", ">3σ", ">6σ", "max σ", "norm p"],
              [], right=set(range(1, 11)), full=True)
    t.notes.append(f"σ: standard deviation; ±MoE: t-based margin of error of the mean at "
                   f"{conf:g}%; >3σ, >6σ: values beyond mean ± 3σ / 6σ (high/low); max σ: the "
                   "farthest value in σ; norm p: normality test")
    per: list[tuple[str, str]] = []
    for s in result["series"]:
        c = s["classic"]
        name = series_label(result, s["name"])
        if c is None:
            t.rows.append([name, *(["-"] * 10)])
            continue
        t.rows.append([name, num(c["mean"]), f"{c['n']:,}", num(c["stddev"]),
                       num(c["min"]), num(c["max"]), num(c["margin_of_error"]),
                       f"{c['beyond_3sigma_high']}/{c['beyond_3sigma_low']}",
                       f"{c['beyond_6sigma_high']}/{c['beyond_6sigma_low']}",
                       num(c["max_sigma"], ".1f"), pval(c["normality"]["p_value"])])
        per.append((name, f"{c['normality']['reading']} (expected beyond 3σ if normal: "
                          f"{c['expected_beyond_3sigma']:.1f})"))
    t.notes += folded(result, per, len(result["series"]), "arms")
    return t


def tails(result: dict[str, Any]) -> Table:
    t = Table("tails", "Tails (candidate / baseline; intervals: bootstrap, or order statistics above 20,000 values)",
              ["comparison", "p95 ratio", "p99 ratio", "outl. base", "outl. cand",
               "outl. diff"], [], right={1, 2, 3, 4, 5}, full=True)
    t.notes.append("p95/p99 ratio: the candidate's percentile over the baseline's [interval]; "
                   "outl. base/cand: share of each arm's values that are outliers (robust z "
                   "beyond the fence), outl. diff: candidate minus baseline [interval]")
    per: list[tuple[str, str]] = []
    for c in result["comparisons"]:
        tl = c.get("tails")
        name = comparison_label(result, c)
        if not tl:
            per.append((name, "fewer than 10 pairs, no tail estimates"))
            continue
        qs = {round(q["q"], 4): q for q in tl["quantiles"]}
        cells = [f"{ratio(q['ratio'])} [{ratio(q['low'])}, {ratio(q['high'])}]"
                 if (q := qs.get(k)) else "no estimate" for k in (0.95, 0.99)]
        o = tl["outliers"]
        t.rows.append([name, *cells, f"{100 * o['baseline_rate']:.2f}%",
                       f"{100 * o['candidate_rate']:.2f}%",
                       f"{pct(100 * o['difference'])} [{pct(100 * o['low'])}, "
                       f"{pct(100 * o['high'])}]"])
        per += [(name, n) for n in tl["notes"]]
    if not t.rows:
        t.notes = []  # the legend explains nothing when no row is shown
    t.notes += folded(result, per, len(result["comparisons"]))
    return t


def tail_latency(result: dict[str, Any]) -> list[Table]:
    """Per-percentile latency verdicts (report/latency.py), when the workload reports them."""
    tl = result.get("tail_latency")
    if not tl or not tl.get("entries"):
        return []
    conf = 100 * (1 - result["options"]["alpha"])
    t = Table("tail_latency", f"Tail latency (lower is better; Holm across "
              f"{tl['holm_family']} percentiles)",
              ["comparison", "percentile", "verdict", f"effect [{conf:g}% CI]", "p", "n"], [],
              right={3, 4, 5})
    for e in tl["entries"]:
        t.rows.append([e["comparison"], e["metric"], verdict_text(e), _effect(e),
                       pval(e["p_adjusted"]), f"{e['n_units']:,}"])
    t.notes.append("each percentile of each trial (from the workload's own per-request "
                   "latencies) paired by block like the primary metric; 'faster' = a lower "
                   "latency")
    t.notes += no_interval_note(tl["entries"])
    return [t]


def trials(result: dict[str, Any]) -> Table:
    t = Table("trials", "Trials per arm (only ok trials count)",
              ["arm", "ok", "flagged", "failed", "why flagged / failed"], [], right={1, 2, 3})
    for s in result["series"]:
        why = [f"{r['count']}x {r['reason']}" for r in s["flag_reasons"][:3]]
        why += [f"{r['count']}x failed: {r['reason']}" for r in s["error_reasons"][:3]]
        why += [f"{r['count']}x retried after: {r['reason']}"
                for r in s.get("retry_reasons", [])[:3]]
        k = s["counts"]
        t.rows.append([series_label(result, s["name"]), f"{k['ok']:,}", f"{k['flagged']:,}",
                       f"{k['failed']:,}", "; ".join(why) or "-"])
    if t.rows and all(r[2] == r[3] == "0" and r[4] == "-" for r in t.rows):
        ok = sorted({s["counts"]["ok"] for s in result["series"]})
        each = f"{ok[0]:,} per arm" if len(ok) == 1 else f"{ok[0]:,} to {ok[-1]:,} per arm"
        t.notes.append(f"every trial ok, none flagged, failed or retried ({each})")
        t.rows = []
    return t


def evidence(result: dict[str, Any]) -> Table:
    t = Table("evidence", "Evidence and monitors (sampled ok trials)",
              ["arm", "mapping evidence", "THP faults (host-wide vmstat)", "sampled"], [], right={3})
    for s in result["series"]:
        t.rows.append([series_label(result, s["name"]), s["evidence"]["reading"],
                       s["monitors"]["reading"],
                       str(s["details_sampled"])])
    return t


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


def repetitions(result: dict[str, Any]) -> list[Table]:
    """Variance between boots and within them, for series whose boots ran several trials."""
    reps = result.get("repetitions")
    if not reps:
        return []
    if (result.get("run") or {}).get("design") == "interleaved":
        return [_windows_table(reps)]
    t = Table("repetitions", "Repetitions within boots (variance of log values)",
              ["arm", "boots", "k", "between boots", "within boots", "recommended k"], [],
              right={1, 2, 3, 4, 5})
    for r in reps:
        k_run = num(r.get("k_run"), "g")
        if "error" in r:
            t.rows.append([r["name"], f"{r['boots']:,}", k_run, "-", "-", "-"])
            t.notes.append(f"{r['name']}: {r['error']}")
            continue
        rec = r.get("recommended")
        t.rows.append([r["name"], f"{r['boots']:,}", k_run, _share(r["share_between"]),
                       _share(r["share_within"]), "-" if rec is None else str(rec["k"])])
        if rec is None:
            t.notes.append(f"{r['name']}: no recommended k: the run recorded no boot or trial "
                           "wall times")
        else:
            t.notes.append(f"{r['name']}: k = {rec['k']} measures a boot mean "
                           f"{rec['gain_vs_k1']:.2g}x as precisely per second of wall time as "
                           f"k = 1 (a boot costs {rec['cost_boot_s']:.3g} s beyond its "
                           f"workload, a trial {rec['cost_trial_s']:.3g} s)")
            t.notes += [f"{r['name']}: {n}" for n in rec["notes"]]
        t.notes += [f"{r['name']}: {n}" for n in r.get("notes") or []]
    t.notes.append(REPS_NOTE)
    return [t]


def _windows_table(reps: list[dict[str, Any]]) -> Table:
    """design 'interleaved': each arm's windows within trials. No recommended count: an arm's
    within-trial variance holds the drift that cancels in the paired ratio, so it would
    overstate what more windows buy."""
    t = Table("repetitions", "Windows within trials (variance of log values)",
              ["arm", "trials", "windows", "between trials", "within trials"], [],
              right={1, 2, 3, 4})
    for r in reps:
        if "error" in r:
            t.rows.append([r["name"], f"{r['boots']:,}", num(r.get("k_run"), "g"), "-", "-"])
            t.notes.append(f"{r['name']}: {r['error']}")
            continue
        t.rows.append([r["name"], f"{r['boots']:,}", num(r.get("k_run"), "g"),
                       _share(r["share_between"]), _share(r["share_within"])])
    t.notes.append(WINDOWS_NOTE)
    return t


def grid_tables(result: dict[str, Any]) -> list[Table]:
    g = result.get("grid")
    if not g:
        return []
    out = []
    for key, title, spec in (("medians", "Host x guest medians", "{:.4g}"),
                             ("percent_of_native", "Guest as % of native (100 = as fast)",
                              "{:.1f}%")):
        if not g.get(key):
            continue
        gr = g[key]
        rows = [["host \\ guest", *gr["guests"]]]
        for host, vals in zip(gr["hosts"], gr["values"], strict=True):
            rows.append([host, *("-" if v is None else spec.format(v) for v in vals)])
        out.append(Table(f"grid_{key}", title, rows[0], rows[1:],
                         right=set(range(1, len(rows[0])))))
    return out


def context_lines(result: dict[str, Any]) -> list[str]:
    """Block variance, sequential stop, skipped arms and provenance as sentences."""
    out = []
    vc = result.get("block_variance")
    if vc and vc.get("pooling_warning") and "icc" in vc:  # the warning said the rest
        out.append(f"blocks: ICC {vc['icc']:.2f}, design effect {vc['design_effect']:.2f}")
    elif vc and "reading" in vc:
        out.append(f"blocks: {vc['reading']}")
        if vc.get("note"):
            out.append(f"blocks: {vc['note']}")
    seq = result["run"].get("sequential")
    if seq:
        at = seq.get("stopped_at_look")
        looks = (seq.get("plan") or {}).get("looks")
        out.append("sequential: " + (f"stopped at look {at} of {looks}" if at
                                     else f"ran every planned look ({looks})"))
    for arm, why in (result["run"].get("skipped") or {}).items():
        out.append(f"skipped arm {arm}: {why}")
    acc = result["provenance"]["accel_by_target"]
    if acc:
        out.append("accelerator per target: " + ", ".join(f"{t}={'/'.join(a)}"
                                                          for t, a in acc.items()))
    hw = result["run"].get("hardware_counters")
    if hw:
        out.append("hardware counters (dTLB misses, page walks): " +
                   ("recorded per trial with perf stat" if hw.get("available")
                    else f"not available: {hw.get('reason')}"))
    kern = result["provenance"]["kernels"]
    if kern:
        out.append("kernels: " + ", ".join(sorted(kern)))
    return out


def what_matters(result: dict[str, Any]) -> str | None:
    """A factorial's one-paragraph summary (None for a flat run)."""
    f = result.get("factorial")
    return str(f["summary"]) if f else None


def _effect(e: dict[str, Any]) -> str:
    """'+1.2% [-0.3, +2.5]', or '-40.1% (no CI)' (`no_interval_note` says why once)."""
    if e.get("effect_pct") is not None and not answer.has_interval(e):
        return f"{answer.pct(e['effect_pct'])} (no CI)"
    return answer.interval(e)


def no_interval_note(entries: list[dict[str, Any]]) -> list[str]:
    """Why some rows have no interval, said once for the table."""
    few = sorted({e["n_units"] for e in entries
                  if e.get("effect_pct") is not None and not answer.has_interval(e)})
    if not few:
        return []
    have = ", ".join(str(n) for n in few)
    return [f"(no CI): no interval yet: one needs at least {answer.MIN_UNITS} pairs (blocks); "
            f"those rows have {have}"]


def factor_tables(result: dict[str, Any]) -> list[Table]:
    """Main effects (overall and per scenario) and two-way interactions of a factorial."""
    f = result.get("factorial")
    if not f:
        return []
    o = result["options"]
    conf = 100 * (1 - o["alpha"])
    main = Table("main_effects", f"Main effects of each factor (within-block contrasts; Holm "
                 f"across {o['holm_family']} claims)",
                 ["factor: level vs baseline", "verdict", f"effect [{conf:g}% CI]", "p", "n"],
                 [], right={2, 3, 4})
    scoped = Table("main_effects_scenarios", "Main effects in each scenario",
                   ["factor: level vs baseline", "scenario", "verdict", f"effect [{conf:g}% CI]",
                    "p", "n"], [], right={3, 4, 5}, full=True)
    for e in f["main_effects"]:
        row = [e["name"].split(" [")[0], verdict_text(e), _effect(e), pval(e["p_adjusted"]),
               f"{e['n_units']:,} blocks"]
        if e["scope"] == "overall":
            main.rows.append(row)
        else:
            scoped.rows.append([row[0], e["scope"], *row[1:]])
    main.notes.append("a main effect averages the level's effect over every other factor's "
                      "levels, within each block, over every scenario")
    main.notes += no_interval_note(f["main_effects"])
    inter = Table("interactions", "Two-way interactions (does one factor's effect depend on "
                  "another's level?)", ["interaction", "verdict", f"change [{conf:g}% CI]", "p"],
                  [], right={2, 3})
    for e in f["interactions"]:
        inter.rows.append([e["name"], e["interaction_verdict"], _effect(e),
                           pval(e["p_adjusted"])])
    inter.notes.append("change: how much the first factor's effect (a ratio) moves when the "
                       "second goes from its baseline to the level named; 'equivalent': within "
                       f"±{100 * o['margin']:g}%")
    for name in f.get("not_estimable") or []:
        main.notes.append(f"{name}: not estimable (a cell it needs has no ok trial in any "
                          "block); left out of the Holm family")
    grids: list[Table] = []
    for g in f.get("two_way") or []:
        title = f"Medians: {g['rows']} (rows) × {g['columns']} (columns)" + \
            (f" [{g['scope']}]" if g["scope"] != "overall" else "")
        grids.append(Table(f"two_way_{len(grids)}", title,
                           [f"{g['rows']} \\ {g['columns']}", *g["column_levels"]],
                           [[lv, *(num(v) for v in row)]
                            for lv, row in zip(g["row_levels"], g["medians"], strict=True)],
                           right=set(range(1, len(g["column_levels"]) + 1))))
    inter.notes += no_interval_note(f["interactions"])
    return [main] + ([scoped] if scoped.rows else []) + ([inter] if inter.rows else []) + grids


def all_tables(result: dict[str, Any], full: bool = True) -> list[Table]:
    """Every table, or (full=False) the compact set: verdicts, trials, evidence, grids, and
    drift only when the effect changed over the run. A note is kept under the first table
    shown that has it, and left out under the later ones."""
    drifts = [drift(result)] if result["comparisons"] else []
    every = [*factor_tables(result), verdicts(result), *repeats.tables(result), *drifts,
             *tail_latency(result), tails(result), classic(result),
             trials(result), *repetitions(result),
             evidence(result), *grid_tables(result)]
    shown = [t for t in every if full or not t.full]
    said: set[str] = set()
    for t in shown:
        t.notes = [n for n in dict.fromkeys(t.notes) if n not in said]
        said.update(t.notes)
    return shown


def lead_split(ts: list[Table]) -> tuple[list[Table], list[Table]]:
    """(tables that answer the question and go with the lead: a factorial's medians grids,
    the rest)."""
    lead_ = [t for t in ts if t.key.startswith("two_way")]
    return lead_, [t for t in ts if not t.key.startswith("two_way")]
