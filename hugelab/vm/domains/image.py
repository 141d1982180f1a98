"""A small real Debian guest disk image, built from Debian's packages and cached by recipe hash.

hugelab's own guests need no disk (see initramfs.py); this image is for what users run: a real
distribution with systemd, udev and qemu-guest-agent, as in "your own VMs" (issue 11). It is
built once per recipe and kept in the cache directory (`HUGELAB_CACHE_DIR`, default
`/var/cache/hugelab`; not the state directory, so it outlives test runs):

    cache_dir()/images/<recipe_hash>/
        disk.qcow2      the root filesystem: ext4 on the whole disk (no partition table),
                        label hugelab-root; the guest sees it as /dev/vda (virtio-blk)
        vmlinuz         the guest's own Debian kernel, booted directly (-kernel; no bootloader)
        initrd.img      its initramfs (initramfs-tools, MODULES=list: virtio + ext4 only)
        packages.txt    every installed package and version (`dpkg-query -W`)
        host_key.pub    the public half of the guest sshd's host key (see below)
        recipe.json     written last: the recipe, sizes, kernel version, build time

How it is built (root only): `debootstrap --variant=minbase --include=PACKAGES` into a temporary
directory beside the final one, the recipe's files written and commands run inside it with
`chroot` (argv lists through hugelab.proc.run, never a shell), `mkfs.ext4 -d ROOT` (no loop
mount), `qemu-img convert -O qcow2`, then one atomic rename of the temporary directory to the
final one. A killed build leaves only a `.tmp-*` directory, which the next build removes (after
unmounting whatever a killed debootstrap left mounted inside it), never a half image that looks
complete. Builds take a lock, so two processes never build at once.

Guests boot a copy-on-write overlay (`make_overlay`), so the cached base is never written.
`boot_argv` gives the QEMU command line; the guest agent listens on the virtio-serial port
`org.qemu.guest_agent.0`: Debian's udev rule starts qemu-guest-agent.service as soon as that port
appears (the unit has no [Install] section and needs no enabling).

Each build generates its own ed25519 sshd host key (`ssh-keygen` at build time, after every
key the openssh-server package made is removed; sshd is told to use that key only), so no two
builds share a host key and none is baked into hugelab. Its public half is kept beside the disk
(`host_key.pub`, and in recipe.json): the SSH way into a domain of the image pins it
(hugelab.vm.domains.demo_domain puts it in the domain's metadata, hugelab.vm.domains.ssh writes
it to the connection's known_hosts) instead of trusting the first key it is shown.

The recipe hash covers what ends up in the image (suite, packages, files, commands, removals,
initramfs modules, free space) and IMAGE_VERSION, not the mirror: where packages come from is
transport (the guest's own /etc/apt/sources.list always names deb.debian.org). The image is
*not* bit-reproducible: a rebuild of the same recipe gets the suite's current point release.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab import proc
from hugelab.errors import NotRootError, ToolMissingError, VMError
from hugelab.owned import cache_dir, cache_path, ensure_private_dir

IMAGE_VERSION = 2  # bump when the build steps change in a way the recipe does not show
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES_FILES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
ROOT_DEVICE = "/dev/vda"
FS_LABEL = "hugelab-root"
HOSTNAME = "hugelab-guest"
QGA_PORT = "org.qemu.guest_agent.0"  # qemu-guest-agent's port (hugelab's own agent uses another)
KERNEL_CMDLINE = (f"root={ROOT_DEVICE}", "rw", "console=ttyS0", "panic=-1")
MANIFEST = "recipe.json"
DISK, KERNEL, INITRD, PACKAGES = "disk.qcow2", "vmlinuz", "initrd.img", "packages.txt"
HOST_KEY = "host_key.pub"  # the guest sshd's host key, public half
GUEST_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"  # its private half, in the guest only
TMP_PREFIX = ".tmp-"
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
DEBOOTSTRAP_TIMEOUT = 1800.0
STEP_TIMEOUT = 900.0
MiB = 1 << 20

# The guest's apt sources: fixed, whatever mirror the build used.
_GUEST_SOURCES = "deb http://deb.debian.org/debian bookworm main\n"
_INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod", "virtio_console", "ext4")
# The root key sshd accepts, from the kernel command line: hugelab.ssh_key=TYPE,BASE64 (a
# public key; define_image_domain puts hugelab's own there). Nothing secret is in the image.
SSH_KEY_ARG = "hugelab.ssh_key"
SSH_KEYS_COMMAND = "/usr/local/sbin/hugelab-ssh-keys"
_SSH_KEYS_SCRIPT = f"""#!/bin/sh
# sshd's AuthorizedKeysCommand: root's key from the kernel command line ({SSH_KEY_ARG}=TYPE,KEY)
[ "$1" = root ] || exit 0
for word in $(cat /proc/cmdline); do
    case "$word" in {SSH_KEY_ARG}=*) echo "${{word#*=}}" | tr , ' ' ;; esac
