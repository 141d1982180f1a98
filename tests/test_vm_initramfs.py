"""initramfs: module resolution, cpio layout, kernel release, init script."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab.errors import VMError
from hugelab.vm.common.cpio import CpioWriter
from hugelab.vm.common.kmodules import resolve_modules
from hugelab.vm.own import initramfs as ir

DEP = """\
kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko
kernel/fs/netfs/netfs.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko
"""


def test_resolve_orders_dependencies_first():
    order = resolve_modules(["9p", "9pnet_virtio", "virtio-console"], DEP)
    names = [p.rsplit("/", 1)[1] for p in order]
    assert len(names) == len(set(names))
    for before, after in [("netfs.ko", "fscache.ko"), ("fscache.ko", "9p.ko"),
                          ("9pnet.ko", "9p.ko"), ("virtio.ko", "9pnet_virtio.ko"),
                          ("virtio_ring.ko", "virtio_console.ko")]:
        assert names.index(before) < names.index(after)


def test_resolve_skips_builtin_and_unknown():
    order = resolve_modules(["9pnet_virtio", "nosuch"], DEP, "kernel/drivers/virtio/virtio.ko\n")
    assert not any(p.endswith("/virtio.ko") for p in order)
    assert order[-1].endswith("9pnet_virtio.ko")


def parse_cpio(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, off = {}, 0
    while True:
        assert data[off:off + 6] == b"070701"
        f = [int(data[off + 6 + 8 * i: off + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = f[1], f[6], f[11]
        name_start = off + 110
        name = data[name_start:name_start + namesize - 1].decode()
        off = (name_start + namesize + 3) & ~3
        body = data[off:off + size]
        off = (off + size + 3) & ~3
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_writer_roundtrip():
    w = CpioWriter()
    w.dir("bin")
    w.file("bin/x", b"hello", 0o755)
    w.symlink("bin/y", "x")
    w.chardev("dev/console", 5, 1)
    data = w.finish()
    assert len(data) % 512 == 0
    entries = parse_cpio(data)
    assert entries["bin/x"] == (0o100755, b"hello")
    assert entries["bin/y"][1] == b"x"
    assert entries["bin"][0] & 0o170000 == 0o040000


def test_kernel_release_of_non_kernel(tmp_path):
    f = tmp_path / "vmlinuz"
    f.write_bytes(b"\0" * 4096)
    with pytest.raises(VMError) as ei:
        ir.kernel_release(f)
    assert "bzImage" in ei.value.message and ei.value.hint
    with pytest.raises(VMError):
        ir.kernel_release(tmp_path / "missing")


def real_kernel() -> Path | None:
    found = sorted(Path("/boot").glob("vmlinuz-*"))
    return found[-1] if found else None


@pytest.mark.skipif(real_kernel() is None, reason="no kernel in /boot")
def test_real_kernel_and_initramfs(tmp_path):
    k = real_kernel()
    rel = ir.kernel_release(k)
    assert k.name == f"vmlinuz-{rel}"
    spec = ir.InitramfsSpec(rel, ir.modules_dir_for(rel))
    entries = parse_cpio(ir.build_initramfs(spec))
    assert entries["init"][0] == 0o100755 and entries["init"][1].startswith(b"#!/bin/busybox sh")
    assert b"done < /modules.order" in entries["init"][1]  # the shared prelude loads them
    assert "bin/busybox" in entries and "agent.py" in entries
    order = entries["modules.order"][1].decode().split()
    for m in ("9p.ko", "9pnet_virtio.ko", "virtio_console.ko"):
        assert m in order
    assert order.index("9pnet.ko") < order.index("9pnet_virtio.ko")
    p1 = ir.cached_initramfs(spec, tmp_path / "c")
    assert ir.cached_initramfs(spec, tmp_path / "c") == p1
    assert (p1.stat().st_mode & 0o777) == 0o600


@pytest.mark.skipif(real_kernel() is None, reason="no kernel in /boot")
def test_the_agents_files_run_where_hugelab_is_not(tmp_path):
    """In the guest only the standard library exists: the agent, the tree sampler and the
    walk budget it imports, as the initramfs carries them, import and sample from one directory
    with no site-packages and no hugelab (python -I -S)."""
    rel = ir.kernel_release(real_kernel())
    entries = parse_cpio(ir.build_initramfs(ir.InitramfsSpec(rel, ir.modules_dir_for(rel))))
    for name in ("agent.py", "procscan.py", "walks.py"):
        assert name in entries and f"/{name}" in entries["init"][1].decode()
        (tmp_path / name).write_bytes(entries[name][1])
    code = ("import os, sys\nsys.path.insert(0, os.getcwd())  # as the agent puts its own directory\n"
            "import agent, procscan\n"
            "s = procscan.TreeSampler(lambda: [os.getpid()], 0.05).start()\n"
            "s.sample_now(); t = s.stop()\n"
            "print(agent.__file__, procscan.Walks.__module__, t['walks'] >= 2, t['rss_kb'] > 0)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(tmp_path / "agent.py"), "walks", "True", "True"], out


def test_init_script_mentions_everything():
    spec = ir.InitramfsSpec("6.1.0-x", Path("/lib/modules/6.1.0-x"), python="/usr/bin/python3")
    text = ir.init_script(spec)
    assert "mount -t 9p -o ro,trans=virtio" in text and ir.ROOT_TAG in text
    assert "switch_root /newroot /usr/bin/python3" in text
    assert "--port hugelab.0" in text
    assert os.path.basename(ir.GUEST_AGENT_PATH) in text
