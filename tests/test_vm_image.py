"""The Debian guest disk image (hugelab.vm.domains.image*): its recipe hash, the cache, build safety
(atomic publish, stale temporary directories, clear errors), the QEMU command line, and one
real build + TCG boot that reaches qemu-guest-agent and runs sysbench and stress-ng in the guest.

The small qemu-guest-agent client below exists only for this test: production talks to the
agent through libvirt's agent API."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hugelab import proc
from hugelab.errors import HugelabError, NotRootError, ToolMissingError
from hugelab.owned import cache_dir
from hugelab.vm.domains import image as img
from hugelab.vm.domains import imageboot, imagebuild, imagedirs, imagerecipe
from tests.vmhelpers import FAKE_HOST_KEY, fake_image

# --- helpers -------------------------------------------------------------------------------------

@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(root))
    return root


@pytest.fixture
def no_real_build(monkeypatch):
    """Build steps that need root and the network are replaced; returns the calls seen."""
    calls: list[Path] = []

    def fake_build(out: Path, recipe: imagerecipe.Recipe, digest: str, say: Any) -> None:
        calls.append(out)
        assert out.name.startswith(img.TMP_PREFIX) and out.is_dir()
        assert not [p for p in out.parent.iterdir() if p.name.startswith(img.TMP_PREFIX)
                    and p != out], "stale temporary directories must be gone before a build"
        fake_image(out, digest)

    monkeypatch.setattr(imagebuild, "_preflight", lambda: None)
    monkeypatch.setattr(imagebuild, "_check_mirror", lambda mirror, suite: None)
    monkeypatch.setattr(imagebuild, "_build_into", fake_build)
    return calls


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- the recipe ----------------------------------------------------------------------------------


def test_recipe_hash_is_stable_short_and_ignores_the_mirror():
    h = imagerecipe.recipe_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", h)
    assert imagerecipe.recipe_hash() == h
    assert imagerecipe.recipe_hash(imagerecipe.Recipe()) == h  # default mirror vs this host's: same content
    assert imagerecipe.recipe_hash(dataclasses.replace(imagerecipe.RECIPE, mirror="http://ftp.de.debian.org/x")) == h
    assert img.image_dir().name == h


def test_recipe_hash_changes_with_everything_that_shapes_the_image(monkeypatch):
    r = imagerecipe.RECIPE
    variants = [
        dataclasses.replace(r, suite="trixie"),
        dataclasses.replace(r, variant="buildd"),
        dataclasses.replace(r, packages=(*r.packages, "openssh-server")),
        dataclasses.replace(r, packages=tuple(sorted(r.packages))[:-1]),
        dataclasses.replace(r, files=((r.files[0][0], "other-name\n"), *r.files[1:])),
        dataclasses.replace(r, commands=r.commands[:-1]),
        dataclasses.replace(r, remove=r.remove[:-1]),
        dataclasses.replace(r, initramfs_modules=(*r.initramfs_modules, "virtio_net")),
        dataclasses.replace(r, initrd_modules=(*r.initrd_modules, "virtio_net")),
        dataclasses.replace(r, free_mib=r.free_mib + 64),
    ]
    hashes = {imagerecipe.recipe_hash(v) for v in variants} | {imagerecipe.recipe_hash(r)}
    assert len(hashes) == len(variants) + 1
    base = imagerecipe.recipe_hash(r)
    monkeypatch.setattr(imagerecipe, "IMAGE_VERSION", imagerecipe.IMAGE_VERSION + 1)
    assert imagerecipe.recipe_hash(r) != base


def test_recipe_never_stores_a_password_and_configures_the_guest():
    files = dict(imagerecipe.RECIPE.files)
    assert "/dev/vda\t/\text4" in files["/etc/fstab"]
    assert files["/etc/hostname"].strip() == imagerecipe.HOSTNAME
    cmds = [" ".join(c) for c in imagerecipe.RECIPE.commands]
    assert "systemctl enable serial-getty@ttyS0.service" in cmds
    assert "passwd --lock root" in cmds
    assert not any("chpasswd" in c or "passwd root" in c for c in cmds)
    assert {"virtio_blk", "virtio_pci", "virtio_console", "ext4"} <= set(imagerecipe.RECIPE.initramfs_modules)
    assert {"qemu-guest-agent", "sysbench", "stress-ng", "linux-image-amd64"} <= set(
        imagerecipe.RECIPE.packages)


def test_mirror_is_read_from_deb822_and_one_line_sources():
    deb822 = """Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Enabled: no

