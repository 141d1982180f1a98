"""A user's libvirt domain -> the transient copy an arm runs: the XML transformation (pure),
the experiment keys, and errors a user can act on."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from hugelab.errors import ExperimentError, VMError
from hugelab.experiment import Experiment, parse_experiment
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.domains import domain as dx

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
    assert mb is not None and mb.find("nosharepages") is not None  # the user's, kept
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
    assert root.find("devices/graphics") is None  # no console on the network
    chans = [c.find("target").get("name") for c in root.findall("devices/channel")]  # type: ignore[union-attr]
    assert chans == [dx.AGENT_CHANNEL]


@pytest.mark.parametrize(("kw", "want"), [
    ({"backing": "anon"}, None),
    ({"backing": "memfd"}, "<source type=\"memfd\" />"),
    ({"backing": "memfd", "hugetlb_size_kb": 1048576, "share": True}, "<access mode=\"shared\" />"),
])
def test_every_vm_backing(kw, want):
    xml = dx.transient_xml(USER, spec(**kw), name="x", overlays={})
    if want is None:  # no <hugepages>/<source>: only the user's own settings stay
        mb = ET.fromstring(xml).find("memoryBacking")
        assert mb is not None and [c.tag for c in mb] == ["nosharepages"]
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
    assert "access" not in exp.to_dict()["arms"][0]["vm"]  # so do runs from before SSH
    ssh = parse_experiment({**d, "vm": {"domain": "fedora", "access": "ssh", "ssh_user": "bob",
                                        "ssh_key": "/home/bob/.ssh/id_ed25519"}})
    assert ssh.arms[0].vm is not None and ssh.arms[0].vm.access == "ssh"
    assert ssh.arms[0].vm.ssh_user == "bob" and ssh.key() != exp.key()
    assert Experiment.from_dict(ssh.to_dict()) == ssh


def test_the_ssh_nic_is_reachable_from_loopback_only_on_a_free_slot():
    xml = dx.transient_xml(USER, spec(), name="c", overlays={
        "/var/lib/libvirt/images/fedora.qcow2": "/o/0.qcow2", "/dev/vg/data": "/o/1.qcow2"},
        ssh_forward=(40022, 22))
    root = ET.fromstring(xml)
    args = [a.get("value") for a in root.iter(f"{{{dx.QEMU_NS}}}arg")]
    assert args[0] == "-netdev" and args[2] == "-device"
    assert "restrict=on" in args[1] and "hostfwd=tcp:127.0.0.1:40022-:22" in args[1]
    assert args[3].endswith("addr=0x1e")
    assert "xmlns:qemu=" in xml  # libvirt reads the namespace
    taken = USER.replace("<graphics", "<video><address type='pci' domain='0x0000' bus='0x00' "
                         "slot='0x1e' function='0x0'/></video><graphics")
    xml = dx.transient_xml(taken, spec(), name="c", overlays={
        "/var/lib/libvirt/images/fedora.qcow2": "/o/0.qcow2", "/dev/vg/data": "/o/1.qcow2"},
        ssh_forward=(40022, 22))
    assert "addr=0x1d" in xml
    plain = dx.transient_xml(USER, spec(), name="c", overlays={
        "/var/lib/libvirt/images/fedora.qcow2": "/o/0.qcow2", "/dev/vg/data": "/o/1.qcow2"})
    assert "qemu:commandline" not in plain and "hugelab-ssh" not in plain


@pytest.mark.parametrize(("vm", "words"), [
    ({"domain": ""}, "must name a libvirt domain"),
    ({"domain": "x", "kernel": "/boot/vmlinuz"}, "kernel goes with hugelab's own guests"),
    ({"domain": "x", "uri": "not a uri"}, "is not a libvirt URI"),
    ({"access": "ssh"}, "goes with a user's domain"),
    ({"domain": "x", "access": "telnet"}, "access"),
    ({"domain": "x", "ssh_user": "root; rm -rf /"}, "is not a user name"),
    ({"domain": "x", "ssh_key": "id_rsa"}, "absolute path of a private key"),
    ({"domain": "x", "access": "agent", "ssh_user": "bob"}, "go with access"),
])
def test_domain_errors(vm, words):
    with pytest.raises(ExperimentError, match=words):
        parse_experiment({"arms": [{"name": "a", "backing": "4k", "vm": vm}]})


UEFI = USER.replace("<os><type arch='x86_64' machine='q35'>hvm</type></os>", """<os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE.fd</loader>
    <nvram template='/usr/share/OVMF/OVMF_VARS.fd'>/var/lib/libvirt/qemu/nvram/fedora_VARS.fd</nvram>
  </os>""").replace("<graphics type='vnc' port='5901' autoport='no'/>", """
    <filesystem type='mount'><source dir='/srv/data'/><target dir='data'/></filesystem>
    <serial type='file'><source path='/var/log/fedora-serial.log'/><target port='0'/></serial>""")


def test_the_copy_never_writes_the_users_nvram_shares_or_logs():
    root = dx.parse(UEFI)
    assert dx.nvram(root) == "/var/lib/libvirt/qemu/nvram/fedora_VARS.fd"
    xml = dx.transient_xml(UEFI, spec(), name="c", overlays={}, private="/ov/c",
                           nvram_copy="/ov/c/VARS.fd")
    new = ET.fromstring(xml)
    nv = new.find("os/nvram")
    assert nv is not None and nv.text == "/ov/c/VARS.fd" and "template" not in nv.attrib
    assert new.find("devices/filesystem/readonly") is not None
    assert new.find("devices/serial/source").get("path") == "/ov/c/serial0.log"  # type: ignore[union-attr]
    with pytest.raises(VMError, match="UEFI variable store"):
        dx.transient_xml(UEFI, spec(), name="c", overlays={})


@pytest.mark.parametrize(("old", "new", "words"), [
    ("<disk type='block' device='disk'>\n      <driver name='qemu' type='raw'/>\n"
     "      <source dev='/dev/vg/data'/>",
     "<disk type='volume' device='disk'>\n      <driver name='qemu' type='raw'/>\n"
     "      <source pool='default' volume='data.img'/>", "volume disk"),
    ("<disk type='block' device='disk'>\n      <driver name='qemu' type='raw'/>\n"
     "      <source dev='/dev/vg/data'/>",
     "<disk type='network' device='disk'>\n      <driver name='qemu' type='raw'/>\n"
     "      <source protocol='rbd' name='pool/img'/>", "network disk"),
])
def test_a_disk_hugelab_cannot_overlay_is_refused(old, new, words):
    assert old in USER
    with pytest.raises(VMError, match=words):
        dx.disks(dx.parse(USER.replace(old, new)))


def test_vcpus_tied_to_a_topology_and_memory_tied_to_numa_cells_are_refused():
    topo = USER.replace("<os>", "<cpu><topology sockets='1' cores='2' threads='1'/></cpu><os>")
    with pytest.raises(VMError, match="CPU topology"):
        dx.transient_xml(topo, spec(vcpus=1), name="c", overlays={})
    dx.transient_xml(topo, spec(vcpus=2), name="c", overlays={})  # unchanged: fine
    numa = USER.replace("<os>", "<cpu><numa><cell id='0' cpus='0-1' memory='2' unit='GiB'/>"
                        "</numa></cpu><os>")
    with pytest.raises(VMError, match="NUMA cells"):
        dx.transient_xml(numa, spec(mem_mib=1024), name="c", overlays={})


def test_the_arms_pins_and_numa_node():
    xml = dx.transient_xml(USER, spec(cpu_pin=(2, 3), numa_node=1), name="c", overlays={})
    root = ET.fromstring(xml)
    assert [p.get("cpuset") for p in root.findall("cputune/vcpupin")] == ["2,3", "2,3"]
    assert root.find("cputune/emulatorpin").get("cpuset") == "2,3"  # type: ignore[union-attr]
    assert root.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "1"}  # type: ignore[union-attr]


# --- the demo domain: its pinned SSH host key, its private copies ---------------------------

HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2UgaG9zdCBrZXkgZm9yIHRlc3RzIG9ubHkgMDEy x"


def test_the_demo_domain_pins_its_images_host_key_in_its_metadata():
    from hugelab.vm.domains.demo_domain import image_domain_xml
    xml = image_domain_xml("demo", "/i/disk.qcow2", "/i/vmlinuz", "/i/initrd.img",
                           key_arg="hugelab.ssh_key=ssh-ed25519,AAAA", host_key=HOST_KEY)
    root = dx.parse(xml)
    assert dx.host_key(root) == HOST_KEY
    assert 'xmlns:hugelab="urn:hugelab:domain:1"' in xml
    assert dx.host_key(dx.parse(USER)) is None  # a user's domain pins nothing: accept-new
    dx.pin_host_key(root, "ssh-ed25519 OTHER")  # pinning again replaces, never adds
    assert dx.host_key(root) == "ssh-ed25519 OTHER"
    assert len(root.findall(f"metadata/{{{dx.HUGELAB_NS}}}ssh")) == 1
    plain = image_domain_xml("demo", "/i/d", "/i/k", "/i/r")
    assert dx.host_key(dx.parse(plain)) is None and "<metadata" not in plain


def test_demo_copies_are_private_from_their_first_byte(tmp_path):
    import os

    from hugelab.vm.domains.demo_domain import _copy_private
    src, dst = tmp_path / "disk.qcow2", tmp_path / "copy.qcow2"
    src.write_bytes(b"x" * 3_000_000)
    dst.write_bytes(b"old")
    os.chmod(dst, 0o644)  # a copy of an earlier version, world-readable
    _copy_private(src, dst)
    assert dst.read_bytes() == src.read_bytes() and dst.stat().st_mode & 0o777 == 0o600
    _copy_private(src, tmp_path / "new")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600


def test_demo_copies_that_are_not_the_images_are_caught(tmp_path, monkeypatch):
    """A demo domain whose copies another image's files replaced (two hugelab versions
    defining the same name) is defined again rather than trusted by its description."""
    from hugelab.vm.domains import image as img
    from hugelab.vm.domains.demo_domain import copies_intact
    from hugelab.vm.domains.imagerecipe import recipe_hash
    from tests.vmhelpers import fake_image
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    home = tmp_path / "home"
    assert copies_intact(home)  # no cached image: nothing to compare with
    fake_image(img.image_dir(), recipe_hash())
    assert not copies_intact(home)  # no copies
    home.mkdir()
    for name in (img.DISK, img.KERNEL, img.INITRD):
        (home / name).write_bytes((img.image_dir() / name).read_bytes())
    assert copies_intact(home)
    (home / img.INITRD).write_bytes(b"another image's initrd")
    assert not copies_intact(home)


def test_a_demo_domains_stamp_is_read_in_parts():
    from hugelab.vm.domains.demo_domain import STAMP_PREFIX, _image_of, _key_of
    stamp = f"{STAMP_PREFIX} 0123abcd v4, key AAAAC3Nza123"
    assert (_image_of(stamp), _key_of(stamp)) == ("0123abcd", "AAAAC3Nza123")
    assert _image_of(STAMP_PREFIX) == "" and _key_of(STAMP_PREFIX) == ""  # no IndexError
    assert _image_of("a domain of someone else's") == ""