done
"""
# The servers' own units: a benchmark starts its server with the arm's settings, and a server
# started at boot would take the guest's memory (and, under TCG, its boot time).
_SERVER_UNITS = ("postgresql.service", "redis-server.service", "memcached.service",
                 "mariadb.service")
# Units that cost a one-vCPU guest seconds at every boot under TCG and give a benchmark guest
# nothing (measured with systemd-analyze blame: e2scrub_reap 5.3 s, getty-static 3.2 s).
_SLOW_BOOT_UNITS = ("e2scrub_reap.service", "getty-static.service")
# Timers that would wake up in the middle of a benchmark.
_QUIET_TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
                 "e2scrub_all.timer", "fstrim.timer")


class ImageError(VMError):
    """The guest disk image could not be built or used."""


class DebootstrapMissingError(ImageError, ToolMissingError):
    """debootstrap (or another build tool) is not installed."""

    def __init__(self, tool: str = "debootstrap", package: str = "debootstrap") -> None:
        ToolMissingError.__init__(self, tool, package)
        self.hint = (f"install it with: apt-get install {package} "
                     "(or run ./bootstrap setup, which installs every package hugelab needs)")


class MirrorUnreachableError(ImageError):
    """The Debian mirror the image's packages come from cannot be reached."""


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the image's content (see the module docstring)."""

    suite: str = "bookworm"
    mirror: str = DEFAULT_MIRROR  # transport only: not part of the hash
    variant: str = "minbase"
    packages: tuple[str, ...] = (
        "systemd-sysv", "udev", "qemu-guest-agent", "sysbench", "stress-ng",
        "linux-image-amd64", "initramfs-tools", "procps", "iproute2", "openssh-server",
        # servers for `domain = NAME` server arms (issue 28), off at boot: hugelab starts them;
        # a JRE for the JVM kind (a user's jar is copied in)
        "postgresql", "redis-server", "redis-tools", "memcached", "libmemcached-tools",
        "mariadb-server", "mariadb-client", "openjdk-17-jre-headless",
    )
    # (absolute path in the guest, content), written in order after debootstrap
    files: tuple[tuple[str, str], ...] = (
        ("/etc/hostname", f"{HOSTNAME}\n"),
        ("/etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{HOSTNAME}\n"
                       "::1\tlocalhost ip6-localhost ip6-loopback\n"),
        # root is the whole virtio disk (no partition table); no fsck: the kernel mounts it rw
        ("/etc/fstab", f"# hugelab guest image\n{ROOT_DEVICE}\t/\text4\trw,errors=remount-ro\t0\t0\n"),
        ("/etc/apt/sources.list", _GUEST_SOURCES),
        ("/etc/initramfs-tools/modules", "".join(f"{m}\n" for m in _INITRAMFS_MODULES)),
        ("/etc/initramfs-tools/conf.d/hugelab.conf", "MODULES=list\nCOMPRESS=gzip\nRESUME=none\n"),
        ("/etc/machine-id", ""),  # empty: every boot of every copy gets its own id
        # SSH, for guests reached without the agent: DHCP on any NIC (hugelab adds one with a
        # 127.0.0.1 forward), root's key read from the kernel command line (SSH_KEY_ARG)
        ("/etc/systemd/network/80-hugelab-dhcp.network", "[Match]\nName=en* eth*\n\n"
                                                         "[Network]\nDHCP=ipv4\n"),
        (SSH_KEYS_COMMAND, _SSH_KEYS_SCRIPT),
        ("/etc/ssh/sshd_config.d/hugelab.conf",
         f"HostKey {GUEST_HOST_KEY}\n"
         f"AuthorizedKeysCommand {SSH_KEYS_COMMAND} %u\nAuthorizedKeysCommandUser nobody\n"
         "PasswordAuthentication no\nUseDNS no\n"),
    )
    # argv run inside the root with chroot, in order, after the files are written
    commands: tuple[tuple[str, ...], ...] = (
        ("systemctl", "enable", "serial-getty@ttyS0.service"),
        ("systemctl", "enable", "systemd-networkd.service", "ssh.service"),
        ("chmod", "0755", SSH_KEYS_COMMAND),
        ("systemctl", "disable", *_QUIET_TIMERS),
        ("systemctl", "disable", *_SERVER_UNITS),
        ("systemctl", "mask", *_SLOW_BOOT_UNITS),
        ("passwd", "--lock", "root"),  # no password is ever stored; use the guest agent
        ("update-initramfs", "-u", "-k", "all"),
        ("apt-get", "clean"),
    )
    # globs relative to the root, removed last (keeps the image small)
    remove: tuple[str, ...] = (
        "var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
        "var/cache/debconf/*-old", "var/lib/systemd/random-seed", "var/log/*.log",
        "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*", "debootstrap",
    )
    initramfs_modules: tuple[str, ...] = _INITRAMFS_MODULES
    free_mib: int = 384  # free space in the guest's root filesystem

    def canonical(self) -> str:
        """The hashed form: every field but the mirror, and IMAGE_VERSION."""
        data: dict[str, Any] = dataclasses.asdict(self)
        del data["mirror"]
        data["image_version"] = IMAGE_VERSION
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class GuestImage:
    """A complete cached image. `size_bytes` is the disk's virtual size (what the guest sees)."""

    disk: Path
    kernel: Path
    initrd: Path
    recipe: str  # the recipe hash, also the name of its directory
    root_device: str = ROOT_DEVICE
    size_bytes: int = 0
    disk_file_bytes: int = 0  # the qcow2 file on the host
    kernel_version: str = ""
    host_key: str = ""  # the guest sshd's public host key, "ssh-ed25519 BASE64 COMMENT"

    @property
    def directory(self) -> Path:
        return self.disk.parent


