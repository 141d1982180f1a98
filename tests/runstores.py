"""Stores for the report's layout tests.

- `fabricate`: a run of a real experiment file (its real cell names, scenarios and factors)
  with values drawn here, so the terminal and HTML layouts of examples that need guests
  (001, 002) are checked on every machine in a second.
- `request_run`: a request-level interleaved run (off vs on) whose trials carry the metrics
  a test gives them.
- `real_run`: a real `hugelab run` of an example at small size, made once per content: the
  store is kept under /var/tmp/hugelab-tests/real-runs (HUGELAB_TEST_CACHE), keyed by the
  example's text, the arguments and every file of the hugelab package but the report's
  (`code_hash`), so a fresh clone of the same code reuses it and any change to the code that
  writes stores makes it again; it takes the host lock like every host test.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.experiment import Experiment, default_experiment, load_experiment
from hugelab.store import Store, Trial
from tests.hostguard import host_lock

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("HUGELAB_TEST_CACHE", "/var/tmp/hugelab-tests")) / "real-runs"


# hugelab.report reads stores and writes none: a real run's store is written by the runner,
# its peer in docs/architecture.md's layers, which may not import it (tests/test_architecture.py);
# `hugelab run` imports it only to print. A change to the report alone keeps the real runs.
REPORT_ONLY = "report"


def code_hash() -> str:
    """A digest of every file of the hugelab package (sources, C, Java) but the report's, by
    path and content: what a real run's store depends on beside the experiment."""
    h = hashlib.sha256()
    pkg = ROOT / "hugelab"
    built = ("__pycache__", "_bin")  # derived: Python's byte code, the C tools built here
    for path in sorted(p for p in pkg.rglob("*") if p.is_file() and not set(built) & set(
            p.relative_to(pkg).parts) and p.relative_to(pkg).parts[0] != REPORT_ONLY):
        h.update(str(path.relative_to(pkg)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def experiment(example: str | None) -> Experiment:
    """An example by file name (None: the built-in default experiment)."""
    return default_experiment() if example is None else load_experiment(ROOT / "examples" /
                                                                        example)


def fabricate(path: Path, exp: Experiment, *, blocks: int = 8, seed: int = 1) -> int:
    """A finished run of `exp` with every trial ok: each cell a random effect of up to ±30% on
    a time, block effects and 2% noise. Returns the run id."""
    rng = np.random.default_rng(seed)
    effect = {a.name: float(np.exp(rng.normal(0, 0.15))) for a in exp.arms}
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("k", exp.name, exp.to_dict(), {})
        for b in range(blocks):
            shift = float(np.exp(rng.normal(0, 0.05)))
            for pos, arm in enumerate(exp.arms):
                value = 100 * effect[arm.name] * shift * float(np.exp(rng.normal(0, 0.02)))
                st.add_trial(Trial(run_id, b, pos, arm.name, "ok", value, "ns_per_access",
                                   "ns", "lower"))
        st.set_run_status(run_id, "finished")
    return run_id


def request_run(path: Path, blocks: int, metrics: Callable[[int, str], dict[str, Any]],
                provenance: dict[str, Any] | None = None) -> None:
    """A request-level interleaved run of arms off (baseline) and on, every trial ok, as
    hugelab.workloads.requests records it: `metrics(block, arm)` is each trial's metrics (its
    `ops_per_s` the primary value), called off first in each block."""
    exp = {"name": "pg", "baseline": "off", "design": "interleaved", "blocks": blocks,
           "arms": [{"name": "off"}, {"name": "on"}]}
    with Store(path) as st:
        run_id, _ = st.get_or_create_run("pg-req", "pg", exp, {})
        for b in range(blocks):
            for pos, arm in enumerate(("off", "on")):
                m = metrics(b, arm)
                st.add_trial(Trial(run_id, b, pos, arm, "ok", m["ops_per_s"], "ops_per_s",
                                   "ops/s", "higher", metrics=m, provenance=provenance,
                                   target="native"))


def real_run(example: str | None, blocks: int) -> Path:
    """The store of a real run of `example` (None: the default experiment) with `blocks`
    blocks, made once per content (see the module's docstring)."""
    text = "default" if example is None else (ROOT / "examples" / example).read_text()
    key = hashlib.sha256(f"{text}\0{blocks}\0{code_hash()}".encode()).hexdigest()[:16]
    db = CACHE / f"{example or 'default'}-{blocks}-{key}.db"
    if db.exists():
        return db
    CACHE.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = db.with_suffix(f".partial-{os.getpid()}.db")
    tmp.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "hugelab.cli", "run", *([str(ROOT / "examples" / example)]
                                                          if example else []),
            "--blocks", str(blocks), "--store", str(tmp), "--json", "--wait-host", "900"]
    with host_lock():
        r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=1800,
                           check=False)
    if r.returncode != 0:
        raise RuntimeError(f"hugelab run failed ({r.returncode}): {r.stderr[-2000:]}")
    tmp.rename(db)
    for old in CACHE.glob(f"{example or 'default'}-{blocks}-*.db"):  # made by older code
        if old != db and ".partial-" not in old.name:
            old.unlink(missing_ok=True)
    return db
