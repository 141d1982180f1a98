"""Helpers that several test modules share (issue 37 item 5): they live here, not in one
test module that the others import.

- `HUGELAB`: the argv that runs hugelab's CLI in a child process, with this Python.
- `cli`: a command through hugelab's own main, in-process (its exit code, stdout, stderr).
- `stalled_by_the_hypervisor` (a trial hugelab flagged for the machine's stall) and
  `run_past_a_stall` (a `hugelab run` once more on a fresh store when that was every trial).
- stores of runs with known injected effects, for the report's tests: `make_store` (arms by
  factor), `store_run` (a baseline/candidate pair per block; `ISSUE_EFFECTS`), `requests_run`
  (request-level off vs on with server CPU per op; `DAEMONS`), `factorial_store` (a factorial
  run: `FACTORIAL_EXP`, `FACTORIAL_EFFECT`).
- `reqmix_report`: a request client's JSON report with the window rates a test gives.
- `make_tree`: a generated C tree with a real Makefile, for the make-build workload.
- `PairedStore`: the two reads SequentialStopper makes of a store, over generated A/B values.
- the runner's fakes: `DeterministicWorkload` (latency by backing, evidence that can lie),
  `Recorder` (a target that records the backings run), `experiment` (one arm per backing) and
  the `env` fixture (a fake host, its session and a store; import it as `env as env`).
- the run summary's layout: `result_of` (a stored run's summary), `printed` (rendered at a
  width), `check_layout` (no line too wide, no word split) and `cell_words`.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from hugelab.cli import main as cli_main
from hugelab.cli import runsummary
from hugelab.errors import WorkloadError
from hugelab.experiment import Arm, Experiment, parse_experiment
from hugelab.host.paths import parse_selected
from hugelab.host.session import host_session
from hugelab.report.model.runsummary import RunSummary
from hugelab.report.summary import run_summary
from hugelab.store import Store, Trial
from hugelab.workloads.base import WorkloadResult
from tests import runstores
from tests.fakehost import FakeKernel, make_host

HUGELAB = [sys.executable, "-m", "hugelab.cli"]


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run a command through hugelab's own main: errors become exit codes, no tracebacks."""
    rc = cli_main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def stalled_by_the_hypervisor(trial: dict) -> bool:
    """A request-level trial flagged only because its client timed too few window blocks
    (hugelab.trial.judge.measurement_check) while the hypervisor took at least a fifth of the
    CPU: the machine's stall, said by hugelab, not a defect of the run (memcached seed 964
    on the shared Intel VM: four such blocks in 300, at 42-44% steal)."""
    checks = ((trial.get("evidence") or {}).get("checks") or {})
    bad = {layer for layer, c in checks.items() if c.get("status") == "contradicted"}
    steal = (((trial.get("monitors") or {}).get("load") or {}).get("steal_share") or 0.0)
    return trial["status"] == "flagged" and bad == {"measurement"} and steal >= 0.2


def shown_trials(store: Path, env: dict[str, str]) -> list[dict]:
    """The trials of run 1 in `store`, as `hugelab show 1 --json` gives them."""
    r = subprocess.run([*HUGELAB, "show", "1", "--store", str(store), "--json"],
                       capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout)["trials"]


def run_past_a_stall(argv: list[str], store: Path, *, env: dict[str, str] | None = None,
                     cwd: Path | None = None, timeout: float = 900
                     ) -> subprocess.CompletedProcess[str]:
    """`hugelab run` (argv, writing `store`); when it exited with no ok trial for an arm and
    hugelab flagged every trial for the hypervisor's stall (redis-thp-interleaved at 32% steal,
    redis-snapshot at 37%: fresh-clone runs of 2026-12-01), that was the machine's, not the
    run's: it runs once more on a fresh store, and the caller's checks then hold as for any
    other run."""
    env = env if env is not None else dict(os.environ)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    where = store if store.is_absolute() or cwd is None else cwd / store
    if r.returncode != 0 and "no ok trial for arm(s)" in r.stdout + r.stderr and where.exists() \
            and all(stalled_by_the_hypervisor(t) for t in shown_trials(where, env)):
        where.unlink()
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd,
                           timeout=timeout)
    return r


# --- the request client's report ----------------------------------------------------------------

