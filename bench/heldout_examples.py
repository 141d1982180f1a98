"""The interleaved server examples as a new user runs them, with seeds nobody tuned on.

    PYTHONPATH=bench .venv/bin/python bench/heldout_examples.py [--seeds 901,902,903]
        [--examples postgres-interleaved,redis-thp-interleaved,memcached-interleaved]
        (an example by name, or by its path: bench/sizes/postgres-scale100.toml)
        [--out results.json] [--keep DIR]
    PYTHONPATH=bench .venv/bin/python bench/heldout_examples.py --stores STORE...

Each run is the command the example's own comment gives (`#   hugelab run examples/X.toml
--until-verdict --alpha 0.01 --margin 0.01 ...`: its arguments after the file, read from the
comment), on a copy of the file with only `seed` and `name` changed. Per run it prints every
comparison's sequential decision at the last look, the report's effect and interval, the
blocks run, the minutes and the blocks the report flagged as run under high machine load, so a
miss is quoted with the load it ran under, and the A/A twin's start-order split
(`start_order_split`; `--stores` summarizes kept stores). Every run is printed, misses
included. It takes the host test lock for each run and lets it go between runs, so it never
runs beside the suite's host tests and never stalls them for a whole series.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import re
import shlex
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from cli_runs import HUGELAB, run_and_report
from scipy import stats

from hugelab.host import buddyinfo, hoststate
from hugelab.trial.load import high_load

LOCK = "/run/lock/hugelab-tests-host.lock"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "postgres-interleaved,redis-thp-interleaved,memcached-interleaved"


def example_path(name: str) -> str:
    """The file of an example named NAME (examples/NAME.toml) or given by its path from the
    repository's root (bench/sizes/postgres-scale100.toml)."""
    return name if name.endswith(".toml") else f"examples/{name}.toml"


def comment_args(text: str, name: str) -> list[str]:
    """The arguments after the file in the `hugelab run examples/NAME.toml ...` line of the
    example's own comment: the command a user copies."""
    found = re.search(rf"(?m)^#\s+hugelab run {re.escape(example_path(name))} (.+)$", text)
    if found is None or "--until-verdict" not in found.group(1):
        raise SystemExit(f"{name}: its comment gives no `hugelab run ... --until-verdict` command")
    return shlex.split(found.group(1))


def held_out(text: str, name: str, seed: int) -> str:
    """The example's text with its top-level seed and name replaced (nothing else)."""
    cut = re.search(r"(?m)^\[", text)
    top, tables = (text[:cut.start()], text[cut.start():]) if cut else (text, "")
    top, n_seed = re.subn(r"(?m)^seed = \d+$", f"seed = {seed}", top)
    top, n_name = re.subn(r'(?m)^name = "[^"]*"$', f'name = "{name}-{seed}"', top)
    if n_seed != 1 or n_name != 1:
        raise SystemExit(f"{name}: expected one top-level seed and name line")
    return top + tables


