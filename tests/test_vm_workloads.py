"""Each field workload inside a real QEMU guest (TCG), beside a native arm, through the Runner.

One small experiment file per workload (an experiment has one [workload]): a native arm and a
single 256 MiB guest arm, one block. The file goes through the same path as `hugelab run`
(load_experiment + the workload registry); the trials must be ok with parsed metrics, the guest
trial must say it ran in a TCG guest and carry guest vmstat, and no QEMU may be left behind."""

from __future__ import annotations

import time

import pytest

from hugelab.experiment import load_experiment
from hugelab.workloads.registry import build_workload
from tests.guestruns import guest_env, own_qemus, run_on_host
from tests.helpers import make_tree

pytestmark = [pytest.mark.vm, pytest.mark.host, pytest.mark.slow]

ARMS = """
[[arms]]
name = "native"
backing = "4k"

[[arms]]
name = "guest"
backing = "4k"
[arms.vm]
backing = "anon"
mem = "256M"
accel = "tcg"
"""

WORKLOADS = {
    # primary metric, metrics that must be parsed, the [workload] table
    "sysbench": ("mib_per_s", ("total_ops", "total_time_s", "latency_avg_ms"), """
kind = "sysbench"
block_size = "1M"
total_size = "64M"
time_s = 1
"""),
    "stress-ng": ("bogo_ops_per_s_real", ("bogo_ops", "wall_s"), """
kind = "stress-ng"
stressor = "malloc"
workers = 1
timeout_s = 1
bytes_per_worker = "4M"
"""),
    "command": ("checksum", ("wall_s",), """
kind = "command"
argv = ["/usr/bin/python3", "-c",
        "import json; print(json.dumps({'result': {'sum': sum(range(1000))}}))"]
metric = "json"
json_path = "result.sum"
name = "checksum"
unit = "count"
better = "higher"
timeout_s = 120.0
"""),
    "build": ("wall_s", ("user_s", "sys_s", "minflt"), """
kind = "build"
source_dir = "{src}"
jobs = 2
timeout_s = 300.0
"""),
}


@pytest.fixture
def env(tmp_path, monkeypatch):
    with guest_env(tmp_path, monkeypatch) as e:
        yield e


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_field_workload_in_a_tcg_guest_beside_native(env, kind):
    tmp, store = env
    primary, parsed, table = WORKLOADS[kind]
    # A build tree under /tmp: the guest sees the host's /tmp through its overlay.
    src = make_tree(tmp / "tree", units=4) if kind == "build" else None
    exp_file = tmp / f"{kind}.toml"
    exp_file.write_text(f'name = "vm-{kind}"\nseed = 3\nblocks = 1\nbaseline = "native"\n\n'
                        "[workload]" + table.replace("{src}", str(src)) + ARMS)
    exp = load_experiment(exp_file)
    params = {k: v for k, v in exp.workload.items() if k != "kind"}
    workload = build_workload(exp.workload["kind"], params)

    t0 = time.monotonic()
    out = run_on_host(tmp, store, exp, workload)
    elapsed = time.monotonic() - t0
    assert out.executed == 2 and not out.skipped, out
    trials = {t["arm"]: t for t in store.trials(out.run_id)}
    assert set(trials) == {"native", "guest"}
    for arm, t in trials.items():
        assert t["status"] == "ok", (kind, arm, t["error"], t["flag"])
        assert t["metric"] == primary
        assert t["value"] is not None and t["value"] > 0, (arm, t["value"])
        assert t["metrics"][primary] == t["value"]
        for name in parsed:
            assert name in t["metrics"], (arm, name, sorted(t["metrics"]))
    if kind == "command":
        assert trials["guest"]["value"] == trials["native"]["value"] == 499500

    native, guest = trials["native"], trials["guest"]
    assert native["provenance"]["layer"] == "native" and native["provenance"]["accel"] == "native"
    assert native["target"] == "native"
    gp = guest["provenance"]
    assert gp["layer"] == "guest" and gp["accel"] == "tcg", gp
    assert guest["target"] == "vm0" and gp["guest_mem_mib"] == 256 and gp["boot_s"] > 0
    vmstat = guest["monitors"]["guest_vmstat"]
    assert vmstat.get("pgfault", 0) > 0, vmstat  # the guest's own counters, not the host's
    assert "vmstat" in guest["monitors"]          # host-side monitors are there too
    assert "qemu" in guest["evidence"] and "error" not in guest["evidence"]["qemu"]

    assert own_qemus() == []
    assert not list((tmp / "state").glob("qemu-*.json"))  # every guest record removed
    print(f"{kind}: run {elapsed:.1f}s, guest boot {gp['boot_s']:.1f}s, "
          f"native {native['value']:.4g} vs guest {guest['value']:.4g} {guest['unit']}")
