"""Does sampling a trial's processes beside its timed windows raise the A/A floor? The shipped
request-level trial holds the trial scope's sampler off while the client's windows run
(`proc.quiet()`, issue 39); this runs each interleaved server example both ways, alternating
which goes first, on the same seeds and in the same session.

    PYTHONPATH=bench .venv/bin/python bench/quiet_floor.py --out DIR [--seeds 601,602,603]
        [--examples postgres-interleaved,redis-thp-interleaved,memcached-interleaved]
        [--blocks 10]
    .venv/bin/python bench/aa_floor.py DIR/*.db

Each run is `hugelab run COPY --blocks N --store DIR/<mode>_<kind>-<seed>.db` on a copy of the
example with only its seed and name changed; mode `quiet` is hugelab and the example as
shipped (its own window_ops: 20 for PostgreSQL from 2d57158 and for Redis from 98da533, 200
before; write `w200` to repeat an earlier command), mode
`sampled` the same code with `TrialScope.quiet` replaced by a no-op in that process (the
sampler then reads every member's smaps_rollup and status every 0.25 s, as before the change),
mode `noaslr` hugelab as shipped with the host's address-space randomization off
(`kernel.randomize_va_space` 0 for that run, put back after it: a diagnosis of where fresh
server instances' offsets come from, never a setting hugelab makes), and mode `wN` (`w1000`)
the example with `window_ops = N` instead of its own (`wNgM`: and `warm_ops = M`, the
untimed transactions per client at each window's start), and mode `cN` (`c2`) the example with
`clients = N` (connections per server) instead of its own, and mode `kK` (`k2`, `k2w20`) the
example with K server instances of every arm (each [[arms]] table copied as NAME-2 ... NAME-K;
bench/instances_floor.py pools them), and mode `fresh` the example with `fresh_copy = true`
(PostgreSQL: a fresh copy of the cluster for every server, as before a stopped server's copy
was kept for the next), and mode `dN` (`d3`) the example with `duration_s = N` (seconds of
load a trial) instead of its own. `--modes` picks two or more, each seed's
order rotated.
`aa_floor.py` pools the stores per mode and kind (the part of the name before the first `-`):
the twin's between-trial SD, its within-trial SE and the instance part. Each run takes the host
test lock and lets it go after, as heldout_examples.py does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import runpy
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

from heldout_examples import example_texts, held_out, run_copy

DEFAULT = "postgres-interleaved,redis-thp-interleaved,memcached-interleaved"
ASLR = Path("/proc/sys/kernel/randomize_va_space")


def sampled_run(argv: list[str]) -> None:
    """`hugelab ARGV` in this process with the trial scope's quiet phase a no-op."""
    from hugelab.trial import contain
    contain.TrialScope.quiet = lambda self: contextlib.nullcontext()  # type: ignore[method-assign]
    sys.argv = ["hugelab", *argv]
    runpy.run_module("hugelab.cli", run_name="__main__")


@contextlib.contextmanager
def aslr(on: bool) -> Iterator[None]:
    """Address-space randomization as it is (`on`), or off for the block and put back."""
    if on:
        yield
        return
    before = ASLR.read_text()
    ASLR.write_text("0")
    try:
        yield
    finally:
        ASLR.write_text(before)


