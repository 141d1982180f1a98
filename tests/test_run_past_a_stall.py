"""The suite's one allowance for a stolen machine (tests/helpers.py, run_past_a_stall): a run
that ended with no ok trial because hugelab flagged every trial for the hypervisor's stall
runs once more on a fresh store; any other failure is returned as it came, never rerun.
A stand-in for `hugelab run` writes a real store (read back through `hugelab show`) with
trials of the kind each case names, and counts its calls."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import run_past_a_stall

pytestmark = pytest.mark.slow  # `hugelab show` as a subprocess per case

# argv: STORE COUNTER KIND...: the n-th call writes trials of the n-th KIND (the last again
# after that) and exits as hugelab run would after them
FAKE_RUN = '''
import sys
from pathlib import Path
from hugelab.store import Store
from hugelab.store.schema import Trial

store, counter, kinds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
kind = kinds[min(n, len(kinds) - 1)]
if store.exists():
    raise SystemExit("the store of an earlier call is still there")
layer, steal = {"ok": (None, 0.0), "stalled": ("measurement", 0.37),
                "quiet-measurement": ("measurement", 0.05),
                "stolen-workload": ("workload", 0.37)}[kind]
st = Store(store)
run_id, _ = st.get_or_create_run("key", "fake", {"name": "fake", "baseline": "a", "blocks": 1,
                                                  "arms": [{"name": "a"}, {"name": "b"}]}, {})
for pos, arm in enumerate("ab"):
    checks = {"workload": {"status": "verified"}}
    if layer:
        checks[layer] = {"status": "contradicted", "reason": "2 window blocks, 6 needed"}
    st.add_trial(Trial(run_id, 0, pos, arm, "flagged" if layer else "ok", 100.0,
                       "ops_per_s", "ops/s", "higher", metrics={},
                       evidence={"check": "contradicted" if layer else "verified",
                                 "reason": "r", "checks": checks},
                       monitors={"load": {"steal_share": steal}},
                       provenance={"target": "native"}, flag="stalled" if layer else None))
st.close()
if layer:
    print("hugelab: error: no ok trial for arm(s) a, b", file=sys.stderr)
    raise SystemExit(1)
'''


def run(tmp_path: Path, *kinds: str) -> tuple[int, int, Path]:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    store, counter = tmp_path / "s.db", tmp_path / "calls"
    r = run_past_a_stall([sys.executable, str(script), str(store), str(counter), *kinds],
                         store, timeout=120)
    return r.returncode, int(counter.read_text()), store


def test_a_run_stalled_throughout_runs_once_more_on_a_fresh_store(tmp_path):
    rc, calls, store = run(tmp_path, "stalled", "ok")
    assert (rc, calls) == (0, 2) and store.exists()


def test_it_runs_once_more_only(tmp_path):
    rc, calls, _ = run(tmp_path, "stalled", "stalled", "ok")
    assert (rc, calls) == (1, 2)


@pytest.mark.parametrize("kind", ["ok", "quiet-measurement", "stolen-workload"])
def test_anything_else_is_returned_as_it_came(tmp_path, kind):
    rc, calls, _ = run(tmp_path, kind, "ok")
    assert (rc, calls) == (0 if kind == "ok" else 1, 1)
