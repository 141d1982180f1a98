"""Where each trial's PostgreSQL shared buffers landed in physical memory, beside the A/A twin's
trial effect: is the instance part of the floor the buffers' placement? (issue 39, item 1: the
one candidate its list names that no earlier bench measured.)

    .venv/bin/python bench/placement/pg_buffers.py watch --out W.jsonl [--after-s 2.5]
    .venv/bin/python bench/placement/pg_buffers.py join --watch W.jsonl STORE... [--json]

`watch` (root; run it beside `hugelab run` of a request-interleaved PostgreSQL example, stop
it with SIGTERM or SIGINT) looks for hugelab's trial postmasters (a `postgres` whose parent is
not one, working under hugelab's cluster directory) and, once a server has had at least
`clients` backends for `--after-s` seconds (the client's windows under way, every hot buffer
touched), reads once the page frame of every page of its main shared memory segment that any
of its processes maps (/proc/PID/pagemap, union over the postmaster's children), and writes
one line per postmaster: present pages, and how they lie:

  contig     share of present pages whose next virtual page is the next physical frame
  adjacent   the same, the frame before it counted too (the page allocator hands out a free
             block's pages highest first)
  coalesce4  share of 16 KiB-aligned groups of 4 present pages that are 4 consecutive frames
             starting at a multiple of 4 (what a TLB that coalesces 4 KiB entries can merge)
  aligned2m  share of 2 MiB-aligned virtual pieces whose 512 pages are one aligned 2 MiB frame
  color_cv   coefficient of variation of the present pages' counts over the L2's page colours
             (frame number modulo COLORS; 0 for an even spread)

`join` reads each STORE's ok trials, finds each arm's postmaster (its evidence's
`postmaster_pid`, within the trial's start and end) in the watch file, and regresses the twin's
within-trial effect (`window_hl_log_ratio`, log scale) on the twin's placement minus its
baseline's, block by block: slope, r, and the twin's SD before and after the fit. A slope
that holds and an SD that falls say placement is part of the instance offsets. Read only: the
watcher reads /proc, the join opens the stores read-only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PAGE = 4096
COLORS = 32  # Zen 4's L2: 1 MiB, 8 ways, 64 B lines: 128 KiB a way, 32 page colours
SEGMENT_NAMES = ("/dev/zero (deleted)", "/anon_hugepage (deleted)")
AUX = ("checkpointer", "background writer", "walwriter", "autovacuum launcher",
       "logical replication launcher", "archiver", "stats collector", "startup")


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def postmasters(work: str) -> dict[int, list[int]]:
    """hugelab's trial postmasters and their children's pids."""
    procs = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    pg = {p for p in procs if comm(p) == "postgres"}
    out: dict[int, list[int]] = {}
    for p in pg:
        parent = ppid(p)
        if parent in pg:
            out.setdefault(parent, []).append(p)
        else:
            try:
                if os.readlink(f"/proc/{p}/cwd").startswith(work):
                    out.setdefault(p, [])
            except OSError:
                pass
    return {pm: kids for pm, kids in out.items() if pm in pg and ppid(pm) not in pg}


def backends(kids: list[int]) -> list[int]:
    out = []
    for k in kids:
        try:
            cmd = Path(f"/proc/{k}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if not any(a in cmd for a in AUX):
            out.append(k)
    return out


def segment(pid: int) -> tuple[int, int] | None:
    """The largest shared anonymous mapping's (start, end) in `pid`."""
    best = None
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].strip() in SEGMENT_NAMES:
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if best is None or b - a > best[1] - best[0]:
                best = (a, b)
    return best


