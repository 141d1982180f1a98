"""Where in a request-level trial the `on` effect comes from: each arm's window rates by time
since the client's windows began, and each server's minor page faults over the client's run
(issue 39 item 4, which effect).

    PYTHONPATH=bench .venv/bin/python bench/first_second.py --out DIR [--seed 1461]
        [--example postgres-interleaved | --example bench/sizes/postgres-scale100.toml]
        [--blocks 24]
    PYTHONPATH=bench .venv/bin/python bench/first_second.py --out DIR --read

Runs `hugelab run COPY --blocks N` (the example with only its seed and name changed, under the
host test lock, as heldout_examples.py does) in a child process that keeps, for every trial,
the client's own report (each window's arm, block, ops, ns and start `t_ns`), the backing of
each arm's server, and the minor faults of each server's process tree during the client's run:
/proc/PID/stat's minflt of every process under the server's main one, polled every 50 ms, the
largest rise seen per process (a backend's count stays readable until the client disconnects).
`--read` prints, from DIR/trials/*.json: each backing's window rate by time bin against its
own rate after 3 s (median over windows), the `on` effect (Hodges-Lehmann shift of per-block
log-ratios against the first 4 KiB arm, mean over trials) over the blocks from a lead time on,
the A/A pair's (the second 4 KiB arm in the trial's order against the first) between-trial SD
over blocks in a span of time, and the faults per trial by backing (median). Diagnosis only: it changes nothing hugelab does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hugelab.stats.windows import hl_shift

BINS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
LEADS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
SPANS = ((0.0, 1.0), (0.0, 2.0), (0.0, 3.0), (0.0, 6.0), (0.0, 99.0), (1.0, 3.0), (1.0, 99.0), (2.0, 99.0),
         (4.0, 99.0), (6.0, 99.0), (8.0, 99.0))


def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, minflt) of every process now."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(d)] = (int(f[1]), int(f[7]))
    return out


def _root(pid: int, table: dict[int, tuple[int, int]], roots: set[int]) -> int | None:
    for _ in range(64):
        if pid in roots:
            return pid
        if pid not in table:
            return None
        pid = table[pid][0]
    return None


def _wrapped_run(out: Path, argv: list[str]) -> int:
    """hugelab's CLI with requests._measure wrapped to keep each trial's report and faults."""
    from hugelab.workloads import requests

    measure, parse = requests._measure, requests.parse_output
    seen: dict[str, Any] = {}

    def keep(text: str) -> Any:
        seen["raw"] = json.loads(text)
        return parse(text)

    def faults_around(target: Any, arms: Any, servers: Any, rng: Any, reference: int) -> Any:
        roots = [wl.server_pid(s) for (wl, _b), s in zip(arms, servers, strict=True)]
        base = {p: v[1] for p, v in _procs().items()}
        peak: dict[int, tuple[int, int]] = {}
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                table = _procs()
                for p, (_pp, mf) in table.items():
                    r = _root(p, table, set(roots))
                    if r is not None:
                        peak[p] = (r, max(mf - base.get(p, 0), peak.get(p, (r, 0))[1]))
                time.sleep(0.05)

        th = threading.Thread(target=poll)
        th.start()
        try:
            res = measure(target, arms, servers, rng, reference)
        finally:
            stop.set()
            th.join()
        (out / f"{time.time():.3f}.json").write_text(json.dumps({
            "backings": [b for _wl, b in arms], "raw": seen["raw"],
            "minflt": [sum(v for r, v in peak.values() if r == root) for root in roots]}))
        return res

    requests._measure, requests.parse_output = faults_around, keep
    from hugelab.cli import main
    return main(argv)


def _blocks(trial: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Per block: its start (s) and each arm's log rate (its windows' ops over their ns)."""
    by: dict[int, dict[str, Any]] = {}
    for w in trial["raw"]["windows"]:
        b = by.setdefault(w["block"], {"t": math.inf, "ops": {}, "ns": {}})
        b["t"] = min(b["t"], w["t_ns"] / 1e9)
        b["ops"][w["arm"]] = b["ops"].get(w["arm"], 0) + w["ops"]
        b["ns"][w["arm"]] = b["ns"].get(w["arm"], 0) + w["ns"]
    rows = [{"t": b["t"], "y": {a: math.log(b["ops"][a] / b["ns"][a]) for a in b["ops"]}}
            for b in by.values()]
    return trial["backings"], rows


