"""Start-slot adjustment of request-interleaved log-ratios, checked by simulation before use
(issue 39): false `faster`/`slower` on an A/A pair, coverage of the report's interval, the
share of A/A runs ending `equivalent`, and power for a real 3% effect, adjusted against plain.

Each simulated run is an interleaved example under `--until-verdict --alpha 0.01 --margin
0.01`: three arms (the baseline, a twin, an arm 10% faster), two claims (alpha 0.005 each,
Bonferroni), `--looks auto` (look_schedule) over a budget of 20 or 30 blocks, with the
stopper's "cannot reach" futility stop. Each block starts its three servers in an order from
experiment.model.balanced_orders (the run's own sequence of the six orders), and a trial's
log value is block + arm + slot effect + noise: block SD 5%, slot effects 0, +1.2, +5% (as
fitted on the held-out PostgreSQL runs) or none, noise of per-block A/A SD 2, 3 or 4%
(Gaussian, or Student t3 with that SD). The twin's true effect is 0 (A/A) or +3% (power).

Columns: false `faster`/`slower` of the A/A twin (alpha 0.005), `equivalent` share, mean
blocks the twin used, coverage of the 95% signed-rank interval (the report's default) on the
blocks the run had when the twin stopped and on all N, the share of +3% twins called
`faster`, and the mean per-block SD of the twin's log-ratios (after the adjustment: before the
spread correction). A first table looks once, at a fixed number of blocks, with many more
runs: the spread correction's own part in the coverage and the false positives.

Run: PYTHONPATH=. .venv/bin/python bench/slot_adjust_sim.py [--sims 4000] [--fixed-sims 20000] [--seed 1]

With `--stores A.db B.db ...` (kept stores of interleaved runs with `--until-verdict`) it
replays each run's looks instead, with the stopper as it is now, plain and adjusted, and prints
per store the fitted slot effects, the A/A twin's per-block SD and 95% interval before and
after, and the twin's decision at each look (a replay ends where the store's blocks end).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from hugelab.experiment import Experiment
from hugelab.experiment.model import balanced_orders
from hugelab.stats import sequential_plan, signedrank, startslot
from hugelab.stats.plan import MIN_PILOT
from hugelab.stats.reach import GAMMA, look_stops, sd_bounds, unit_sds
from hugelab.stats.sequential import SequentialPlan, look_schedule
from hugelab.stopping import SequentialStopper, paired_log_ratios, slot_matrices
from hugelab.store.locate import open_store

ALPHA, MARGIN, BLOCK_SD, OTHER = 0.005, 0.01, 0.05, 0.10
PG_SLOTS = (0.0, 0.012, 0.05)


def slots(sims: int, blocks: int, arms: int, seed: int) -> np.ndarray:
    """(sims, blocks, arms): each arm's start slot, the blocks' orders balanced as a run's."""
    rnd = random.Random(seed)
    out = np.empty((sims, blocks, arms), dtype=np.int64)
    for r in range(sims):
        orders: list[list[int]] = []
        while len(orders) < blocks:
            orders += [[int(x) for x in o] for o in balanced_orders(
                [str(k) for k in range(arms)], rnd)]
        for b in range(blocks):
            out[r, b, orders[b]] = np.arange(arms)
    return out


def runs(rng: np.random.Generator, slot: np.ndarray, effects: tuple[float, ...], sd: float,
         kind: str, twin: float) -> np.ndarray:
    """(sims, blocks, 3) log values: block + arm + slot effect + noise (per-arm SD sd/√2)."""
    sims, blocks, arms = slot.shape
    noise = rng.normal(0, 1, slot.shape) if kind == "normal" else \
        rng.standard_t(3, slot.shape) / math.sqrt(3)
    arm = np.log1p(np.array([0.0, twin, OTHER]))
    return (rng.normal(0, BLOCK_SD, (sims, blocks, 1)) + arm + np.log1p(np.array(effects))[slot]
            + noise * sd / math.sqrt(2))


def plain(y: np.ndarray, _slot: np.ndarray) -> Callable[[int], np.ndarray]:
    return lambda n: y[:, :n, 1] - y[:, :n, 0]


def adjusted(y: np.ndarray, slot: np.ndarray) -> Callable[[int], np.ndarray]:
    """The stopper's adjusted log-ratios of the twin (column 1) against the baseline (0) at a
    look of n blocks: slot effects fitted on all three arms of the n blocks."""
    def at(n: int) -> np.ndarray:
        eff, w, cov, _ = startslot.fit_batch(y[:, :n], slot[:, :n], y.shape[2])
        sa, sb = slot[:, :n, 1], slot[:, :n, 0]
        d = y[:, :n, 1] - y[:, :n, 0] - (np.take_along_axis(eff, sa, 1)
                                         - np.take_along_axis(eff, sb, 1))
        factor = startslot.spread_factor(sa, sb, w[:, :, 1] - w[:, :, 0], cov)
        return startslot.spread(d, factor)
    return at


