"""Read one run from a store into numpy arrays plus a small sample of per-trial JSON details.

The only part of the report that reads the store, through its methods (no SQL outside
hugelab/store/). Values come from `Store.values()` (one query); the per-trial JSON (monitors, evidence, provenance) is read for an evenly spaced
sample of blocks only, so a run of a million trials loads in seconds. Counts of flag and
error reasons, and the accelerators seen per target, are read over all trials.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
from numpy.typing import NDArray

from hugelab.stats.components import RepBoot
from hugelab.store import SqlStore

STATUSES = ("ok", "flagged", "failed")
DETAIL_SAMPLE_BLOCKS = 400


def series_label(arm: str, target: str, multi_target: bool) -> str:
    """Name of an (arm, target) series: the arm alone when the run has one target."""
    return f"{arm}@{target}" if multi_target else arm


@dataclass
class SeriesDetails:
    """What the sampled trials of one series say beyond their values."""

    better: str | None = None
    metric: str | None = None
    unit: str | None = None
    flag_reasons: Counter[str] = field(default_factory=Counter)
    error_reasons: Counter[str] = field(default_factory=Counter)
    retry_reasons: Counter[str] = field(default_factory=Counter)  # earlier attempts' errors
    pool_failed: int = 0  # failed trials whose hugetlb pages another user took (cause "pool")
    monitors: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)  # the block of each sampled trial
    evidence: list[dict[str, Any]] = field(default_factory=list)
    provenance: list[dict[str, Any]] = field(default_factory=list)
    sampled: int = 0


@dataclass
class ServerCpuData:
    """What request-level trials measure beside the client's windows (ok trials carrying
    `server_cpu_us_per_op`): per (block, series) the server's own CPU µs per operation, the
    client's CPU share and the effect after the trial's first second; per series each trial's
    CPU seconds of khugepaged and kcompactd."""

    us_per_op: dict[tuple[int, int], float] = field(default_factory=dict)
    client_share: dict[tuple[int, int], float] = field(default_factory=dict)
    daemons: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    # each trial's effect against its trial's reference arm after the first second
    settled: dict[tuple[int, int], float] = field(default_factory=dict)


@dataclass
class RunData:
    """One run: trial arrays in trial order (rows sorted by block, position) and details."""

    run: dict[str, Any]
    series: list[str]
    series_arm: list[str]
    series_target: list[str]
    block: NDArray[np.int64]
    code: NDArray[np.int32]  # index into `series` per trial
    status: NDArray[np.int8]  # index into STATUSES per trial
    value: NDArray[np.float64]  # NaN where the trial has no value
    details: list[SeriesDetails]
    accel: dict[str, list[str]] = field(default_factory=dict)  # target -> accelerators seen
    # (arm, target) -> its ok boots that ran several repetitions (trials_per_boot > 1)
    reps: dict[tuple[str, str], list[RepBoot]] = field(default_factory=dict)
    # latency percentile metrics of ok trials (postgres, redis): metric -> (block, series) -> v
    latency: Latencies = field(default_factory=dict)
    # request-level windows: series -> each ok trial's (log-ratio, its SE, windows) vs baseline
    windows: dict[int, list[tuple[float, float, float]]] = field(default_factory=dict)
    # request-level trials' server CPU per operation, client share and THP daemons' CPU
    server_cpu: ServerCpuData | None = None
    # each ok trial's cost record (hugelab.trial.costs): figure -> (block, series) -> value
    costs: Latencies = field(default_factory=dict)
    # each trial's position in its block (an interleaved block's start order); None: not read
    position: NDArray[np.int64] | None = None

    @property
    def n_trials(self) -> int:
        return int(self.block.size)

    def request_level(self) -> list[dict[str, Any]]:
        """The `interleaved` provenance of every sampled request-level trial (servers
        interleaved request by request, `design: requests`), in series order."""
        out = []
        for details in self.details:
            for prov in details.provenance:
                inter = prov.get("interleaved") if isinstance(prov, dict) else None
                if isinstance(inter, dict) and inter.get("design") == "requests":
                    out.append(inter)
        return out

    def index(self, name: str) -> int:
        return self.series.index(name)

    def where(self) -> dict[tuple[str, str], int]:
        """(arm, target) -> its series index."""
        return {(a, t): i for i, (a, t) in enumerate(zip(self.series_arm, self.series_target,
                                                         strict=True))}


def from_rows(run: dict[str, Any], rows: list[tuple[int, int, str, str, str, float | None]]
              ) -> RunData:
    """Arrays from `Store.values()` rows; details are left empty (see `load_run`)."""
    n = len(rows)
    keys: dict[tuple[str, str], int] = {}
    code = np.fromiter((keys.setdefault((r[2], r[3]), len(keys)) for r in rows),
                       dtype=np.int32, count=n)
    smap = {s: i for i, s in enumerate(STATUSES)}
    status = np.fromiter((smap.get(r[4], 2) for r in rows), dtype=np.int8, count=n)
    block = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
    value = np.fromiter((np.nan if r[5] is None else r[5] for r in rows), dtype=float, count=n)
    position = np.fromiter((r[1] for r in rows), dtype=np.int64, count=n)
    arm_order = [a.get("name") for a in run.get("experiment", {}).get("arms", [])]
    pairs = sorted(keys, key=lambda k: (k[1] != "native", k[1],
                                        arm_order.index(k[0]) if k[0] in arm_order else 1 << 30,
                                        k[0]))
    remap = np.empty(max(len(keys), 1), dtype=np.int32)
    for new, k in enumerate(pairs):
        remap[keys[k]] = new
    code = remap[code] if n else code
    multi = len({t for _, t in pairs}) > 1
    return RunData(run=run, series=[series_label(a, t, multi) for a, t in pairs],
                   series_arm=[a for a, _ in pairs], series_target=[t for _, t in pairs],
                   block=block, code=code, status=status, value=value,
                   details=[SeriesDetails() for _ in pairs], position=position)


def _sample_blocks(data: RunData, per_series: int) -> list[int]:
    chosen: set[int] = set()
    for s in range(len(data.series)):
        blocks = data.block[(data.code == s) & (data.status == 0)]
        if blocks.size == 0:
            blocks = data.block[data.code == s]
        if blocks.size > per_series:
            blocks = blocks[np.linspace(0, blocks.size - 1, per_series).astype(np.int64)]
        chosen.update(int(b) for b in blocks)
    return sorted(chosen)


def _read_details(store: SqlStore, data: RunData, run_id: int) -> None:
    where = data.where()
    for arm, target, status, flag, error, cause in store.not_ok_trials(run_id):
        d = data.details[where[(arm, target)]]
        if status == "flagged":
            d.flag_reasons[flag or "(no reason recorded)"] += 1
        else:
            d.error_reasons[error or "(no error recorded)"] += 1
            d.pool_failed += cause == "pool"
    for arm, target, earlier in store.retry_errors(run_id):
        first = (earlier or "").strip().splitlines()
        data.details[where[(arm, target)]].retry_reasons[first[0] if first else
                                                         "(no error recorded)"] += 1
    blocks = _sample_blocks(data, max(50, DETAIL_SAMPLE_BLOCKS // max(len(data.series), 1)))
    better: dict[int, Counter[tuple[str | None, str | None, str | None]]] = {}
    for block, arm, target, status, bet, metric, unit, mon, ev, prov in \
            store.sampled_trials(run_id, blocks):
        i = where[(arm, target)]
        d = data.details[i]
        if bet or metric:
            better.setdefault(i, Counter())[(bet, metric, unit)] += 1
        if status != "ok":
            continue
        d.sampled += 1
        d.monitors.append(json.loads(mon or "{}"))
        d.blocks.append(int(block))
        d.evidence.append(json.loads(ev or "{}"))
        d.provenance.append(json.loads(prov or "{}"))
    for i, c in better.items():
        d = data.details[i]
        d.better, d.metric, d.unit = c.most_common(1)[0][0]


def _read_accel(store: SqlStore, data: RunData, run_id: int) -> None:
    out: dict[str, set[str]] = {}
    for target, accel in store.accelerators(run_id):
        if accel is not None:
            out.setdefault(str(target), set()).add(str(accel))
    data.accel = {t: sorted(a) for t, a in sorted(out.items())}


RepRow = tuple[str, str, int, list[float], list[float], float | None, float | None,
               float | None, float | None]


def rep_boots(rows: list[RepRow]) -> dict[tuple[str, str], list[RepBoot]]:
    """`Store.rep_rows()` grouped by (arm, target): each boot's repetitions and wall times."""
    out: dict[tuple[str, str], list[RepBoot]] = {}
    for arm, target, _block, vals, walls, _boot_s, work_s, started, ended in rows:
        if not vals:
            continue
        trial_s = ended - started if started is not None and ended is not None else None
        out.setdefault((arm, target), []).append(
            RepBoot(tuple(vals), tuple(walls), trial_s,
                    None if work_s is None else float(work_s)))
    return out