def reqmix_report(rates: list[list[float]], ops: int = 100, timed: bool = False) -> str:
    """A client report whose arm a's window in block b ran at rates[b][a] ops/s (`timed`:
    each window's `t_ns`, the windows back to back from 0)."""
    windows = [{"arm": a, "block": b, "pos": a, "ops": ops, "ns": int(ops * 1e9 / r),
                "cpu_ns": int(ops * 1e9 / r / 4)}
               for b, row in enumerate(rates) for a, r in enumerate(row)]
    if timed:
        starts = np.cumsum([0] + [w["ns"] for w in windows[:-1]])
        windows = [{**w, "t_ns": int(t)} for w, t in zip(windows, starts, strict=True)]
    arms = len(rates[0])
    lat = [{"arm": a, "protocol": "redis", "ops_total": ops * len(rates), "preloaded": 0,
            "timed_ops": ops * len(rates), "mean_ns": 1e5, "p50_ns": 9e4, "p90_ns": 1.5e5,
            "p99_ns": 3e5, "p999_ns": 5e5, "max_ns": 1e6} for a in range(arms)]
    return json.dumps({"reqmix": 1, "arms": arms, "clients": 1, "window_ops": ops,
                       "window_ms": 0, "warm_ops": 0, "seed": 1, "servers": ["x"] * arms,
                       "blocks": len(rates), "wall_ns": 1, "rusage": {"user_ns": 0, "sys_ns": 0},
                       "latency": lat, "windows": windows})


# --- stores with known effects ------------------------------------------------------------------

def make_store(path: Path, *, blocks: int = 30, arms: dict[str, float] | None = None,
               seed: int = 3, name: str = "exp", baseline: str = "4k",
               flagged: dict[str, set[int]] | None = None,
               missing: dict[str, set[int]] | None = None,
               failed: dict[str, set[int]] | None = None,
               flag_reason: str = "asked for thp, but only 2% of the mapping is in huge pages",
               target: str = "native", accel: str = "native", thp_share: float = 0.97,
               store: Store | None = None, noise: float = 0.01,
               steal: dict[int, float] | None = None) -> int:
    """One run: `arms` maps arm name -> factor on a ~100 ns base (lower is better)."""
    arms = arms or {"4k": 1.0, "thp": 0.95}
    flagged, missing, failed = flagged or {}, missing or {}, failed or {}
    rng = np.random.default_rng(seed)
    own = store is None
    st = store or Store(path)
    exp = {"name": name, "baseline": baseline, "blocks": blocks,
           "arms": [{"name": a, "backing": "thp" if "thp" in a else "4k"} for a in arms]}
    run_id, _ = st.get_or_create_run(f"key-{name}-{seed}", name, exp, {})
    for b in range(blocks):
        block_effect = float(np.exp(rng.normal(0, 0.03)))
        order = list(arms)
        rng.shuffle(order)
        for pos, arm in enumerate(order):
            if b in missing.get(arm, set()):
                continue
            value = 100.0 * arms[arm] * block_effect * float(np.exp(rng.normal(0, noise)))
            status, flag, error = "ok", None, None
            if b in flagged.get(arm, set()):
                status, flag, value = "flagged", flag_reason, value * 1000
            if b in failed.get(arm, set()):
                status, error, value = "failed", "workload exited 1", None  # type: ignore[assignment]
            alloc = int(round(100 * thp_share)) if "thp" in arm else 0
            st.add_trial(Trial(
                run_id, b, pos, arm, status, value, "ns_per_load", "ns", "lower",
                metrics={}, evidence={"KernelPageSize_kB": 4, "Rss_kB": 1000,
                                      "AnonHugePages_kB": 980 if "thp" in arm else 0},
                monitors={"vmstat": {"thp_fault_alloc": alloc,
                                     "thp_fault_fallback": (100 - alloc) if alloc else 0},
                          **({"load": {"steal_share": steal.get(b, 0.0),
                                       "other_busy_share": 0.02}} if steal is not None else {})},
                provenance={"accel": accel, "kernel": "6.1.0", "hugelab": "0.1.0",
                            "target": target},
                flag=flag, error=error, target=target))
    if own:
        st.close()
    return run_id


# issue 20's four paired runs: effects -13.3, -13.8, -16.9 and -17.6% (blocks' SD ~1.5%)
ISSUE_EFFECTS = (0.867, 0.862, 0.831, 0.824)


def store_run(path, effects_per_block, *, blocks, repeats=1, seed=1, steal=None):
    """One run whose block b has candidate/baseline ratio effects_per_block[b] (and, with
    `steal`, that CPU steal share recorded for both trials of block b)."""
    rng = np.random.default_rng(seed)
    exp = {"name": "chase", "baseline": "4k", "blocks": blocks, "seed": 77,
           "arms": [{"name": "4k", "backing": "4k"}, {"name": "2M", "backing": "hugetlb-2M"}]}
    if repeats > 1:
        exp["repeats"] = repeats
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("k", "chase", exp, {})
        for b, eff in enumerate(effects_per_block):
            base = 170.0 * float(np.exp(rng.normal(0, 0.02)))
            for pos, (arm, v) in enumerate((("4k", base), ("2M", base * eff))):
                mon = {} if steal is None else {"load": {"steal_share": float(steal[b]),
                                                         "other_busy_share": 0.05}}
                st.add_trial(Trial(run_id, b, pos, arm, "ok", v, "ns_per_load", "ns", "lower",
                                   metrics={}, evidence={}, monitors=mon, provenance={}))