def predictive(theta: np.ndarray, sd: np.ndarray, n: int, plan: SequentialPlan
               ) -> tuple[np.ndarray, np.ndarray]:
    """reach.reach_arrays' p_equivalent and p_difference (its reachable margin, a slow
    folded-normal quantile per run, left out; tests/test_stats_startslot.py checks that they
    agree)."""
    th = np.abs(theta)
    low, _ = sd_bounds(sd, n)
    big_n = plan.max_blocks
    se_last = low / math.sqrt(big_n)
    v = low * math.sqrt(max(1.0 / n - 1.0 / big_n, 0.0))
    a = math.log1p(plan.margin) - plan.equivalence_bounds[-1] * se_last
    b = plan.bounds[-1] * se_last
    with np.errstate(divide="ignore", invalid="ignore"):
        p_eq = np.where(a > 0, stats.norm.cdf((a - th) / v) - stats.norm.cdf((-a - th) / v), 0.0)
        p_diff = stats.norm.sf((b - th) / v) + stats.norm.cdf((-b - th) / v)
    return p_eq, p_diff


def replay(d_at: Callable[[int], np.ndarray], rows: int, plan: SequentialPlan
           ) -> tuple[np.ndarray, np.ndarray]:
    """The stopper's looks (efficacy, equivalence, futility from 10 blocks) on log-ratios that
    each look computes afresh: (decision, blocks at the stop) per run."""
    decision = np.full(rows, "inconclusive", dtype=object)
    stop = np.full(rows, plan.max_blocks)
    live = np.ones(rows, dtype=bool)
    looks = zip(plan.look_sizes, plan.bounds, plan.equivalence_bounds, strict=True)
    for k, (size, c, e) in enumerate(looks, start=1):
        part = d_at(size)
        crossed, good, eq = look_stops(part, c, e, plan)
        hit = live & crossed
        decision[hit] = np.where(good[hit], "faster", "slower")
        decision[live & ~hit & eq] = "equivalent"
        stopped = hit | (live & eq)
        stop[stopped & live] = size
        live &= ~stopped
        if size >= MIN_PILOT and k < plan.looks and live.any():
            idx = np.flatnonzero(live)
            theta, sd = unit_sds(part[idx])
            p_eq, p_diff = predictive(theta, sd, size, plan)
            quit_now = idx[(p_eq < GAMMA) & (p_diff < GAMMA)]
            stop[quit_now], live[quit_now] = size, False
    return decision, stop


def coverage(d_at: Callable[[int], np.ndarray], stop: np.ndarray, truth: float) -> float:
    """Share of runs whose 95% signed-rank interval on their blocks at the stop holds truth."""
    hits = 0
    for size in np.unique(stop):
        rows = stop == size
        _, lo, hi, _ = signedrank.hl_and_interval(d_at(int(size))[rows], 0.05)
        hits += int(np.sum((lo <= truth) & (truth <= hi)))
    return hits / stop.size


def row(args: argparse.Namespace, n: int, effects: tuple[float, ...], sd: float, kind: str,
        seed: int) -> list[str]:
    plan = sequential_plan(n, alpha=ALPHA, margin=MARGIN, better="higher",
                           look_sizes=look_schedule(n, ALPHA))
    slot = slots(args.sims, n, 3, seed)
    aa = runs(np.random.default_rng(seed), slot, effects, sd, kind, 0.0)
    real = runs(np.random.default_rng(seed + 1), slot, effects, sd, kind, 0.03)
    out = []
    for name, how in (("plain", plain), ("adjusted", adjusted)):
        d_at = how(aa, slot)
        decision, stop = replay(d_at, args.sims, plan)
        fp = np.mean(np.isin(decision, ["faster", "slower"]))
        whole = np.full(args.sims, n)
        power, _ = replay(how(real, slot), args.sims, plan)
        raw = aa[:, :, 1] - aa[:, :, 0]
        if name == "adjusted":
            eff, _, _, _ = startslot.fit_batch(aa, slot, 3)
            raw = raw - (np.take_along_axis(eff, slot[:, :, 1], 1)
                         - np.take_along_axis(eff, slot[:, :, 0], 1))
        slots_s = "none" if not any(effects) else "0/+1.2/+5%"
        out.append(f"| {n} | {slots_s} | {100 * sd:g}% {kind} | {name} | {fp:.4f} | "
                   f"{np.mean(decision == 'equivalent'):.3f} | {stop.mean():.1f} | "
                   f"{coverage(d_at, stop, 0.0):.3f} | {coverage(d_at, whole, 0.0):.3f} | "
                   f"{np.mean(power == 'faster'):.3f} | "
                   f"{100 * raw.std(axis=1, ddof=1).mean():.2f}% |")
    return out