def run_copy(text: str, out: Path, args: list[str], argv: Callable[[list[str]], list[str]],
             around: Callable[[], AbstractContextManager[None]] = nullcontext
             ) -> tuple[subprocess.CompletedProcess[str], float]:
    """`argv(["run", COPY, *args])` under the host test lock, COPY a temporary file in `out`
    holding `text` (an example as held_out made it), inside `around()`; the process and its
    minutes."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", dir=out, delete=False) as f:
        f.write(text)
    try:
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            t0 = time.monotonic()
            with around():
                run = subprocess.run(argv(["run", f.name, *args]), capture_output=True,
                                     text=True, cwd=ROOT)
            return run, (time.monotonic() - t0) / 60
    finally:
        Path(f.name).unlink()


def _loaded(rep: dict[str, Any]) -> list[int]:
    """[trials flagged under high machine load, trials sampled] over every arm."""
    loads = [((s.get("monitors") or {}).get("load") or {}) for s in rep.get("series", [])]
    return [sum(ld.get("high", 0) for ld in loads), sum(ld.get("trials", 0) for ld in loads)]


def start_order_split(store: Path, baseline: str) -> dict[str, Any]:
    """The A/A twin's per-block log-ratio to its baseline (trial values, ok trials, in %, sign
    as the metric's better direction: + is the twin better), split by which of the two started
    first (a trial's position in its block is its server's start slot): mean and n of each,
    and the difference (second minus first) with a Welch 95% interval and p. Post hoc."""
    twin = f"{baseline}-again"
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT block, position, arm, value, better FROM trials WHERE arm IN "
                          "(?, ?) AND status = 'ok' AND value > 0", (baseline, twin)).fetchall()
    by: dict[int, dict[str, tuple[int, float, str]]] = {}
    for block, pos, arm, value, better in rows:
        by.setdefault(block, {})[arm] = (pos, value, better)
    split: dict[bool, list[float]] = {True: [], False: []}
    for arms in by.values():
        if len(arms) == 2:
            (tp, tv, better), (bp, bv, _) = arms[twin], arms[baseline]
            sign = -1.0 if better == "lower" else 1.0
            split[tp < bp].append(100 * sign * math.log(tv / bv))
    first, second = split[True], split[False]
    out: dict[str, Any] = {"twin_first": [round(sum(first) / max(len(first), 1), 2),
                                          len(first)],
                           "twin_second": [round(sum(second) / max(len(second), 1), 2),
                                           len(second)]}
    if len(first) > 1 and len(second) > 1:
        w = stats.ttest_ind(second, first, equal_var=False)
        ci = w.confidence_interval(0.95)
        out["second_minus_first"] = [round(float(sum(second) / len(second)
                                                 - sum(first) / len(first)), 2),
                                     round(float(ci.low), 2), round(float(ci.high), 2),
                                     round(float(w.pvalue), 4)]
    return out


def report_json(store: Path) -> dict[str, Any]:
    """`hugelab report --json` of a kept store's run."""
    return json.loads(subprocess.run([*HUGELAB, "report", "--store", str(store), "--json"],
                                     capture_output=True, text=True, check=True).stdout)


def _flagged_blocks(store: Path) -> list[int]:
    """[blocks with any trial under high machine load (the report's rule, `high_load`),
    blocks]: an interleaved block's trials run at once and share one load reading."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT block, monitors FROM trials").fetchall()
    flagged = {b for b, m in rows if high_load((json.loads(m) or {}).get("load") or {})}
    return [len(flagged), len({b for b, _ in rows})]


def _steal_pct(store: Path) -> list[float] | None:
    """[median, largest] of the trials' CPU steal share (their load reading), in percent: the
    host's own part of a held-out count, quoted beside it; None where no trial has one."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT json_extract(monitors, '$.load.steal_share') FROM trials "
                          "WHERE status = 'ok'").fetchall()
    shares = [float(v) for (v,) in rows if isinstance(v, int | float)]
    return [round(100 * statistics.median(shares), 1), round(100 * max(shares), 1)] \
        if shares else None


def _minutes_at(store: Path, blocks: int | None) -> float | None:
    """Minutes from the run's start to the end of its first `blocks` blocks (a look's time)."""
    if blocks is None:
        return None
    with sqlite3.connect(store) as db:
        t0, t1 = db.execute("SELECT r.created, MAX(t.ended) FROM runs r JOIN trials t ON "
                            "t.run_id = r.id WHERE t.block < ?", (blocks,)).fetchone()
    return round((t1 - t0) / 60, 2) if t1 is not None else None