def load_run(store: SqlStore, run_id: int | None = None) -> RunData:
    """The run (latest when `run_id` is None) with arrays and sampled details."""
    run = store.run(run_id)
    data = from_rows(run, store.values(run["id"]))
    if data.n_trials:
        _read_details(store, data, run["id"])
        _read_accel(store, data, run["id"])
        data.reps = rep_boots(store.rep_rows(run["id"]))
        data.latency = read_latencies(store, data, run["id"])
        data.windows = read_windows(store, data, run["id"])
        data.server_cpu = read_server_cpu(store, data, run["id"])
        data.costs = read_costs(store, data, run["id"])
    return data


WINDOW_KEYS = ("window_log_ratio", "window_se_log", "windows")


def read_windows(store: SqlStore, data: RunData, run_id: int
                 ) -> dict[int, list[tuple[float, float, float]]]:
    """Each ok trial's request-window estimate against the baseline (design interleaved with
    window_ops): its log-ratio, standard error and windows; {} for runs without them."""
    where = data.where()
    out: dict[int, list[tuple[float, float, float]]] = {}
    for _block, arm, target, metrics in store.ok_metrics(run_id, naming="window_se_log"):
        m, i = _json_dict(metrics), where.get((arm, target))
        values = [m.get(k) for k in WINDOW_KEYS]
        if i is not None and all(isinstance(v, int | float) for v in values):
            out.setdefault(i, []).append(tuple(float(v) for v in values))  # type: ignore[arg-type]
    return out