def frames(pid: int, seg: tuple[int, int]) -> np.ndarray:
    """The frame number of each page of `seg` that `pid` maps (0: not mapped)."""
    n = (seg[1] - seg[0]) // PAGE
    try:
        with open(f"/proc/{pid}/pagemap", "rb") as f:
            f.seek(seg[0] // PAGE * 8)
            raw = f.read(n * 8)
    except OSError:
        return np.zeros(n, dtype=np.int64)
    e = np.zeros(n, dtype=np.uint64)
    e[:len(raw) // 8] = np.frombuffer(raw, dtype="<u8")
    return np.where(e >> np.uint64(63), e & np.uint64((1 << 55) - 1), 0).astype(np.int64)


def _share(hits: np.ndarray, of: np.ndarray) -> float:
    k = int(of.sum())
    return float(hits.sum()) / k if k else math.nan


def lie(pfn: np.ndarray) -> dict[str, float]:
    """How the present frames lie (the module's metrics)."""
    pfn = np.asarray(pfn, dtype=np.int64)
    n = len(pfn)
    present = pfn > 0
    step = np.diff(pfn)
    both = present[:-1] & present[1:]
    out: dict[str, float] = {"pages": n, "present": int(present.sum())}
    out["contig"] = _share(both & (step == 1), present)
    out["adjacent"] = _share(both & (np.abs(step) == 1), present)
    for size, key in ((4, "coalesce4"), (512, "aligned2m")):
        g = pfn[:n // size * size].reshape(-1, size)
        full = (g > 0).all(axis=1)
        run = (np.diff(g, axis=1) == 1).all(axis=1) & (g[:, 0] % size == 0)
        out[key] = _share(full & run, full)
    counts = np.bincount(pfn[present] % COLORS, minlength=COLORS)
    mean = counts.mean()
    out["color_cv"] = float(counts.std() / mean) if mean else math.nan
    return out


def read_server(pm: int, kids: list[int]) -> dict[str, Any] | None:
    seg = None
    union = np.zeros(0, dtype=np.int64)
    for p in [pm, *kids]:
        s = segment(p)
        if s is None:
            continue
        if seg is None:
            seg, union = s, np.zeros((s[1] - s[0]) // PAGE, dtype=np.int64)
        if (s[1] - s[0]) != (seg[1] - seg[0]):
            continue
        union = np.where(union > 0, union, frames(p, s))
    if seg is None:
        return None
    return {"postmaster_pid": pm, "t": time.time(), **lie(union)}


def watch(out: Path, after_s: float, clients: int) -> None:
    from hugelab.workloads.postgres.cluster import work_path
    work = f"{work_path()}/"
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    since: dict[int, float] = {}
    done: set[int] = set()
    with out.open("a") as f:
        while not stop:
            now = time.monotonic()
            for pm, kids in postmasters(work).items():
                if pm in done:
                    continue
                if len(backends(kids)) < clients:
                    since.pop(pm, None)
                    continue
                if now - since.setdefault(pm, now) >= after_s:
                    rec = read_server(pm, kids)
                    done.add(pm)
                    if rec:
                        f.write(json.dumps(rec) + "\n")
                        f.flush()
            time.sleep(0.1)


def _records(path: Path) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out.setdefault(int(r["postmaster_pid"]), []).append(r)
    return out


def _placed(recs: dict[int, list[dict[str, Any]]], ev: dict[str, Any], t0: float,
            t1: float) -> dict[str, Any] | None:
    pid = ev.get("postmaster_pid")
    for r in recs.get(int(pid), []) if pid else []:
        if t0 - 1 <= r["t"] <= t1 + 1:
            return r
    return None


def _with_pid(ev: Any) -> dict[str, Any] | None:
    """The (possibly nested) evidence dict that names the trial's postmaster."""
    if isinstance(ev, dict):
        if "postmaster_pid" in ev:
            return ev
        for v in ev.values():
            found = _with_pid(v)
            if found:
                return found
    elif isinstance(ev, list):
        for v in ev:
            found = _with_pid(v)
            if found:
                return found
    return None


def blocks(store: Path, recs: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per block: the twin's effect and each of its two arms' placement."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT block, arm, metrics, evidence, started, ended FROM trials "
                          "WHERE status = 'ok'").fetchall()
    by: dict[int, dict[str, Any]] = {}
    for block, arm, m, ev, t0, t1 in rows:
        ev = json.loads(ev)
        place = _placed(recs, _with_pid(ev) or {}, t0 or 0, t1 or 0)
        by.setdefault(block, {})[arm] = {"metrics": json.loads(m), "place": place}
    out = []
    for block, arms in sorted(by.items()):
        twins = [a for a in arms if a.endswith("-again") and a[:-6] in arms]
        if not twins:
            continue
        twin, base = arms[twins[0]], arms[twins[0][:-6]]
        if twin["place"] and base["place"] and "window_hl_log_ratio" in twin["metrics"]:
            out.append({"store": store.name, "block": block,
                        "effect": twin["metrics"]["window_hl_log_ratio"],
                        "twin": twin["place"], "base": base["place"]})
    return out


def fit(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    """The twin's effect on (twin - base) placement `key`: slope, r, SD before and after (%)."""
    xs = [r["twin"][key] - r["base"][key] for r in rows]
    ys = [r["effect"] for r in rows]
    ok = [(x, y) for x, y in zip(xs, ys, strict=True) if not (math.isnan(x) or math.isnan(y))]
    n = len(ok)
    if n < 4:
        return {"n": n}
    mx, my = sum(x for x, _ in ok) / n, sum(y for _, y in ok) / n
    sxx = sum((x - mx) ** 2 for x, _ in ok)
    syy = sum((y - my) ** 2 for _, y in ok)
    sxy = sum((x - mx) * (y - my) for x, y in ok)
    slope = sxy / sxx if sxx else 0.0
    resid = syy - slope * sxy
    return {"n": n, "slope": slope, "r": sxy / math.sqrt(sxx * syy) if sxx and syy else 0.0,
            "sd_before": 100 * math.sqrt(syy / (n - 1)),
            "sd_after": 100 * math.sqrt(max(resid, 0.0) / (n - 2)),
            "x_sd": math.sqrt(sxx / (n - 1))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--after-s", type=float, default=2.5)
    w.add_argument("--clients", type=int, default=4)
    j = sub.add_parser("join")
    j.add_argument("--watch", type=Path, required=True)
    j.add_argument("stores", type=Path, nargs="+")
    j.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "watch":
        watch(a.out, a.after_s, a.clients)
        return 0
    recs = _records(a.watch)
    rows = [r for s in a.stores for r in blocks(s, recs)]
    res = {k: fit(rows, k) for k in ("present", "contig", "adjacent", "coalesce4", "aligned2m", "color_cv")}
    if a.json:
        print(json.dumps({"blocks": rows, "fits": res}, indent=1))
        return 0
    print(f"{len(rows)} blocks with both placements")
    for k, v in res.items():
        print(f"  {k:10s} " + " ".join(f"{n}={x:.4g}" for n, x in v.items()))
    for side in ("twin", "base"):
        for k in ("contig", "adjacent", "coalesce4", "aligned2m", "color_cv"):
            vals = [r[side][k] for r in rows if not math.isnan(r[side][k])]
            if vals:
                print(f"  {side} {k}: median {sorted(vals)[len(vals) // 2]:.3f} "
                      f"range {min(vals):.3f}-{max(vals):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