# --- the recipe -------------------------------------------------------------------------------

def mirror_from_sources(text: str, suite: str) -> str | None:
    """The first Debian archive URI for `suite` in an apt sources file (deb822 `.sources` or
    one-line `sources.list`); security archives are skipped."""
    if re.search(r"^\s*URIs\s*:", text, re.MULTILINE | re.IGNORECASE):
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                m = re.match(r"^([A-Za-z-]+)\s*:\s*(.*)$", line)
                if m and not line.startswith("#"):
                    fields[m.group(1).lower()] = m.group(2).strip()
            if (fields.get("enabled", "yes").lower() != "no"
                    and "deb" in fields.get("types", "").split()
                    and suite in fields.get("suites", "").split()):
                uris = [u for u in fields.get("uris", "").split() if "security" not in u]
                if uris:
                    return uris[0].rstrip("/")
        return None
    for line in text.splitlines():
        m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
        if m and m.group(2) == suite and "security" not in m.group(1):
            return m.group(1).rstrip("/")
    return None


def host_mirror(suite: str = "bookworm") -> str:
    """The mirror this host's apt uses for `suite`, or DEFAULT_MIRROR."""
    for path in SOURCES_FILES:
        try:
            found = mirror_from_sources(path.read_text(), suite)
        except OSError:
            continue
        if found and found.startswith(("http://", "https://")):
            return found
    return DEFAULT_MIRROR


RECIPE = Recipe(mirror=host_mirror("bookworm"))


def recipe_hash(recipe: Recipe = RECIPE) -> str:
    """sha256 of the canonical recipe (with IMAGE_VERSION), first 16 hex digits."""
    return hashlib.sha256(recipe.canonical().encode()).hexdigest()[:16]


# --- the cache --------------------------------------------------------------------------------