def summary(rep: dict[str, Any], store: Path) -> dict[str, Any]:
    """One finished run: each comparison's final sequential decision and the look it came at
    (a comparison decided early, or stopped as futile, keeps that decision: it is absent from
    later looks), the report's effect and interval, load, and the twin's start-order split."""
    seq = rep["run"]["sequential"] or {"looks": [{"look": None}]}  # none: a --blocks run
    decided = seq.get("decided") or {}
    sizes = (seq.get("plan") or {}).get("look_sizes") or []

    def at(name: str) -> dict[str, Any]:
        d = decided.get(name) or {}
        n = sizes[d["look"] - 1] if d.get("look") and len(sizes) >= d["look"] else None
        return {"decision": d.get("decision"), "at_look": d.get("look"), "at_blocks": n,
                "at_minutes": _minutes_at(store, n)}

    comps = {c["candidate"]: {**at(c["candidate"]),
                              "effect_pct": c["effect_pct"],
                              "ci": [c["ci_low_pct"], c["ci_high_pct"]]}
             for c in rep["comparisons"]}
    return {"blocks": rep["blocks"], "look": seq["looks"][-1]["look"],
            "high_load_trials": _loaded(rep), "high_load_blocks": _flagged_blocks(store),
            "steal_pct": _steal_pct(store),
            "comparisons": comps, "start_order": start_order_split(store, rep["run"]["baseline"])}


def example_texts(names: list[str]) -> dict[str, str]:
    """Each example's text, read once when a series starts: editing an example while its
    series runs does not change the runs still to come."""
    return {n: (ROOT / example_path(n)).read_text() for n in names}


def one_run(example: str, seed: int, tmp: Path, text: str) -> dict[str, Any]:
    stem = Path(example).stem
    exp, store = tmp / f"{stem}-{seed}.toml", tmp / f"{stem}-{seed}.db"
    exp.write_text(held_out(text, stem, seed))
    rep, error, minutes = run_and_report(exp, store, comment_args(text, example), 1800)
    if rep is None:
        return {"example": example, "seed": seed, "error": error, "minutes": round(minutes, 2)}
    return {"example": example, "seed": seed, "minutes": round(minutes, 2),
            **summary(rep, store)}


def free_memory(compact: bool) -> dict[str, Any]:
    """The host's free memory as the run finds it: the share that is not in free 2 MiB blocks
    (the unusable index) and the MiB in pieces of 32 KiB and less, where a fresh server's small
    pages come from first (after compacting, with `compact`)."""
    if compact:
        hoststate.compact()  # what an aged-host run's fresh state does first
    snap = buddyinfo.read()
    small = snap.free_kb() - snap.free_kb(min_order=4)
    return {"compacted": compact, "unusable_2m": round(snap.unusable() or 0.0, 3),
            "small_free_mib": small // 1024}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", default=DEFAULT)
    ap.add_argument("--seeds", default="901,902,903")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="keep each run's experiment file and store here "
                    "(default: a temporary directory, removed at the end)")
    ap.add_argument("--compact", action="store_true",
                    help="compact the host's memory before each run (/proc/sys/vm/"
                    "compact_memory): a diagnosis of where fresh instances' pages come from")
    ap.add_argument("--stores", type=Path, nargs="+", metavar="STORE",
                    help="only summarize these kept stores' finished runs (no run; minutes "
                    "from the run's own start and finish)")
    args = ap.parse_args()
    if args.stores:
        for store in args.stores:
            with sqlite3.connect(store) as db:
                created, finished = db.execute("SELECT created, finished FROM runs").fetchone()
            rep = report_json(store)
            print(json.dumps({"store": str(store), "run_minutes": round(
                (finished - created) / 60, 2), **summary(rep, store)}), flush=True)
        return 0
    results = []
    texts = example_texts(args.examples.split(","))
    with open(LOCK, "a+") as lock, tempfile.TemporaryDirectory() as d:
        where = args.keep or Path(d)
        where.mkdir(parents=True, exist_ok=True)
        for example in args.examples.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                fcntl.flock(lock, fcntl.LOCK_EX)  # per run: the suite's host tests go between
                try:
                    r = {**free_memory(args.compact), **one_run(example, seed, where, texts[example])}
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                results.append(r)
                print(json.dumps(r), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
