"""A tiny initramfs for image-less guests: busybox, the virtio/9p modules, an init and the agent.

The guest boots a distro kernel whose virtio, 9p and virtio-console drivers are modules, so the
initramfs carries exactly those modules (resolved through `modules.dep`), a static busybox and an
`/init` script that mounts the host's root filesystem read-only over virtio-9p, puts tmpfs on the
writable directories, creates `/dev/virtio-ports/<name>` links (there is no udev) and finally
`switch_root`s into the host root running the hugelab agent as PID 1.

The archive's busybox, modules and the start of /init are those of every hugelab busybox initrd
(hugelab.vm.common.busyboxinitrd); this module adds the rest of /init and the agent.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from hugelab import walks
from hugelab.errors import VMError
from hugelab.trial import procscan
from hugelab.vm.common.busyboxinitrd import busybox_initrd, find_busybox, init_prelude
from hugelab.vm.common.bzimage import setup_header

_BUILD_LOCK = threading.Lock()  # concurrent guests of one process build the image once

# What the guest needs, by module name; dependencies come from modules.dep.
GUEST_MODULES = (
    "virtio_pci",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "overlay",
    "virtio_net",  # only used when the guest has a NIC (port forwards)
)
ROOT_TAG = "hostroot"
GUEST_NET_ADDR = "10.0.2.15"  # slirp's default guest address (hostfwd delivers here)
AGENT_PORT = "hugelab.0"
GUEST_AGENT_PATH = "/run/hugelab/agent.py"
PROCSCAN_SOURCE = Path(procscan.__file__)  # copied beside the agent
WALKS_SOURCE = Path(walks.__file__)  # procscan's one import of hugelab's, copied beside it
WRITABLE_DIRS = ("tmp", "run", "var/tmp", "var/log", "var/cache", "root", "home")

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

INIT_TEMPLATE = r"""mkdir -p /newroot
mount -t 9p -o ro,trans=virtio,version=9p2000.L,access=any,msize=524288,cache={cache} {tag} /newroot \
  || fail "cannot mount the host root over 9p (tag {tag})"
# Writable directories: an overlay whose lower layer is the host's directory (read-only over
# 9p) and whose upper layer is guest tmpfs, so host files stay visible (a checkout under /tmp,
# a venv under /root) and guest writes stay in the guest. /run is plain tmpfs and holds the
# upper layers; where overlayfs fails, the directory falls back to an empty tmpfs.
mount -t tmpfs -o mode=0755 tmpfs /newroot/run || fail "cannot mount tmpfs on /run"
for d in {writable}; do
  [ "$d" = run ] && continue
  mode=0755
  case "$d" in tmp|var/tmp) mode=1777;; esac
  [ -d "/newroot/$d" ] || continue
  o="/newroot/run/.hugelab-overlay/$d"
  mkdir -p "$o/upper" "$o/work" && chmod $mode "$o/upper"
  mount -t overlay -o "lowerdir=/newroot/$d,upperdir=$o/upper,workdir=$o/work" overlay "/newroot/$d" \
    || mount -t tmpfs -o mode=$mode tmpfs "/newroot/$d"