def image_dir(recipe: Recipe = RECIPE) -> Path:
    """Where the image of `recipe` lives once built (it may not exist): under the cache
    directory (hugelab.owned)."""
    return cache_path("images") / recipe_hash(recipe)


def load_image(directory: Path, expected_hash: str | None = None) -> GuestImage | None:
    """The image in `directory` if it is complete (manifest present, hash and files match)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        disk = directory / DISK
        disk_bytes = disk.stat().st_size
        kernel, initrd = directory / KERNEL, directory / INITRD
        host_key = (directory / HOST_KEY).read_text().strip()
        ok = (manifest.get("recipe_hash") == (expected_hash or directory.name)
              and host_key_problem(host_key) is None
              and disk_bytes == int(manifest["disk_file_bytes"])
              and kernel.stat().st_size > 0 and initrd.stat().st_size > 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not ok:
        return None
    return GuestImage(disk=disk, kernel=kernel, initrd=initrd, recipe=manifest["recipe_hash"],
                      root_device=str(manifest.get("root_device", ROOT_DEVICE)),
                      size_bytes=int(manifest["virtual_size"]), disk_file_bytes=disk_bytes,
                      kernel_version=str(manifest.get("kernel_version", "")),
                      host_key=host_key)


def host_key_problem(line: str) -> str | None:
    """Why `line` is not an ed25519 public key line (`ssh-ed25519 BASE64 [comment]`), or None."""
    parts = line.split()
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        return f"not an ssh-ed25519 public key: {line[:40]!r}"
    if not re.fullmatch(r"AAAAC3NzaC1lZDI1NTE5[A-Za-z0-9+/]{48}", parts[1]):
        return "the key's base64 is not an ed25519 key"
    return None


def build_image(*, force: bool = False, progress: Callable[[str], None] | None = None,
                recipe: Recipe = RECIPE) -> GuestImage:
    """The cached image of `recipe`, built first if missing (or if `force`)."""
    say = progress or (lambda _msg: None)
    digest = recipe_hash(recipe)
    final = image_dir(recipe)
    if not force:
        hit = load_image(final, digest)
        if hit is not None:
            return hit
    _preflight()
    images = ensure_private_dir(cache_dir() / "images")
    with _build_lock(images, say):
        if not force:
            hit = load_image(final, digest)  # another process may have just built it
            if hit is not None:
                return hit
        remove_stale(images)
        _check_mirror(recipe.mirror, recipe.suite)
        tmp = images / f"{TMP_PREFIX}{digest}-{os.getpid()}"
        t0 = time.monotonic()
        try:
            ensure_private_dir(tmp)
            _build_into(tmp, recipe, digest, say)
            _publish(tmp, final)
        except BaseException:
            with contextlib.suppress(Exception):
                remove_tree(tmp)
            raise
        image = load_image(final, digest)
        if image is None:
            raise ImageError(f"the image built in {final} is incomplete")
        say(f"image {digest} ready in {time.monotonic() - t0:.0f}s: {final}")
        return image


def _preflight() -> None:
    if os.geteuid() != 0:
        raise NotRootError("building the guest disk image needs root (debootstrap, chroot)",
                           hint="run it once as root; later runs reuse the cached image")
    for tool, package in (("debootstrap", "debootstrap"), ("mkfs.ext4", "e2fsprogs"),
                          ("qemu-img", "qemu-utils"), ("chroot", "coreutils"),
                          ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None and shutil.which(tool, path=CHROOT_PATH) is None:
            raise DebootstrapMissingError(tool, package)


def _check_mirror(mirror: str, suite: str, timeout: float = 20.0) -> None:
    url = f"{mirror.rstrip('/')}/dists/{suite}/InRelease"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - http(s) only
            resp.read(1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MirrorUnreachableError(
            f"cannot reach the Debian mirror {mirror} ({url}: {exc})",
            hint="the image is built from Debian packages: check the network or proxy "
                 "(http_proxy), or name a reachable mirror in "
                 "/etc/apt/sources.list.d/debian.sources") from exc


@contextlib.contextmanager
def _build_lock(images: Path, say: Callable[[str], None]) -> Iterator[None]:
    fd = os.open(images / ".build.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for another process's image build")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _publish(tmp: Path, final: Path) -> None:
    """Atomically make `tmp` the image directory `final` (replacing an old one)."""
    _fsync_dir(tmp)
    if final.exists():
        old = final.with_name(f"{TMP_PREFIX}old-{final.name}-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        remove_tree(old)
    else:
        os.rename(tmp, final)
    _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- stale temporary directories ----------------------------------------------------------------

def _unescape_mount(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below `path` (from /proc/self/mountinfo), deepest first."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    base = os.path.realpath(path)
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            mp = _unescape_mount(fields[4])
            if mp == base or mp.startswith(base.rstrip("/") + "/"):
                found.append(Path(mp))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def remove_tree(path: Path) -> None:
    """Remove a build directory, unmounting first what a killed debootstrap left mounted in it
    (/proc, /sys, /dev/pts): never delete through a mount point."""
    if not path.exists():
        return
    for mp in mounts_under(path):
        cp = proc.run(["umount", mp], check=False, timeout=60)
        if cp.returncode != 0:
            proc.run(["umount", "--lazy", mp], check=False, timeout=60)
    left = mounts_under(path)
    if left:
        raise ImageError(f"cannot remove {path}: still mounted: {', '.join(map(str, left))}",
                         hint="unmount them by hand (umount -l), then build again")
    shutil.rmtree(path)


def remove_stale(images: Path) -> list[Path]:
    """Remove the temporary directories of earlier, killed builds; call with the build lock."""
    removed = []
    for entry in sorted(images.glob(f"{TMP_PREFIX}*")):
        if entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
            removed.append(entry)
    return removed


# --- the build ---------------------------------------------------------------------------------

def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}
    env.update({"PATH": CHROOT_PATH, "LC_ALL": "C", "LANG": "C", "HOME": "/root",
                "DEBIAN_FRONTEND": "noninteractive", "DEBCONF_NONINTERACTIVE_SEEN": "true"})
    env.update(extra or {})
    return env


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=CHROOT_PATH)
    if found is None:
        raise DebootstrapMissingError(name, name)
    return found


def _dies_with_us(argv: Sequence[str | Path]) -> list[str | Path]:
    """argv under `setpriv --pdeathsig KILL`: a killed build does not leave debootstrap or a
    chroot command running (and writing into a directory the next build removes)."""
    setpriv = shutil.which("setpriv") or shutil.which("setpriv", path=CHROOT_PATH)
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def _in_root(root: Path, argv: Sequence[str], *, timeout: float = STEP_TIMEOUT) -> str:
    return proc.run(_dies_with_us([_tool("chroot"), root, *argv]), env=_env(),
                    timeout=timeout).stdout


def _debootstrap(root: Path, recipe: Recipe) -> None:
    argv: list[str | Path] = [_tool("debootstrap"), f"--variant={recipe.variant}",
            f"--include={','.join(recipe.packages)}", "--components=main",
            recipe.suite, root, recipe.mirror]
    cp = proc.run(_dies_with_us(argv), env=_env(), timeout=DEBOOTSTRAP_TIMEOUT, check=False)
    if cp.returncode == 0:
        return
    output = f"{cp.stdout}\n{cp.stderr}"
    log_lines: list[str] = []
    with contextlib.suppress(OSError):
        log_lines = (root / "debootstrap" / "debootstrap.log").read_text(
            errors="replace").splitlines()[-4:]
    said = [ln for ln in output.splitlines() if ln.startswith(("E:", "W:"))]
    tail = "\n  ".join(said or [*output.strip().splitlines()[-6:], *log_lines])
    if re.search(r"Failed getting release file|Couldn't download|Failure trying to run: "
                 r".*wget|Temporary failure in name resolution|Connection refused",
                 f"{output}\n{tail}"):
        raise MirrorUnreachableError(
            f"debootstrap could not download from {recipe.mirror}:\n  {tail}",
            hint="check the network or proxy (http_proxy) and the mirror")
    raise ImageError(f"debootstrap {recipe.suite} failed (exit {cp.returncode}):\n  {tail}",
                     hint="the package list may name a package the suite does not have")


def _write_files(root: Path, files: Sequence[tuple[str, str]]) -> None:
    for name, content in files:
        if not name.startswith("/") or ".." in Path(name).parts:
            raise ImageError(f"recipe file {name!r} must be an absolute path inside the guest")
        target = root / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(content)
        os.chmod(target, 0o644)


def _host_key(root: Path, out: Path, digest: str) -> str:
    """This build's own sshd host key: every key the packages made removed, a new ed25519 one
    generated into the root (private 0600), its public half written to `out`/HOST_KEY."""
    ssh_dir = root / "etc" / "ssh"
    for old in ssh_dir.glob("ssh_host_*"):
        old.unlink()
    key = root / GUEST_HOST_KEY.lstrip("/")
    proc.run([_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C",
              f"root@{HOSTNAME} image {digest}", "-f", key], timeout=60)
    os.chmod(key, 0o600)
    os.chmod(f"{key}.pub", 0o644)
    line = Path(f"{key}.pub").read_text().strip()
    if (why := host_key_problem(line)) is not None:
        raise ImageError(f"ssh-keygen made no usable host key: {why}")
    (out / HOST_KEY).write_text(line + "\n")
    return line


def _remove_globs(root: Path, patterns: Sequence[str]) -> None:
    for pattern in patterns:
        for found in glob.glob(str(root / pattern)):
            p = Path(found)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()


def _kernel_version(root: Path) -> str:
    versions = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if not versions:
        raise ImageError("the guest root has no /boot/vmlinuz-*",
                         hint="the recipe must include linux-image-amd64")
    return versions[-1]


def _check_initramfs(root: Path, version: str, modules: Sequence[str]) -> None:
    listing = _in_root(root, ["lsinitramfs", f"/boot/initrd.img-{version}"])
    have = {m.group(1).replace("-", "_")
            for m in re.finditer(r"/([^/\s]+)\.ko(?:\.[a-z]+)?$", listing, re.MULTILINE)}
    missing = [m for m in modules if m.replace("-", "_") not in have]
    if missing:
        raise ImageError(f"the guest initramfs lacks modules: {', '.join(missing)}",
                         hint="check /etc/initramfs-tools/modules in the recipe")


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        total += 4096 * (1 + len(dirnames))
        for name in filenames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                total += -(-st.st_size // 4096) * 4096
    return total


def fs_size_mib(content_bytes: int, free_mib: int) -> int:
    """ext4 size for this much content: +12% metadata, a 64 MiB journal, free space, rounded
    up to 64 MiB."""
    need = -(-content_bytes * 112 // (100 * MiB)) + 64 + free_mib
    return -(-need // 64) * 64


def _virtual_size(disk: Path) -> int:
    info = json.loads(proc.run([_tool("qemu-img"), "info", "--output=json", disk],
                               timeout=60).stdout)
    return int(info["virtual-size"])


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _build_into(out: Path, recipe: Recipe, digest: str, say: Callable[[str], None]) -> None:
    """The whole build, into the temporary directory `out` (its rootfs removed at the end)."""
    t0 = time.monotonic()
    root = out / "root"
    say(f"debootstrap {recipe.suite} ({recipe.variant}, {len(recipe.packages)} packages) "
        f"from {recipe.mirror}")
    _debootstrap(root, recipe)
    say(f"configuring the guest root ({time.monotonic() - t0:.0f}s)")
    _write_files(root, recipe.files)
    for argv in recipe.commands:
        _in_root(root, argv)
    host_key = _host_key(root, out, digest)
    version = _kernel_version(root)
    _check_initramfs(root, version, recipe.initramfs_modules)
    (out / PACKAGES).write_text(_in_root(root, ["dpkg-query", "-W", "-f",
                                                "${Package} ${Version}\\n"]))
    _remove_globs(root, recipe.remove)
    shutil.copyfile(root / "boot" / f"vmlinuz-{version}", out / KERNEL)
    shutil.copyfile(root / "boot" / f"initrd.img-{version}", out / INITRD)
    size_mib = fs_size_mib(_tree_bytes(root), recipe.free_mib)
    say(f"mkfs.ext4 -d ({size_mib} MiB) ({time.monotonic() - t0:.0f}s)")
    raw = out / "disk.raw"
    proc.run([_tool("mkfs.ext4"), "-q", "-F", "-L", FS_LABEL, "-d", root, raw, f"{size_mib}M"],
             env=_env(), timeout=STEP_TIMEOUT)
    say(f"qemu-img convert -O qcow2 ({time.monotonic() - t0:.0f}s)")
    proc.run([_tool("qemu-img"), "convert", "-O", "qcow2", raw, out / DISK],
             timeout=STEP_TIMEOUT)
    raw.unlink()
    remove_tree(root)
    for name in (DISK, KERNEL, INITRD, PACKAGES, HOST_KEY):
        _fsync_file(out / name)
    manifest = {
        "recipe_hash": digest,
        "image_version": IMAGE_VERSION,
        "recipe": json.loads(recipe.canonical()),
        "mirror": recipe.mirror,
        "kernel_version": version,
        "host_key": host_key,
        "root_device": ROOT_DEVICE,
        "fs_label": FS_LABEL,
        "kernel_cmdline": " ".join(KERNEL_CMDLINE),
        "virtual_size": _virtual_size(out / DISK),
        "disk_file_bytes": (out / DISK).stat().st_size,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": round(time.monotonic() - t0, 1),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    _fsync_file(out / MANIFEST)


# --- booting it ----------------------------------------------------------------------------------

def make_overlay(image: GuestImage, path: Path) -> Path:
    """A qcow2 overlay at `path` backed by the image's disk: the guest writes only to it."""
    if Path(os.path.realpath(path)) == Path(os.path.realpath(image.disk)):
        raise ImageError(f"the overlay {path} would overwrite the cached base image")
    proc.run([_tool("qemu-img"), "create", "-q", "-f", "qcow2", "-F", "qcow2",
              "-b", image.disk, path], timeout=60)
    return path