DAEMONS = {"khugepaged": 0.12, "kcompactd0": 0.0}


def requests_run(path, blocks: int = 10, server_cpu: bool = True) -> None:
    """A request-level interleaved run of off (baseline) and on: on's server spends 10% less
    CPU per operation in every block while its round trip is only 3% faster (the client's own
    work, the same for both, dilutes the server's gain), 2% faster after each trial's first
    second (on's trials record `settled_hl_log_ratio`, as the baseline's never do)."""
    rng = np.random.default_rng(7)
    level = np.exp(rng.normal(0, 0.05, blocks))  # the machine's drift, both arms alike

    def metrics(b: int, arm: str) -> dict[str, float]:
        rate, cpu = (1.03, 0.90) if arm == "on" else (1.0, 1.0)
        out = {"ops_per_s": 20_000.0 * rate * level[b] * math.exp(rng.normal(0, 0.002)),
               "windows": 120.0, "client_cpu_share": 0.45, "p50_ms": 0.2 / rate / level[b],
               "p99_ms": 0.9 / rate / level[b]}
        if server_cpu:
            out["server_cpu_us_per_op"] = 30.0 * cpu / level[b] * math.exp(rng.normal(0, 0.002))
        if arm == "on":
            out["settled_hl_log_ratio"] = math.log(1.02) + float(rng.normal(0, 0.002))
        return out
    runstores.request_run(path, blocks, metrics, {"thp_daemons_cpu_s": DAEMONS})


FACTORIAL_EXP = {
    "name": "fx", "blocks": 12,
    "workload": {"kind": "hugelab-mem", "workload": "chase", "size": "64M"},
    "factors": {"thp": ["never", "always"], "backing": ["4k", "thp", "hugetlb-2M"]},
    "scenarios": {"size": ["64M", "1G"]},
}

# true multiplicative effects on a time (lower is better)
FACTORIAL_EFFECT = {("thp", "always"): 1.00, ("backing", "thp"): 0.90, ("backing", "hugetlb-2M"): 0.80,
          ("size", "1G"): 3.0}


def factorial_store(path: Path, *, failed: set[str] = frozenset(), noise: float = 0.005,  # type: ignore[assignment]
                    blocks: int = 12) -> int:
    """A factorial run (FACTORIAL_EXP) whose cells carry FACTORIAL_EFFECT's true effects."""
    exp = parse_experiment({**FACTORIAL_EXP, "blocks": blocks})
    rng = np.random.default_rng(5)
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("k", "fx", exp.to_dict(), {})
        for b in range(blocks):
            shift = float(np.exp(rng.normal(0, 0.05)))
            for pos, arm in enumerate(exp.arms):
                factor = np.prod([FACTORIAL_EFFECT.get(lv, 1.0) for lv in arm.levels])
                value = 100 * factor * shift * float(np.exp(rng.normal(0, noise)))
                bad = arm.name in failed
                st.add_trial(Trial(run_id, b, pos, arm.name, "failed" if bad else "ok",
                                   None if bad else value, "ns_per_load", "ns", "lower",
                                   error="exit 1" if bad else None))
    return run_id


# --- a C tree to build --------------------------------------------------------------------------

MAKEFILE = """\
CC ?= cc
CFLAGS ?= -O2 -Wall -Werror
SRCS := $(sort $(wildcard src/*.c))
OBJS := $(SRCS:.c=.o)

app: $(OBJS)
\t$(CC) $(CFLAGS) -o $@ $(OBJS)

src/%.o: src/%.c include/common.h
\t$(CC) $(CFLAGS) -Iinclude -c -o $@ $<

clean:
\trm -f app $(OBJS)

.PHONY: clean
"""

UNIT = """\
#include "common.h"

static unsigned long table_{i}[64];

unsigned long unit_{i}(unsigned long x)
{{
    for (int k = 0; k < 64; k++)
        table_{i}[k] = x * (k + {i}) ^ (x >> (k % 13));
    unsigned long acc = 0;
    for (int k = 0; k < 64; k++)
        acc += mix(table_{i}[k], (unsigned long)k);
    return acc;
}}
"""