done
mount -o move /proc /newroot/proc || fail "cannot move /proc"
mount -o move /sys /newroot/sys || fail "cannot move /sys"
mount -o move /dev /newroot/dev || fail "cannot move /dev"
mkdir -p /newroot/dev/shm /newroot/dev/pts /newroot/dev/virtio-ports /newroot/run/hugelab
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
for p in /newroot/sys/class/virtio-ports/*; do
  [ -e "$p/name" ] || continue
  ln -sf "../$(basename "$p")" "/newroot/dev/virtio-ports/$(cat "$p/name")"
done
cp /agent.py /procscan.py /walks.py /newroot{agent_dir}/ || fail "cannot install the agent"
ip link set lo up 2>/dev/null
case " $(cat /newroot/proc/cmdline) " in *" hugelab.net=1 "*)
  # user networking (restrict=on): slirp's default guest address, no default route
  n=0
  while [ ! -e /newroot/sys/class/net/eth0 ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
  ip addr add {net_addr}/24 dev eth0 && ip link set eth0 up || say "cannot configure eth0";;
esac
hostname hugelab-guest
say "starting agent"
cd /newroot
export HOME=/root LANG=C.UTF-8 TERM=dumb PATH={guest_path}
exec switch_root /newroot {python} -I -S {agent_path} --port {port}
"""


@dataclass(frozen=True)
class InitramfsSpec:
    """What goes into one guest initramfs (hashable: it keys the build cache)."""

    kernel_release: str
    modules_dir: Path
    python: str = "/usr/bin/python3"
    busybox: Path | None = None
    agent_source: Path = field(default_factory=lambda: Path(__file__).with_name("agent.py"))
    cache_mode: str = "loose"


# --- kernel image ------------------------------------------------------------------------------


def kernel_release(kernel: Path) -> str:
    """The release string (`uname -r`) baked into an x86 bzImage's setup header."""
    try:
        with open(kernel, "rb") as f:
            head = f.read(0x10000)
    except OSError as exc:
        raise VMError(f"cannot read kernel image {kernel}: {exc.strerror}",
                      hint="name an existing bzImage, e.g. /boot/vmlinuz-$(uname -r)") from exc
    header = setup_header(head)
    if header is None:
        raise VMError(f"{kernel} is not an x86 bzImage (no HdrS setup header)",
                      hint="pass a bootable kernel image such as /boot/vmlinuz-<release>")
    release = header.release(head)
    if not release:
        raise VMError(f"cannot read the kernel release from {kernel}")
    return release


def default_kernel() -> Path:
    """The host's own kernel if /boot has it, else the newest /boot/vmlinuz-*."""
    own = Path(f"/boot/vmlinuz-{os.uname().release}")
    if own.exists():
        return own
    found = sorted(Path("/boot").glob("vmlinuz-*"))
    if not found:
        raise VMError("no kernel image found in /boot",
                      hint="install a distro kernel (apt-get install linux-image-amd64) or name one")
    return found[-1]


def modules_dir_for(release: str, root: Path = Path("/")) -> Path:
    d = root / "lib/modules" / release
    if not (d / "modules.dep").exists():
        raise VMError(f"no modules for kernel {release} (missing {d}/modules.dep)",
                      hint=f"install the matching modules package (linux-image-{release})")
    return d


# --- build -------------------------------------------------------------------------------------


def init_script(spec: InitramfsSpec) -> str:
    return init_prelude("hugelab-init") + INIT_TEMPLATE.format(
        cache=spec.cache_mode, tag=ROOT_TAG, writable=" ".join(WRITABLE_DIRS),
        agent_path=GUEST_AGENT_PATH, agent_dir=GUEST_AGENT_PATH.rsplit("/", 1)[0],
        python=spec.python, port=AGENT_PORT, guest_path=GUEST_PATH,
        net_addr=GUEST_NET_ADDR,
    )


def build_initramfs(spec: InitramfsSpec) -> bytes:
    """The whole initramfs archive for `spec`, as bytes."""
    w = busybox_initrd(spec.modules_dir, GUEST_MODULES, busybox=spec.busybox,
                       dirs=("newroot",))
    w.file("init", init_script(spec).encode(), 0o755)
    w.file("agent.py", spec.agent_source.read_bytes(), 0o644)
    w.file("procscan.py", PROCSCAN_SOURCE.read_bytes(), 0o644)
    w.file("walks.py", WALKS_SOURCE.read_bytes(), 0o644)
    return w.finish()


def _cache_key(spec: InitramfsSpec, busybox: Path) -> str:
    h = hashlib.sha256()
    h.update(init_script(spec).encode())
    h.update(spec.agent_source.read_bytes())
    h.update(PROCSCAN_SOURCE.read_bytes())
    h.update(WALKS_SOURCE.read_bytes())
    for p in (busybox, spec.modules_dir / "modules.dep"):
        st = p.stat()
        h.update(f"{p}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def cached_initramfs(spec: InitramfsSpec, cache_dir: Path) -> Path:
    """Build (once) and return the path of the initramfs for `spec` under `cache_dir`.

    Safe for concurrent guests: threads of one process build it once (a lock), and processes
    write through a unique temporary file renamed into place (atomic)."""
    busybox = spec.busybox or find_busybox()
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = cache_dir / f"initramfs-{spec.kernel_release}-{_cache_key(spec, busybox)}.cpio"
    with _BUILD_LOCK:
        if out.exists():
            return out
        data = build_initramfs(spec)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{out.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return out