PERCENTILE = re.compile(r"(?:^|_)p(\d+)(?:_(\d+))?_ms$")
Latencies = dict[str, dict[tuple[int, int], float]]  # metric -> (block, series) -> value


def percentile_of(metric: str) -> float | None:
    """'p99_9_ms' -> 99.9, 'get_p95_ms' -> 95.0, anything else -> None (pure)."""
    m = PERCENTILE.search(metric)
    return None if m is None else float(f"{m.group(1)}.{m.group(2) or 0}")


def _json_dict(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        d = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def read_latencies(store: SqlStore, data: RunData, run_id: int) -> Latencies:
    """Each ok trial's latency percentile metrics; one query and nothing more for a run whose
    trials report none."""
    first = store.first_ok_metrics(run_id)
    if first is None or not any(percentile_of(k) is not None for k in _json_dict(first)):
        return {}
    where = data.where()
    out: Latencies = {}
    for block, arm, target, metrics in store.ok_metrics(run_id):
        i = where.get((arm, target))
        for key, value in _json_dict(metrics).items():
            if i is not None and percentile_of(key) is not None and \
                    isinstance(value, int | float) and value > 0:
                out.setdefault(key, {})[(int(block), i)] = float(value)
    return out


SERVER_CPU = "server_cpu_us_per_op"


def _finite(v: Any) -> TypeGuard[float]:
    return isinstance(v, int | float) and math.isfinite(v)


def read_server_cpu(store: SqlStore, data: RunData, run_id: int) -> ServerCpuData | None:
    """Each ok request-level trial's server CPU per operation, client CPU share and THP
    daemons' CPU (from its provenance); one query, and None for runs without the metric."""
    where, out = data.where(), ServerCpuData()
    for block, arm, target, metrics, cpu in store.ok_metrics_and(run_id, SERVER_CPU,
                                                                 "thp_daemons_cpu_s"):
        m, i = _json_dict(metrics), where.get((arm, target))
        if i is None or not _finite(m.get(SERVER_CPU)) or m[SERVER_CPU] <= 0:
            continue
        out.us_per_op[(int(block), i)] = float(m[SERVER_CPU])
        if _finite(share := m.get("client_cpu_share")):
            out.client_share[(int(block), i)] = float(share)
        if _finite(late := m.get("settled_hl_log_ratio")):
            out.settled[(int(block), i)] = float(late)
        for name, s in _json_dict(cpu).items():
            if _finite(s):
                out.daemons.setdefault(i, {}).setdefault(str(name), []).append(float(s))
    return out if out.us_per_op else None


def read_costs(store: SqlStore, data: RunData, run_id: int) -> Latencies:
    """Each ok trial's cost record (`monitors.costs`), by figure; one query ({} for runs
    recorded before cost records existed)."""
    where = data.where()
    out: Latencies = {}
    for block, arm, target, costs in store.cost_records(run_id):
        i = where.get((arm, target))
        for key, value in _json_dict(costs).items():
            if i is not None and _finite(value):
                out.setdefault(str(key), {})[(int(block), i)] = float(value)
    return out
