"""Every example experiment parses, builds its workload, and its guest arms have QEMU argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugelab.experiment import load_experiment, schedule
from hugelab.vm.own.qemu_args import QemuPaths, qemu_argv
from hugelab.vm.trial import vm_spec
from hugelab.workloads.registry import build_for

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.toml"))


# a PostgreSQL workload's settings are checked by the postgres binary as the experiment loads
NEEDS_TOOLS = ("postgres",)


@pytest.mark.parametrize("path", [
    pytest.param(p, id=p.name, marks=[pytest.mark.tools] if p.name.startswith(NEEDS_TOOLS) else [])
    for p in EXAMPLES])
def test_example(path, tmp_path):
    exp = load_experiment(path)
    assert len(schedule(exp)) == exp.blocks * len(exp.arms)
    default, per_arm = build_for(exp)  # every scenario's workload
    size = getattr(default, "size_bytes", None)
    paths = QemuPaths(tmp_path / "s.log", tmp_path / "q.sock", tmp_path / "a.sock", tmp_path / "i")
    for arm in exp.arms:
        if arm.vm is not None and arm.vm.domain is not None:
            assert arm.vm.mem_mib == 0  # the domain's own size, read from libvirt at run time
        elif arm.vm is not None:
            spec = vm_spec(arm, size, {"2M": tmp_path / "h2", "1G": tmp_path / "h1"})
            argv = qemu_argv(spec, paths, kernel="/boot/vmlinuz", accel="tcg")
            assert "-object" in argv


def test_there_are_examples_for_every_reference_study():
    names = {p.name[:3] for p in EXAMPLES}
    assert {"001", "002", "003", "004"} <= names


def test_a_thp_workload_in_a_guest_gets_guest_thp_unless_the_arm_says():
    """A guest under 512 MiB boots with THP off: a thp arm would flag every trial."""
    from hugelab.experiment import Arm, GuestLayer, VmLayer
    from hugelab.vm.trial import guest_thp
    vm = VmLayer(mem_mib=384)
    assert guest_thp(Arm("t", "thp", vm=vm)) == "madvise"
    assert guest_thp(Arm("c", "thp-collapse", vm=vm)) == "madvise"
    assert guest_thp(Arm("k", "4k", vm=vm)) is None  # the guest's own default
    assert guest_thp(Arm("n", "thp", vm=vm, guest=GuestLayer(thp="never"))) == "never"