def _bins(trials: list[dict[str, Any]]) -> None:
    """Each backing's window rate by time bin against its own rate after 3 s (medians)."""
    acc: dict[tuple[int, str], list[float]] = {}
    for tr in trials:
        rows = [(w["t_ns"] / 1e9, tr["backings"][w["arm"]], w["ops"] * 1e9 / w["ns"])
                for w in tr["raw"]["windows"]]
        late = {b: statistics.median(r for t, bb, r in rows if bb == b and t > 3)
                for b in set(tr["backings"])}
        for t, b, r in rows:
            k = max(i for i, e in enumerate(BINS) if t >= e)
            acc.setdefault((k, b), []).append(math.log(r / late[b]))
    names = sorted({b for _k, b in acc})
    print("| from-to s | " + " | ".join(names) + " |")
    for k in range(len(BINS) - 1):
        cells = [f"{100 * math.expm1(statistics.median(acc[(k, b)])):+.1f}%"
                 if (k, b) in acc else "-" for b in names]
        print(f"| {BINS[k]:g}-{BINS[k + 1]:g} | " + " | ".join(cells) + " |")


def _shifts(trials: list[dict[str, Any]], pair: str, lead: float, upto: float) -> list[float]:
    """Per trial, the pair's Hodges-Lehmann shift over its blocks starting in [lead, upto):
    `on` (hugetlb-2M against the first 4 KiB arm) or `aa` (the second 4 KiB arm against the
    first, in the trial's order); trials with fewer than 6 such blocks left out."""
    out = []
    for tr in trials:
        backings, rows = _blocks(tr)
        small = [k for k, b in enumerate(backings) if b == "4k"]
        i, j = (small[0], backings.index("hugetlb-2M")) if pair == "on" else small[:2]
        d = [r["y"][j] - r["y"][i] for r in rows if lead <= r["t"] < upto]
        if len(d) >= 6:
            out.append(hl_shift(d))
    return out


def read(out: Path) -> None:
    trials = [json.loads(p.read_text()) for p in sorted((out / "trials").glob("*.json"))]
    print(f"{len(trials)} trials")
    _bins(trials)
    for lead in LEADS:
        on = _shifts(trials, "on", lead, math.inf)
        print(f"blocks from {lead:g} s: on {100 * math.expm1(statistics.mean(on)):+.2f}% "
              f"(SD over {len(on)} trials {100 * statistics.stdev(on):.2f})")
    for lead, upto in SPANS:
        aa = _shifts(trials, "aa", lead, upto)
        print(f"A/A, blocks from {lead:g} to {upto:g} s: between-trial SD "
              f"{100 * statistics.stdev(aa):.2f}% over {len(aa)} trials")
    faults: dict[str, list[int]] = {}
    for tr in trials:
        for b, n in zip(tr["backings"], tr["minflt"], strict=True):
            faults.setdefault(b, []).append(n)
    for b, ns in sorted(faults.items()):
        print(f"minor faults a trial, {b}: median {statistics.median(ns):.0f} "
              f"(range {min(ns)}-{max(ns)}, {len(ns)} server trials)")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--wrapped-run":
        return _wrapped_run(Path(sys.argv[2]), sys.argv[3:])
    from heldout_examples import example_texts, held_out, run_copy

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1461)
    ap.add_argument("--example", default="postgres-interleaved",
                    help="an example's name, or a path to an experiment file (bench/sizes/...)")
    ap.add_argument("--blocks", type=int, default=24)
    ap.add_argument("--read", action="store_true", help="only print what DIR holds")
    args = ap.parse_args()
    if not args.read:
        (args.out / "trials").mkdir(parents=True, exist_ok=True)
        path = Path(args.example)
        name = path.stem if path.suffix == ".toml" else args.example
        source = path.read_text() if path.suffix == ".toml" else \
            example_texts([name])[name]
        text = held_out(source, name, args.seed)
        store = args.out / f"{name}-{args.seed}.db"
        store.unlink(missing_ok=True)
        run, minutes = run_copy(text, args.out, ["--blocks", str(args.blocks), "--store",
                                                 str(store)],
                                lambda a: [sys.executable, __file__, "--wrapped-run",
                                           str(args.out / "trials"), *a])
        print(f"{store.name}: rc {run.returncode}, {minutes:.2f} min", flush=True)
        if run.returncode != 0:
            print((run.stdout + run.stderr)[-800:])
            return 1
    read(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
