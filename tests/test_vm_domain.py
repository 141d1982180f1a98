"""A user's libvirt domain -> the transient copy an arm runs: the XML transformation (pure),
the experiment keys, and errors a user can act on."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from hugelab.errors import ExperimentError, VMError
from hugelab.experiment import Experiment, parse_experiment
from hugelab.vm import domain as dx
from hugelab.vm.qemu_args import VmSpec

USER = """\
<domain type='kvm' id='7'>
  <name>fedora</name>
  <uuid>1a0d3973-ab73-45e1-a3c5-c7ce184d9fca</uuid>
  <title>my db</title>
  <memory unit='GiB'>2</memory>
  <currentMemory unit='GiB'>2</currentMemory>
  <memoryBacking><nosharepages/></memoryBacking>
  <vcpu placement='static'>2</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='/var/lib/libvirt/images/fedora.qcow2'/>
      <backingStore/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/iso/fedora.iso'/>
      <target dev='sda' bus='sata'/>
      <readonly/>
    </disk>
    <disk type='block' device='disk'>
      <driver name='qemu' type='raw'/>
      <source dev='/dev/vg/data'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
    <interface type='network'>
      <mac address='52:54:00:aa:bb:cc'/>
      <source network='default'/>
      <target dev='vnet3'/>
    </interface>
    <graphics type='vnc' port='5901' autoport='no'/>
  </devices>
</domain>
"""


def spec(**kw: object) -> VmSpec:
    return VmSpec(**{"mem_mib": 2048, "vcpus": 2, **kw})  # type: ignore[arg-type]


def test_reads_memory_vcpus_and_disks():
    root = dx.parse(USER)
    assert dx.memory_mib(root) == 2048 and dx.vcpus(root) == 2
    disks = dx.disks(root)
    assert [(d.target, d.format, d.readonly) for d in disks] == [
        ("vda", "qcow2", False), ("sda", "raw", True), ("vdb", "raw", False)]


def test_transient_copy_renames_redirects_writable_disks_and_sets_the_backing():
    overlays = {"/var/lib/libvirt/images/fedora.qcow2": "/ov/0-vda.qcow2",
                "/dev/vg/data": "/ov/2-vdb.qcow2"}
    xml = dx.transient_xml(USER, spec(backing="file", hugetlb_size_kb=2048, prealloc=True),
                           name="hugelab-fedora-vm0", overlays=overlays)
    root = ET.fromstring(xml)
    assert root.findtext("name") == "hugelab-fedora-vm0"
    assert root.find("uuid") is None and root.find("title") is None and "id" not in root.attrib
    mb = root.find("memoryBacking")
    assert mb is not None and mb.find("nosharepages") is None  # the arm's backing, only
    assert mb.find("hugepages/page").get("size") == "2048"  # type: ignore[union-attr]
    assert mb.find("source").get("type") == "file"  # type: ignore[union-attr]
    assert mb.find("allocation").get("mode") == "immediate"  # type: ignore[union-attr]
    assert root.findtext("memory") == str(2048 * 1024)
    srcs = [(d.get("type"), d.find("source").attrib, d.find("driver").get("type"))  # type: ignore[union-attr]
            for d in root.findall("devices/disk")]
    assert srcs == [("file", {"file": "/ov/0-vda.qcow2"}, "qcow2"),
                    ("file", {"file": "/iso/fedora.iso"}, "raw"),  # read-only: as it was
                    ("file", {"file": "/ov/2-vdb.qcow2"}, "qcow2")]
    assert root.find("devices/disk/backingStore") is None
    iface = root.find("devices/interface")
    assert iface is not None and iface.find("mac") is None and iface.find("target") is None
    g = root.find("devices/graphics")
    assert g is not None and g.get("autoport") == "yes" and "port" not in g.attrib
    chans = [c.find("target").get("name") for c in root.findall("devices/channel")]  # type: ignore[union-attr]
    assert chans == [dx.AGENT_CHANNEL]


@pytest.mark.parametrize(("kw", "want"), [
    ({"backing": "anon"}, None),
    ({"backing": "memfd"}, "<source type=\"memfd\" />"),
    ({"backing": "memfd", "hugetlb_size_kb": 1048576, "share": True}, "<access mode=\"shared\" />"),
])
def test_every_vm_backing(kw, want):
    xml = dx.transient_xml(USER, spec(**kw), name="x", overlays={})
    if want is None:
        assert "<memoryBacking" not in xml
    else:
        assert want in xml


def test_with_arm_changes_only_memory_and_the_diff_shows_it():
    new = dx.with_arm(USER, spec(backing="file", hugetlb_size_kb=2048, mem_mib=1024, vcpus=1))
    root = ET.fromstring(new)
    assert root.findtext("name") == "fedora" and root.find("uuid") is not None
    text = dx.diff(USER, new, name="fedora")
    assert "+    <hugepages>" in text and "-  <vcpu placement=\"static\">2</vcpu>" in text
    assert "fedora.qcow2" not in text  # disks untouched


def test_bad_xml_is_a_clear_error():
    with pytest.raises(VMError, match="does not parse"):
        dx.parse("<domain>")
    with pytest.raises(VMError, match="no <domain>"):
        dx.parse("<network/>")


def test_experiment_domain_keys_and_identity():
    d = {"vm": {"domain": "fedora"},
         "arms": [{"name": "anon", "backing": "4k", "vm": {"backing": "anon"}},
                  {"name": "2M", "backing": "4k", "vm": {"backing": "file", "page_size": "2M",
                                                         "mem": "1G"}}]}
    exp = parse_experiment(d)
    a, b = exp.arms
    assert a.vm is not None and a.vm.domain == "fedora" and a.vm.mem_mib == 0  # the domain's
    assert a.vm.vcpus == 0 and a.vm.uri == "qemu:///system"
    assert b.vm is not None and b.vm.mem_mib == 1024
    again = Experiment.from_dict(exp.to_dict())
    assert again == exp and again.key() == exp.key()
    own = parse_experiment({"arms": [{"name": "g", "backing": "4k", "vm": {}}]})
    assert "domain" not in own.to_dict()["arms"][0]["vm"]  # own guests keep their identity


@pytest.mark.parametrize(("vm", "words"), [
    ({"domain": ""}, "must name a libvirt domain"),
    ({"domain": "x", "kernel": "/boot/vmlinuz"}, "kernel goes with hugelab's own guests"),
    ({"domain": "x", "uri": "not a uri"}, "is not a libvirt URI"),
])
def test_domain_errors(vm, words):
    with pytest.raises(ExperimentError, match=words):
        parse_experiment({"arms": [{"name": "a", "backing": "4k", "vm": vm}]})