def boot_argv(image: GuestImage, *, mem_mib: int, agent_socket: Path, serial_log: Path,
              accel: str, overlay: Path, vcpus: int = 1, qemu: str = "qemu-system-x86_64",
              extra_cmdline: Sequence[str] = ()) -> list[str]:
    """QEMU argv booting the image's kernel directly with `overlay` (see make_overlay) as the
    virtio-blk root disk: serial console to `serial_log`, qemu-guest-agent on `agent_socket`,
    no network, no default devices."""
    if accel not in ("kvm", "tcg"):
        raise ImageError(f"accel {accel!r} must be kvm or tcg",
                         hint="resolve 'auto' first (hugelab.vm.own.guest.probe_accel)")
    if mem_mib < 256 or vcpus < 1:
        raise ImageError(f"a {mem_mib} MiB / {vcpus} vCPU guest cannot boot this image",
                         hint="give it at least 256 MiB (512 MiB under TCG) and one vCPU")
    if Path(os.path.realpath(overlay)) == Path(os.path.realpath(image.disk)):
        raise ImageError("boot_argv needs an overlay, not the cached base image",
                         hint="create one with make_overlay(image, path)")
    def q(path: Path) -> str:  # QEMU reads ',' in an option value as ',,'
        return str(path).replace(",", ",,")

    cmdline = [*KERNEL_CMDLINE, *extra_cmdline]
    if image.root_device != ROOT_DEVICE:
        cmdline[0] = f"root={image.root_device}"
    return [
        qemu,
        "-name", "hugelab-image,debug-threads=on",
        "-machine", "pc",
        "-accel", accel,
        "-cpu", "host" if accel == "kvm" else "max",
        "-smp", str(vcpus),
        "-m", f"{mem_mib}M",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-chardev", f"file,id=con0,path={q(serial_log)}",
        "-serial", "chardev:con0",
        "-drive", f"file={q(overlay)},format=qcow2,if=none,id=disk0",
        "-device", "virtio-blk-pci,drive=disk0",
        "-device", "virtio-serial",
        "-chardev", f"socket,path={q(agent_socket)},server=on,wait=off,id=qga0",
        "-device", f"virtserialport,chardev=qga0,name={QGA_PORT}",
        "-kernel", str(image.kernel),
        "-initrd", str(image.initrd),
        "-append", " ".join(cmdline),
    ]
