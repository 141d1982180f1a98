"""Native and guest arms in one run, for real: QEMU under TCG, hugetlbfs-backed guest RAM."""

from __future__ import annotations

import pytest

from hugelab.experiment import Arm, Experiment, GuestLayer, VmLayer
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.workloads.hugelab_mem import HugelabMem
from tests.guestruns import guest_env, own_qemus, run_on_host

pytestmark = [pytest.mark.vm, pytest.mark.host, pytest.mark.slow]


@pytest.fixture
def env(tmp_path, monkeypatch):
    with guest_env(tmp_path, monkeypatch, own_mem_binary=True) as e:
        yield e


def test_native_and_two_hugetlbfs_guests_in_one_run(env):
    tmp, store = env
    arms = (
        Arm("native-2M", "hugetlb-2M"),
        Arm("vm-file-2M", "hugetlb-2M",
            vm=VmLayer(backing="file", page_size="2M", prealloc=True, mem_mib=320, vms=2,
                       accel="tcg"),
            guest=GuestLayer(thp="never")),
        Arm("vm-anon-4k", "4k", vm=VmLayer(backing="anon", mem_mib=256, accel="tcg")),
    )
    exp = Experiment("vm", arms, {"kind": "hugelab-mem"}, seed=2, blocks=1, baseline="native-2M")
    wl = HugelabMem(workload="chase", size_bytes=16 << 20, duration_s=0.2)
    qemu_before = set(own_qemus())
    out = run_on_host(tmp, store, exp, wl)
    assert out.executed == 3 and not out.skipped
    trials = {(t["arm"], t["target"]): t for t in store.trials(out.run_id)}
    assert set(trials) == {("native-2M", "native"), ("vm-file-2M", "vm0"), ("vm-file-2M", "vm1"),
                           ("vm-anon-4k", "vm0")}
    for key, t in trials.items():
        assert t["status"] == "ok", (key, t["error"], t["flag"])
        assert t["value"] > 0
    g = trials[("vm-file-2M", "vm1")]
    assert g["evidence"]["qemu"]["kernel_page_size_kb"] == 2048       # host side: QEMU's RAM
    assert g["evidence"]["KernelPageSize_kB"] == 2048                  # guest side: workload
    assert g["provenance"]["accel"] == "tcg" and g["provenance"]["layer"] == "guest"
    a = trials[("vm-anon-4k", "vm0")]
    assert a["evidence"]["AnonHugePages_kB"] == 0 and a["evidence"]["KernelPageSize_kB"] == 4
    assert set(own_qemus()) == qemu_before  # every guest is gone
    assert g["provenance"]["host_backing"] == "hugetlb-2M"
    assert g["provenance"]["guest_backing"] == "hugetlb-2M"
    assert a["provenance"]["host_backing"] in ("thp", "4k") and a["provenance"]["guest_backing"] == "4k"
    # the report arranges host x guest backings and states guests as % of native (003's table)
    result = analyse(load_run(store, out.run_id), Options()).json()
    assert result["grid"]["percent_of_native"] is not None
    assert any("TCG" in w for w in result["warnings"])


def test_guest_that_cannot_boot_fails_its_trial_and_leaves_nothing(env):
    tmp, store = env
    arms = (Arm("native", "4k"),
            Arm("badkernel", "4k", vm=VmLayer(mem_mib=256, accel="tcg", kernel="/nonexistent")))
    exp = Experiment("bad", arms, {"kind": "hugelab-mem"}, blocks=1)
    wl = HugelabMem(workload="chase", size_bytes=8 << 20, duration_s=0.1)
    qemu_before = set(own_qemus())
    out = run_on_host(tmp, store, exp, wl)
    bad = [t for t in store.trials(out.run_id) if t["arm"] == "badkernel"]
    assert bad[0]["status"] == "failed" and "boot failed" in bad[0]["error"]
    assert "/nonexistent" in bad[0]["error"]
    assert set(own_qemus()) == qemu_before


def test_several_trials_per_boot_keep_their_values_and_raise_the_workload_share(env):
    """trials_per_boot = 3: one row per boot (the unit), its value the geometric mean of its
    three trials, the three kept; most of the boot's wall time is the workload's."""
    tmp, store = env
    vm = VmLayer(backing="anon", mem_mib=256, accel="tcg", trials_per_boot=3)
    arms = (Arm("k1", "4k", vm=VmLayer(backing="anon", mem_mib=256, accel="tcg")),
            Arm("k3", "4k", vm=vm))
    exp = Experiment("reps", arms, {"kind": "hugelab-mem"}, seed=3, blocks=1)
    wl = HugelabMem(workload="chase", size_bytes=16 << 20, duration_s=1.0)
    out = run_on_host(tmp, store, exp, wl)
    trials = {t["arm"]: t for t in store.trials(out.run_id)}
    for t in trials.values():
        assert t["status"] == "ok", (t["arm"], t["error"], t["flag"])
    one, three = trials["k1"]["provenance"], trials["k3"]["provenance"]
    assert "reps" not in one and one["trials_per_boot"] == 1
    reps = three["reps"]
    assert reps["n"] == 3 and len(reps["values"]) == 3 and len(reps["wall_s"]) == 3
    import math
    geo = math.exp(sum(math.log(v) for v in reps["values"]) / 3)
    assert trials["k3"]["value"] == pytest.approx(geo)
    assert three["workload_s"] == pytest.approx(sum(reps["wall_s"]), abs=0.01)
    # the boot is paid once: the share of the guest's wall time spent in the workload grows
    share = {a: p["workload_s"] / p["guest_wall_s"] for a, p in (("k1", one), ("k3", three))}
    print(f"workload share of guest wall time: k=1 {share['k1']:.0%}, k=3 {share['k3']:.0%}")
    assert share["k3"] > share["k1"]
    assert trials["k3"]["evidence"]["tree"].get("samples")