Types: deb deb-src
URIs: http://deb.example.org/debian http://second.example/debian
Suites: bookworm bookworm-updates
Components: main
"""
    assert imagerecipe.mirror_from_sources(deb822, "bookworm") == "http://deb.example.org/debian"
    assert imagerecipe.mirror_from_sources(deb822, "trixie") is None
    one_line = ("# deb http://old.example/debian bookworm main\n"
                "deb http://security.debian.org/debian-security bookworm main\n"
                "deb [arch=amd64] http://ftp.example/debian/ bookworm main contrib\n")
    assert imagerecipe.mirror_from_sources(one_line, "bookworm") == "http://ftp.example/debian"
    assert imagerecipe.RECIPE.mirror.startswith(("http://", "https://"))


def test_fs_size_leaves_room_and_rounds_to_64_mib():
    for content in (1, 300 << 20, 650 << 20):
        size = imagebuild.fs_size_mib(content, 384)
        assert size % 64 == 0
        assert size >= content * 1.12 / imagebuild.MiB + 64 + 384
    assert imagebuild.fs_size_mib(650 << 20, 384) < 1536  # the real image stays under 1.5 GiB raw


# --- the cache -----------------------------------------------------------------------------------


def test_cache_hit_returns_at_once_without_building(cache, monkeypatch):
    digest = imagerecipe.recipe_hash()
    fake_image(cache / "images" / digest, digest)

    def no_build(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a cache hit must not build")

    monkeypatch.setattr(imagebuild, "_build_into", no_build)
    monkeypatch.setattr(imagebuild, "_preflight", no_build)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a hit needs no root
    got = imagebuild.build_image()  # no build, no preflight: both raise above
    d = cache / "images" / digest
    assert got == img.GuestImage(disk=d / "disk.qcow2", kernel=d / "vmlinuz",
                                 initrd=d / "initrd.img", recipe=digest, root_device="/dev/vda",
                                 size_bytes=1 << 30, disk_file_bytes=64,
                                 kernel_version="6.1.0-test-amd64", host_key=FAKE_HOST_KEY)
    assert got.directory == d


def test_cache_dir_comes_from_the_environment_and_is_created_private(cache, monkeypatch):
    assert cache_dir() == cache and (cache.stat().st_mode & 0o777) == 0o700
    assert img.image_dir() == cache / "images" / imagerecipe.recipe_hash()
    monkeypatch.delenv("HUGELAB_CACHE_DIR")
    assert img.image_dir().parent == Path("/var/cache/hugelab/images")


@pytest.mark.parametrize("damage", ["no-manifest", "other-hash", "truncated-disk", "no-kernel",
                                    "no-host-key", "rsa-host-key"])
def test_an_incomplete_directory_is_no_cache_hit(tmp_path, damage):
    d = tmp_path / "abc"
    fake_image(d, "abc")
    assert img.load_image(d) is not None
    if damage == "no-manifest":
        (d / img.MANIFEST).unlink()
    elif damage == "other-hash":
        fake_image(d, "def")
    elif damage == "truncated-disk":
        (d / img.DISK).write_bytes(b"QFI")
    elif damage == "no-host-key":
        (d / img.HOST_KEY).unlink()
    elif damage == "rsa-host-key":
        (d / img.HOST_KEY).write_text("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ root@x\n")
    else:
        (d / img.KERNEL).unlink()
    assert img.load_image(d) is None


def test_a_complete_image_carries_its_host_key(tmp_path):
    fake_image(tmp_path / "abc", "abc")
    got = img.load_image(tmp_path / "abc")
    assert got is not None and got.host_key == FAKE_HOST_KEY


@pytest.mark.tools
def test_each_build_makes_its_own_sshd_host_key_and_drops_the_packages_ones(tmp_path):
    """What the build does after debootstrap: the keys openssh-server's install made are
    removed, a new ed25519 key is made (private 0600, in the guest only) and its public half
    kept beside the disk; two builds never share one. sshd is told to use that key alone."""
    keys = []
    for n in range(2):
        root, out = tmp_path / f"root{n}", tmp_path / f"out{n}"
        (root / "etc" / "ssh").mkdir(parents=True)
        out.mkdir()
        for baked in ("ssh_host_rsa_key", "ssh_host_rsa_key.pub", "ssh_host_ecdsa_key",
                      "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
            (root / "etc" / "ssh" / baked).write_text("baked\n")
        line = imagebuild._host_key(root, out, f"digest{n}")
        assert img.host_key_problem(line) is None and line.endswith(f"image digest{n}")
        assert sorted(p.name for p in (root / "etc" / "ssh").iterdir()) == \
            ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"]
        private = root / imagerecipe.GUEST_HOST_KEY.lstrip("/")
        assert private.stat().st_mode & 0o777 == 0o600
        assert "OPENSSH PRIVATE KEY" in private.read_text()
        assert (out / img.HOST_KEY).read_text() == line + "\n"
        assert Path(f"{private}.pub").read_text().strip() == line
        assert not list(out.glob("*key")), "the private half stays in the guest root"
        keys.append(line.split()[1])
    assert keys[0] != keys[1]
    sshd = dict(imagerecipe.RECIPE.files)["/etc/ssh/sshd_config.d/hugelab.conf"]
    assert f"HostKey {imagerecipe.GUEST_HOST_KEY}\n" in sshd


def test_build_removes_stale_temp_dirs_and_publishes_atomically(cache, no_real_build):
    images = cache / "images"
    stale = [images / ".tmp-0123456789abcdef-4242", images / ".tmp-old-fedcba9876543210-7"]
    for s in stale:
        (s / "root" / "etc").mkdir(parents=True)
        (s / "root" / "etc" / "hostname").write_text("half\n")
    keep = images / "0000000000000000"  # another recipe's finished image is not touched
    fake_image(keep, keep.name)
    got = imagebuild.build_image()
    assert len(no_real_build) == 1
    assert not any(s.exists() for s in stale)
    assert not [p for p in images.iterdir() if p.name.startswith(img.TMP_PREFIX)]
    assert got.directory == images / imagerecipe.recipe_hash()
    assert img.load_image(got.directory) == got
    assert img.load_image(keep) is not None
    assert (images.stat().st_mode & 0o777) == 0o700
    assert imagebuild.build_image() == got and len(no_real_build) == 1  # now a hit
    assert imagebuild.build_image(force=True) == got and len(no_real_build) == 2


def test_a_failed_build_leaves_no_image_and_no_temp_dir(cache, no_real_build, monkeypatch):
    def failing(out: Path, recipe: imagerecipe.Recipe, digest: str, say: Any) -> None:
        fake_image(out, digest)  # everything but...
        raise RuntimeError("killed halfway")

    monkeypatch.setattr(imagebuild, "_build_into", failing)
    with pytest.raises(RuntimeError):
        imagebuild.build_image()
    images = cache / "images"
    assert [p.name for p in images.iterdir()] == [".build.lock"]
    assert img.load_image(img.image_dir()) is None


def test_stale_removal_never_deletes_through_a_mount(tmp_path, monkeypatch):
    d = tmp_path / ".tmp-x-1"
    (d / "root" / "proc").mkdir(parents=True)
    monkeypatch.setattr(imagedirs, "mounts_under", lambda path, mountinfo=None: [d / "root" / "proc"])
    calls = []

    def fake_run(argv, **_kw):
        calls.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 32, "", "umount: target is busy")

    monkeypatch.setattr(proc, "run", fake_run)
    with pytest.raises(img.ImageError, match="still mounted"):
        imagedirs.remove_stale(tmp_path)
    assert d.exists()
    assert calls[0][0] == "umount" and calls[-1][:2] == ["umount", "--lazy"]


def test_mounts_under_reads_mountinfo():
    info = (
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "90 22 0:5 / /c/images/.tmp-a-1/root/proc rw - proc proc rw\n"
        "91 90 0:6 / /c/images/.tmp-a-1/root/proc/sys/fs/binfmt_misc rw - binfmt_misc x rw\n"
        "92 22 0:7 / /c/images/.tmp-a-1/root/my\\040dir rw - tmpfs t rw\n"
        "93 22 0:8 / /c/images/.tmp-a-10/root/sys rw - sysfs s rw\n"
    )
    got = imagedirs.mounts_under(Path("/c/images/.tmp-a-1"), info)
    assert got[0] == Path("/c/images/.tmp-a-1/root/proc/sys/fs/binfmt_misc")
    assert set(got) == {Path("/c/images/.tmp-a-1/root/proc"),
                        Path("/c/images/.tmp-a-1/root/proc/sys/fs/binfmt_misc"),
                        Path("/c/images/.tmp-a-1/root/my dir")}


# --- errors --------------------------------------------------------------------------------------


def test_missing_debootstrap_is_a_clear_error(cache, monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool, *a, **k: None if tool == "debootstrap"
                        else real_which(tool, *a, **k))
    with pytest.raises(img.DebootstrapMissingError) as e:
        imagebuild.build_image()
    assert isinstance(e.value, HugelabError) and isinstance(e.value, ToolMissingError)
    assert "debootstrap" in e.value.message
    assert e.value.hint and "apt-get install debootstrap" in e.value.hint
    assert "./bootstrap setup" in e.value.hint
    assert not cache.exists()  # nothing written before the checks pass


def test_building_needs_root(cache, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NotRootError) as e:
        imagebuild.build_image()
    assert e.value.hint and "root" in e.value.message
    assert not cache.exists()


def test_unreachable_mirror_is_a_clear_error(cache, monkeypatch):
    monkeypatch.setattr(imagebuild, "_preflight", lambda: None)
    recipe = dataclasses.replace(imagerecipe.RECIPE, mirror="http://127.0.0.1:9/debian")
    with pytest.raises(img.MirrorUnreachableError) as e:
        imagebuild.build_image(recipe=recipe)
    assert "127.0.0.1:9" in e.value.message and e.value.hint and "proxy" in e.value.hint
    assert [p.name for p in (cache / "images").iterdir()] == [".build.lock"]


# --- booting -------------------------------------------------------------------------------------


def _image_at(d: Path) -> img.GuestImage:
    return img.GuestImage(disk=d / "disk.qcow2", kernel=d / "vmlinuz", initrd=d / "initrd.img",
                          recipe="0" * 16, size_bytes=1 << 30)


def test_boot_argv_boots_the_kernel_on_an_overlay_with_the_agent_and_no_network(tmp_path):
    image = _image_at(tmp_path / "img")
    ov, sock, log = tmp_path / "a,b" / "ov.qcow2", tmp_path / "qga.sock", tmp_path / "serial.log"
    argv = imageboot.boot_argv(image, mem_mib=512, agent_socket=sock, serial_log=log, accel="tcg",
                         overlay=ov)
    assert argv[0] == "qemu-system-x86_64"
    opt = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("-")
           and not argv[i + 1].startswith("-")}
    assert opt["-kernel"] == str(image.kernel) and opt["-initrd"] == str(image.initrd)
    assert opt["-append"].split()[:3] == ["root=/dev/vda", "rw", "console=ttyS0"]
    assert opt["-accel"] == "tcg" and opt["-m"] == "512M"
    assert "-nodefaults" in argv
    assert f"file={tmp_path}/a,,b/ov.qcow2,format=qcow2,if=none,id=disk0" in argv
    assert "virtio-blk-pci,drive=disk0" in argv
    assert str(image.disk) not in " ".join(argv)
    assert f"socket,path={sock},server=on,wait=off,id=qga0" in argv
    assert "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0" in argv
    assert "virtio-serial" in argv and f"file,id=con0,path={log}" in argv
    assert not {"-netdev", "-nic", "-net"} & set(argv)
    kvm = imageboot.boot_argv(image, mem_mib=1024, agent_socket=sock, serial_log=log, accel="kvm",
                        overlay=ov, vcpus=2)
    assert kvm[kvm.index("-cpu") + 1] == "host" and kvm[kvm.index("-smp") + 1] == "2"


def test_boot_argv_refuses_the_base_image_and_unresolved_accel(tmp_path):
    image = _image_at(tmp_path)
    kw: dict[str, Any] = dict(mem_mib=512, agent_socket=tmp_path / "s", serial_log=tmp_path / "l")
    with pytest.raises(img.ImageError, match="overlay"):
        imageboot.boot_argv(image, accel="tcg", overlay=image.disk, **kw)
    with pytest.raises(img.ImageError, match="kvm or tcg"):
        imageboot.boot_argv(image, accel="auto", overlay=tmp_path / "o", **kw)
    with pytest.raises(img.ImageError, match="overlay"):
        imageboot.make_overlay(image, image.disk)


@pytest.mark.tools
def test_make_overlay_is_backed_by_the_untouched_base(tmp_path):
    if shutil.which("qemu-img") is None:
        pytest.skip("qemu-img is not installed (apt-get install qemu-utils)")
    image = _image_at(tmp_path)
    proc.run(["qemu-img", "create", "-q", "-f", "qcow2", image.disk, "16M"])
    before = _sha256(image.disk)
    ov = imageboot.make_overlay(image, tmp_path / "ov.qcow2")
    info = json.loads(proc.run(["qemu-img", "info", "--output=json", ov]).stdout)
    assert info["format"] == "qcow2" and info["virtual-size"] == 16 << 20
    assert info["backing-filename"] == str(image.disk)
    assert info.get("backing-filename-format") == "qcow2"
    assert _sha256(image.disk) == before


# --- a real image, booted ------------------------------------------------------------------------


class AgentClient:
    """qemu-guest-agent's JSON protocol over the unix socket QEMU serves (test only)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _send(self, cmd: str, args: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"execute": cmd}
        if args is not None:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")

    def _reply(self, deadline: float) -> dict[str, Any] | None:
        """The next JSON reply, or None at the deadline."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                line = line.strip(b"\xff \r\t")
                if line:
                    try:
                        return dict(json.loads(line))
                    except ValueError:
                        continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not data:
                raise ConnectionError("QEMU closed the agent socket")
            self.buf += data

    def sync(self, attempt_s: float = 3.0) -> bool:
        """guest-sync with a fresh id; replies to older (stale) syncs are skipped."""
        ident = random.randrange(1, 2**31)
        self._send("guest-sync", {"id": ident})
        deadline = time.monotonic() + attempt_s
        while (reply := self._reply(deadline)) is not None:
            if reply.get("return") == ident:
                return True
        return False

    def call(self, cmd: str, args: dict[str, Any] | None = None, timeout: float = 30.0) -> Any:
        self._send(cmd, args)
        reply = self._reply(time.monotonic() + timeout)
        assert reply is not None, f"no reply to {cmd} within {timeout}s"
        assert "error" not in reply, f"{cmd}: {reply['error']}"
        return reply["return"]

    def exec(self, path: str, *args: str, timeout: float = 120.0) -> tuple[int, str, str]:
        pid = self.call("guest-exec", {"path": path, "arg": list(args), "capture-output": True})
        deadline = time.monotonic() + timeout
        while True:
            st = self.call("guest-exec-status", {"pid": pid["pid"]})
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", "")).decode(errors="replace")
                err = base64.b64decode(st.get("err-data", "")).decode(errors="replace")
                return int(st.get("exitcode", -1)), out, err
            assert time.monotonic() < deadline, f"{path} {args} still running after {timeout}s"
            time.sleep(0.2)


def _wait_for_agent(sock: Path, qemu: subprocess.Popen[Any], serial: Path,
                    timeout: float) -> AgentClient:
    deadline = time.monotonic() + timeout

    def check_alive() -> None:
        if qemu.poll() is not None:
            tail = serial.read_text(errors="replace")[-3000:] if serial.exists() else ""
            pytest.fail(f"QEMU exited ({qemu.returncode}) before the agent answered:\n{tail}")

    while not sock.exists():
        check_alive()
        assert time.monotonic() < deadline, "QEMU never created the agent socket"
        time.sleep(0.1)
    agent = AgentClient(sock)
    while not agent.sync():
        check_alive()
        if time.monotonic() > deadline:
            tail = serial.read_text(errors="replace")[-3000:] if serial.exists() else ""
            agent.close()
            pytest.fail(f"no guest agent answer within {timeout}s; serial console:\n{tail}")
    return agent


@pytest.mark.vm
@pytest.mark.slow
@pytest.mark.beside  # its own QEMU on an overlay, judged from inside: the background lane
def test_real_image_boots_under_tcg_and_runs_workloads_through_the_guest_agent(tmp_path):
    t0 = time.monotonic()
    image = imagebuild.build_image(progress=lambda m: print(f"  build: {m}", flush=True))
    build_s = time.monotonic() - t0
    assert image.directory == img.image_dir()
    assert image.size_bytes < 3 << 30 and image.disk_file_bytes < image.size_bytes  # with servers
    t1 = time.perf_counter()
    assert imagebuild.build_image() == image
    hit_ms = (time.perf_counter() - t1) * 1000
    base_sha = _sha256(image.disk)

    overlay = imageboot.make_overlay(image, tmp_path / "overlay.qcow2")
    sock, serial = tmp_path / "qga.sock", tmp_path / "serial.log"
    argv = imageboot.boot_argv(image, mem_mib=512, agent_socket=sock, serial_log=serial,
                         accel="tcg", overlay=overlay)
    with (tmp_path / "qemu.err").open("w") as err:
        t_boot = time.monotonic()
        qemu = proc.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    agent = None
    try:
        agent = _wait_for_agent(sock, qemu, serial, timeout=300)
        boot_s = time.monotonic() - t_boot
        assert agent.call("guest-ping") == {}
        rc, out, _ = agent.exec("/usr/bin/sysbench", "--version")
        assert rc == 0 and out.startswith("sysbench "), out
        sysbench = out.strip()
        rc, out, _ = agent.exec("/usr/bin/stress-ng", "--version")
        assert rc == 0 and "stress-ng" in out, out
        stressng = out.strip()
        # the agent was started by systemd (udev rule on the virtio port), root is /dev/vda
        rc, out, _ = agent.exec("/usr/bin/systemctl", "is-active", "qemu-guest-agent.service")
        assert out.strip() == "active"
        rc, out, _ = agent.exec("/usr/bin/cat", "/proc/mounts", "/etc/hostname")
        assert re.search(r"^/dev/vda / ext4 rw", out, re.MULTILINE), out
        # through hugelab's busybox initrd (imageinitrd.py), not Debian's initramfs
        rc, out, _ = agent.exec("/usr/bin/dmesg")
        assert "hugelab-initrd: root /dev/vda mounted rw, starting /sbin/init" in out, out[-3000:]
        assert imagerecipe.HOSTNAME in out
        # sshd has this build's own host key, and only it
        rc, out, _ = agent.exec("/usr/bin/sh", "-c", "ls /etc/ssh/ | grep ssh_host_; cat "
                                f"{imagerecipe.GUEST_HOST_KEY}.pub; stat -c %a {imagerecipe.GUEST_HOST_KEY}")
        assert out.split("\n")[:2] == ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"], out
        assert out.split("\n")[2].strip() == image.host_key and out.split("\n")[3] == "600"
        rc, out, _ = agent.exec("/usr/bin/systemctl", "is-system-running", "--wait", timeout=180)
        state = out.strip()
        assert state in ("running", "degraded"), state
        rc, failed, _ = agent.exec("/usr/bin/systemctl", "--failed", "--no-legend", "--plain")
        ready_s = time.monotonic() - t_boot
        getty_deadline = time.monotonic() + 60
        while "login:" not in serial.read_text(errors="replace"):
            assert time.monotonic() < getty_deadline, "no getty on the serial console (ttyS0)"
            time.sleep(0.5)
        # guest writes go to the overlay only
        rc, _, _ = agent.exec("/usr/bin/dd", "if=/dev/zero", "of=/root/scratch", "bs=1M",
                              "count=8", "conv=fsync")
        assert rc == 0
    finally:
        if agent is not None:
            agent.close()
        qemu.kill()
        qemu.wait(timeout=30)
    assert _sha256(image.disk) == base_sha, "booting the guest changed the cached base image"
    print(f"\n  image {image.recipe}: cold build or reuse {build_s:.1f}s, cache hit "
          f"{hit_ms:.2f} ms; disk {image.size_bytes >> 20} MiB virtual, "
          f"{image.disk_file_bytes >> 20} MiB qcow2; kernel {image.kernel_version}\n"
          f"  TCG boot to agent {boot_s:.1f}s, to systemd '{state}' {ready_s:.1f}s "
          f"(failed units: {failed.strip() or 'none'})\n  {sysbench}; stress-ng {stressng}")