def make_tree(root: Path, units: int = 50, broken: bool = False) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "Makefile").write_text(MAKEFILE)
    decls = "\n".join(f"unsigned long unit_{i}(unsigned long x);" for i in range(units))
    (root / "include" / "common.h").write_text(
        "#pragma once\nstatic inline unsigned long mix(unsigned long a, unsigned long b)\n"
        "{ return (a * 2654435761UL) ^ (b + 0x9e3779b9UL + (a << 6) + (a >> 2)); }\n"
        + decls + "\n")
    for i in range(units):
        (root / "src" / f"unit{i:02d}.c").write_text(UNIT.format(i=i))
    calls = "\n".join(f"    acc += unit_{i}(acc + {i});" for i in range(units))
    main = ("#include <stdio.h>\n#include \"common.h\"\nint main(void)\n{\n"
            f"    unsigned long acc = 1;\n{calls}\n    printf(\"%lu\\n\", acc);\n    return 0;\n}}\n")
    if broken:
        main = main.replace("return 0;", "return 0 +;")
    (root / "src" / "main.c").write_text(main)
    return root


# --- the runner's fakes -------------------------------------------------------------------------

PAGE = {"4k": 4, "thp": 4, "hugetlb-2M": 2048, "hugetlb-1G": 1048576}
SPEED = {"4k": 100.0, "thp": 80.0, "hugetlb-2M": 78.0, "hugetlb-1G": 70.0}


class Recorder:
    name = "native"

    def __init__(self) -> None:
        self.calls: list[str] = []


@dataclass(frozen=True)
class DeterministicWorkload:
    """Latency by backing, with mapping evidence that can be told to lie for one backing."""

    kind: str = "fake"
    size_bytes: int = 3 * 1024**3
    lie_for: str = ""
    fail_for: str = ""
    thp_seen: list[str] | None = None
    paths: object = None

    def run(self, target, backing):
        target.calls.append(backing)
        if self.thp_seen is not None:
            self.thp_seen.append(parse_selected(self.paths.thp_enabled.read_text()))
        if backing == self.fail_for:
            raise WorkloadError("tool exited 1: boom")
        page = 4 if backing == self.lie_for else PAGE[backing]
        huge = 1000 if backing == "thp" else 0
        return WorkloadResult({"ns_per_access": SPEED[backing]}, "ns_per_access", "ns", "lower",
                              evidence={"KernelPageSize_kB": page, "Rss_kB": 1000,
                                        "AnonHugePages_kB": huge})


def experiment(blocks=3, **arm_overrides):
    arms = tuple(Arm(b, b, **arm_overrides.get(b, {})) for b in PAGE)
    return Experiment("t", arms, {"kind": "fake"}, seed=3, blocks=blocks, baseline="4k")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))  # trial-scope records
    host = make_host(tmp_path / "root", free_kb=64 * 1048576)
    kernel = FakeKernel()
    jpath = tmp_path / "state" / "journal.json"

    def session():
        cm = host_session(host, jpath, compact_deadline_s=0.3)

        class Wrap:
            def __enter__(self):
                c = cm.__enter__()
                c.writer = kernel
                return c

            def __exit__(self, *a):
                return cm.__exit__(*a)
        return Wrap()
    store = Store(tmp_path / "h.db")
    yield host, session, store, kernel
    store.close()


# --- the run summary's layout -------------------------------------------------------------------

LEVEL = re.compile(r"[\w+-]+=[\w.+-]*(?:,[\w+-]+=[\w.+-]*)*")  # factor=level(,factor=level)


def result_of(db, exp: Experiment, **extra) -> RunSummary:
    with Store(db) as st:
        run_id = st.runs()[-1]["id"]
        res = run_summary(st, exp, run_id, {})
    return replace(res, store=str(db), executed=8, **extra)


def printed(exp: Experiment, result: RunSummary, width: int) -> str:
    buf = io.StringIO()
    runsummary.render(exp, result, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def check_layout(out: str, width: int, words: set[str]) -> None:
    """No line wider than `width`; every level name and 'factor=level' whole on one line."""
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width, out
    factors = {w.split("=")[0] for w in words if "=" in w}
    for line in lines:
        for m in LEVEL.finditer(line):
            if m.group().split("=")[0] in factors:
                assert m.group() in words, \
                    f"a word split at {width} columns: {m.group()!r}\n{out}"


def cell_words(exp: Experiment) -> set[str]:
    return {f"{f}={lv}" for a in exp.arms for f, lv in a.levels} | \
        {a.name for a in exp.arms}


def cmdlines() -> dict[int, str]:
    """Every process's command line, by pid, from /proc (the kernel's own account)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return out


@dataclass
class PairedStore:
    """The two reads SequentialStopper makes of a store, over generated paired values: arm
    "a" at 100, arm "b" at 100 e^d for each block's d."""
    d: np.ndarray
    rows: list[tuple[int, int, str, str, str, float | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for b, x in enumerate(self.d):
            self.rows += [(b, 0, "a", "native", "ok", 100.0),
                          (b, 1, "b", "native", "ok", 100.0 * math.exp(x))]

    def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]:
        return self.rows

    def trials(self, run_id: int) -> list[dict[str, Any]]:
        return [{"better": "lower"}]