def twin_line(store: Path) -> str:
    """The A/A twin's RMS within-trial SE and between-trial SD (HL, %), ok trials."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT arm, status, metrics FROM trials").fetchall()
    arms = {a for a, _s, _m in rows}
    twin = next(a for a in arms if a.endswith("-again") and a[:-6] in arms)
    ms = [json.loads(m) for a, s, m in rows if a == twin and s == "ok"]
    eff = [m["window_hl_log_ratio"] for m in ms]
    se = [m["window_hl_se_log"] for m in ms]
    mean = sum(eff) / len(eff)
    sd = math.sqrt(sum((e - mean) ** 2 for e in eff) / (len(eff) - 1))
    rms = math.sqrt(sum(s * s for s in se) / len(se))
    bad = sum(1 for _a, s, _m in rows if s != "ok")
    return (f"{twin}: {len(ms)} ok trials, within SE {100 * rms:.2f}%, between SD "
            f"{100 * sd:.2f}%, trials not ok: {bad}")


def copies(text: str, k: int) -> str:
    """The example with every [[arms]] table followed by k - 1 copies of it, named NAME-2 ...
    NAME-k: k server instances per arm in every trial, the client alternating between all of
    them (instances_floor.py pools each arm's copies)."""
    head, *tables = re.split(r"(?m)^(?=\[\[arms\]\])", text)
    out = [head]
    for table in tables:
        out.append(table if table.endswith("\n") else table + "\n")
        for j in range(2, k + 1):
            copy, n = re.subn(r'(?m)^name = "([^"]+)"', rf'name = "\1-{j}"', table, count=1)
            if n != 1:
                raise SystemExit("an [[arms]] table without a name line")
            out.append("\n" + copy)
    return "".join(out)


def one(example: str, source: str, seed: int, mode: str, blocks: int, out: Path) -> None:
    kind = example.split("-")[0]
    text = held_out(source, example, seed)
    if mode.startswith("k"):
        k, _w, rest = mode[1:].partition("w")
        text = copies(text, int(k))
        mode_w = f"w{rest}" if rest else ""
    else:
        mode_w = mode
    if mode_w.startswith("w"):
        size, _g, warm = mode_w[1:].partition("g")
        extra = f"\nwarm_ops = {int(warm)}" if warm else ""
        text, n = re.subn(r"(?m)^window_ops = \d+", f"window_ops = {int(size)}{extra}", text)
        if n != 1:
            raise SystemExit(f"{example}: expected one window_ops line")
    if mode == "fresh":
        text, n = re.subn(r"(?m)^(window_ops = \d+.*)$", r"\1\nfresh_copy = true", text)
        if n != 1:
            raise SystemExit(f"{example}: expected one window_ops line")
    if mode.startswith("c"):
        text, n = re.subn(r"(?m)^clients = \d+", f"clients = {int(mode[1:])}", text)
        if n != 1:
            raise SystemExit(f"{example}: expected one clients line")
    if mode.startswith("d"):
        text, n = re.subn(r"(?m)^duration_s = \d+", f"duration_s = {int(mode[1:])}", text)
        if n != 1:
            raise SystemExit(f"{example}: expected one duration_s line")
    store = out / f"{mode}_{kind}-{seed}.db"
    store.unlink(missing_ok=True)
    run, minutes = run_copy(text, out, ["--blocks", str(blocks), "--store", str(store)],
                            lambda args: [sys.executable, __file__, "--sampled-run", *args]
                            if mode == "sampled" else [sys.executable, "-m", "hugelab.cli", *args],
                            lambda: aslr(mode != "noaslr"))
    if run.returncode != 0:
        print(f"{store.name}: FAILED rc {run.returncode}: {(run.stdout + run.stderr)[-600:]}",
              flush=True)
        return
    print(f"{store.name}: {minutes:.2f} min; {twin_line(store)}", flush=True)


MODE = r"quiet|sampled|noaslr|fresh|(k[2-9])?w[1-9]\d*(g\d+)?|k[2-9]|c[1-9]\d*|d[1-9]\d*"


def modes_of(text: str) -> list[str]:
    modes = text.split(",")
    if len(modes) < 2 or len(set(modes)) != len(modes) or \
            not all(re.fullmatch(MODE, m) for m in modes):
        raise SystemExit("--modes: two or more of quiet, sampled, noaslr, fresh, [kK]wN[gM], kK, cN, dN, "
                         f"got {text!r}")
    return modes


def rotated(modes: list[str], i: int) -> list[str]:
    """Seed i's order of the modes: each mode first in turn, mirrored every other cycle (pure)."""
    n = len(modes)
    turn = modes[i % n:] + modes[:i % n]
    return turn[::-1] if (i // n) % 2 else turn


def main() -> int:
    if sys.argv[1:2] == ["--sampled-run"]:
        sampled_run(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where the stores go")
    ap.add_argument("--seeds", default="601,602,603")
    ap.add_argument("--examples", default=DEFAULT)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--modes", default="quiet,sampled",
                    help="two or more of quiet, sampled, noaslr, wN[gM] (window_ops = N[, warm_ops = M]), "
                    "cN (clients = N), kK[wN] (K instances of every arm)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    texts = example_texts(args.examples.split(","))
    for i, seed in enumerate(seeds):
        modes = rotated(modes_of(args.modes), i)
        for example in args.examples.split(","):
            for mode in modes:
                one(example, texts[example], seed, mode, args.blocks, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