def fixed(sims: int, n: int, seed: int) -> str:
    """One look at n blocks, no stopping: the spread correction's part. Coverage of the 95%
    interval and the share of |z| >= 2.576 (two-sided 1%) on A/A twins with PostgreSQL's slot
    effects, noise SD 3%: adjusted without and with the correction, and plain runs without
    slot effects (what the adjustment should match)."""
    slot = slots(sims, n, 3, seed)
    y = runs(np.random.default_rng(seed), slot, PG_SLOTS, 0.03, "normal", 0.0)
    eff, w, cov, _ = startslot.fit_batch(y, slot, 3)
    sa, sb = slot[:, :, 1], slot[:, :, 0]
    raw = y[:, :, 1] - y[:, :, 0] - (np.take_along_axis(eff, sa, 1)
                                     - np.take_along_axis(eff, sb, 1))
    factor = startslot.spread_factor(sa, sb, w[:, :, 1] - w[:, :, 0], cov)
    none = runs(np.random.default_rng(seed + 1), slot, (0.0, 0.0, 0.0), 0.03, "normal", 0.0)
    cells = []
    for d in (raw, startslot.spread(raw, factor), none[:, :, 1] - none[:, :, 0]):
        _, lo, hi, _ = signedrank.hl_and_interval(d, 0.05)
        z = signedrank.z_statistic(d)
        cells.append(f"{np.mean((lo <= 0) & (hi >= 0)):.4f} / {np.mean(np.abs(z) >= 2.576):.4f}")
    return f"| {n} | {factor.mean():.3f} | " + " | ".join(cells) + " |"


def looks(exp: Experiment, store: object, seq: dict[str, object], blocks: int, twin: str,
          adjust: bool) -> str:
    """The twin's decision at each look of a replay of the stored run."""
    plan = seq["plan"]
    assert isinstance(plan, dict)
    stop = SequentialStopper(exp, store, looks=None,  # type: ignore[arg-type]
                             alpha=float(seq["family_alpha"]),  # type: ignore[arg-type]
                             margin=float(plan["margin"]), adjust_slots=adjust)
    for b in range(1, blocks + 1):
        if stop(1, b, {}):
            break
    out = []
    for entry in stop.history:
        dec = entry["decisions"].get(twin)
        if dec:
            said = dec["decision"] + (" (futile)" if "futile" in dec["reason"] else "")
            out.append(f"{entry['blocks']}: {said}")
    return "; ".join(out)


def stores(paths: list[str]) -> None:
    print("| store | blocks | slot effects 1-3 | twin per-block SD | twin 95% interval | "
          "looks, plain | looks, adjusted |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        st = open_store(path)
        run = st.run(1)
        exp = Experiment.from_dict(run["experiment"])
        seq, rows = run["sequential"], st.values(1)
        blocks = max(r[0] for r in rows) + 1
        arms = [a.name for a in exp.arms]
        twin = next(a for a in seq["comparisons"] if a.endswith("-again"))
        i, j = arms.index(twin), arms.index(exp.baseline_of(twin))
        y, slot = slot_matrices(rows, arms, blocks)
        found = startslot.fit(y, slot)
        assert found is not None
        before = paired_log_ratios(rows, arms[j], twin, blocks)
        both = np.isfinite(y[:, i]) & np.isfinite(y[:, j])
        raw = before - (found.effects[slot[both, i]] - found.effects[slot[both, j]])
        after = startslot.adjust(y, slot, i, j, found)
        ci = []
        for d in (before, after):
            hl, lo, hi, _ = signedrank.hl_and_interval(d[None], 0.05)
            ci.append(f"{100 * math.expm1(hl[0]):+.2f}% [{100 * math.expm1(lo[0]):+.2f}, "
                      f"{100 * math.expm1(hi[0]):+.2f}]")
        name = path.rsplit("/", 1)[-1].removesuffix(".db")
        print(f"| {name} | {blocks} | " + ", ".join(f"{e:+.1f}" for e in found.effects_pct)
              + f"% | {100 * before.std(ddof=1):.2f} → {100 * raw.std(ddof=1):.2f}% | "
              f"{ci[0]} → {ci[1]} | {looks(exp, st, seq, blocks, twin, False)} | "
              f"{looks(exp, st, seq, blocks, twin, True)} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sims", type=int, default=4000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--blocks", default="20,30")
    p.add_argument("--fixed-sims", type=int, default=20000)
    p.add_argument("--stores", nargs="+", help="replay these kept runs' looks instead")
    args = p.parse_args()
    if args.stores:
        stores(args.stores)
        return
    t0 = time.monotonic()
    print("| blocks | spread factor f | adjusted, uncorrected: cover95 / p<0.01 | adjusted, "
          "corrected | plain, no slot effects |")
    print("|---|---|---|---|---|")
    for n in (6, 10, 17, 20, 30):
        print(fixed(args.fixed_sims, n, args.seed + 100 + n), flush=True)
    print()
    print("| N | slot effects | noise SD | analysis | false faster/slower | equivalent | "
          "blocks used | cover95 at stop | cover95 at N | power +3% | per-block SD |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    seed = args.seed
    for n in (int(x) for x in args.blocks.split(",")):
        cases = [(PG_SLOTS, sd, "normal") for sd in (0.02, 0.03, 0.04)]
        cases += [((0.0, 0.0, 0.0), sd, "normal") for sd in (0.02, 0.04)]
        cases += [(PG_SLOTS, 0.03, "t3")]
        for effects, sd, kind in cases:
            seed += 2
            print("\n".join(row(args, n, effects, sd, kind, seed)), flush=True)
    print(f"\n{args.sims} runs a row; {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
