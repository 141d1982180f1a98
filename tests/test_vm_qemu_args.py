"""qemu_args: argv for each backing, guest command line, validation errors with hints."""

from pathlib import Path

import pytest

from hugelab.errors import VMError
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.own.qemu_args import QemuPaths, guest_cmdline, memory_backend, qemu_argv

PATHS = QemuPaths(Path("/t/serial.log"), Path("/t/qmp.sock"), Path("/t/agent.sock"),
                  Path("/t/initrd"))


def argv(spec: VmSpec, accel: str = "tcg") -> list[str]:
    return qemu_argv(spec, PATHS, kernel="/boot/vmlinuz", accel=accel)


def opt(av: list[str], flag: str) -> list[str]:
    return [av[i + 1] for i, a in enumerate(av) if a == flag]


def test_anon_default_argv():
    av = argv(VmSpec(mem_mib=512))
    assert av[0] == "qemu-system-x86_64"
    assert opt(av, "-machine") == ["pc,memory-backend=mem0"]
    assert opt(av, "-object") == ["memory-backend-ram,id=mem0,size=512M,prealloc=off,share=off"]
    assert opt(av, "-m") == ["512M"]
    assert opt(av, "-accel") == ["tcg"] and opt(av, "-cpu") == ["max"]
    for flag in ("-nodefaults", "-no-reboot", "-no-user-config"):
        assert flag in av
    assert opt(av, "-display") == ["none"]
    assert "file,id=con0,path=/t/serial.log" in opt(av, "-chardev")
    assert "socket,id=qmp0,path=/t/qmp.sock,server=on,wait=off" in opt(av, "-chardev")
    assert "socket,id=agent0,path=/t/agent.sock,server=on,wait=off" in opt(av, "-chardev")
    assert any("readonly=on" in f and "path=/," in f for f in opt(av, "-fsdev"))
    assert "virtserialport,bus=vser0.0,chardev=agent0,name=hugelab.0" in opt(av, "-device")
    assert opt(av, "-kernel") == ["/boot/vmlinuz"] and opt(av, "-initrd") == ["/t/initrd"]
    assert all(isinstance(a, str) for a in av)


def test_kvm_uses_host_cpu():
    av = argv(VmSpec(), accel="kvm")
    assert opt(av, "-accel") == ["kvm"] and opt(av, "-cpu") == ["host"]


def test_file_backing():
    spec = VmSpec(mem_mib=256, backing="file", hugetlbfs_path="/mnt/h2", prealloc=True,
                  share=True, numa_node=0)
    assert memory_backend(spec) == ("memory-backend-file,id=mem0,size=256M,mem-path=/mnt/h2,"
                                    "prealloc=on,share=on,host-nodes=0,policy=bind")


@pytest.mark.parametrize("size_kb,label", [(2048, "2M"), (1048576, "1G")])
def test_memfd_hugetlb(size_kb, label):
    spec = VmSpec(mem_mib=2048, backing="memfd", hugetlb_size_kb=size_kb)
    assert memory_backend(spec) == (f"memory-backend-memfd,id=mem0,size=2048M,hugetlb=on,"
                                    f"hugetlbsize={label},prealloc=off,share=off")


def test_memfd_plain():
    assert memory_backend(VmSpec(backing="memfd")).startswith(
        "memory-backend-memfd,id=mem0,size=512M,prealloc")


def test_cpu_pin_prefixes_taskset():
    av = argv(VmSpec(cpu_pin=(1, 0, 1)))
    assert av[:3] == ["taskset", "--cpu-list", "0,1"] and av[3] == "qemu-system-x86_64"


def test_guest_cmdline():
    spec = VmSpec(mem_mib=4096, guest_thp="madvise", guest_hugepages_2m=64,
                  guest_hugepages_1g=1, guest_cmdline_extra=("mitigations=off",))
    line = guest_cmdline(spec)
    assert "console=ttyS0" in line and "rdinit=/init" in line and "panic=-1" in line
    assert "transparent_hugepage=madvise" in line
    assert "hugepagesz=1G hugepages=1" in line and "hugepagesz=2M hugepages=64" in line
    assert line.endswith("mitigations=off")
    assert "transparent_hugepage" not in guest_cmdline(VmSpec())
    av = argv(spec)
    assert opt(av, "-append") == [line]


@pytest.mark.parametrize("spec,needle", [
    (VmSpec(backing="file"), "needs a hugetlbfs mount path"),
    (VmSpec(backing="anon", hugetlbfs_path="/x"), "anon backing"),
    (VmSpec(backing="anon", hugetlb_size_kb=2048), "anon backing"),
    (VmSpec(backing="memfd", hugetlbfs_path="/x"), "memfd backing takes no"),
    (VmSpec(backing="memfd", hugetlb_size_kb=4096), "not supported"),
    (VmSpec(backing="memfd", hugetlb_size_kb=1048576, mem_mib=1536), "not a multiple"),
    (VmSpec(backing="bogus"), "unknown vm backing"),
    (VmSpec(accel="hvf"), "unknown accel"),
    (VmSpec(mem_mib=64), "too small"),
    (VmSpec(vcpus=0), "vcpus"),
    (VmSpec(guest_thp="sometimes"), "guest THP"),
    (VmSpec(mem_mib=256, guest_hugepages_2m=100), "guest pools"),
    (VmSpec(mem_mib=1280, guest_hugepages_1g=1), "1G pages need"),
    (VmSpec(cpu_pin=()), "cpu_pin"),
])
def test_invalid_combos(spec, needle):
    with pytest.raises(VMError) as ei:
        argv(spec)
    assert needle in ei.value.message
    assert ei.value.hint or needle in ("vcpus", "cpu_pin")


def test_auto_accel_must_be_resolved():
    with pytest.raises(VMError) as ei:
        qemu_argv(VmSpec(accel="auto"), PATHS, kernel="/k")
    assert "probe_accel" in (ei.value.hint or "")


def test_spec_is_frozen_and_hashable():
    spec = VmSpec()
    with pytest.raises(AttributeError):
        spec.mem_mib = 1  # type: ignore[misc]
    assert hash(spec) == hash(VmSpec())


def test_a_factorial_cell_name_is_one_value_for_qemus_option_parser():
    av = qemu_argv(VmSpec(mem_mib=256), PATHS, kernel="/boot/vmlinuz", accel="tcg",
                   name="host=thp,qemu=anon [workers=4]")
    assert opt(av, "-name") == ["hugelab-host=thp_qemu=anon__workers=4_,debug-threads=on"]
