"""Building hugelab's Debian guest image (see image.py) from its recipe (imagerecipe.py).

How it is built (root only): `debootstrap --variant=minbase --include=PACKAGES` into a temporary
directory beside the final one, the recipe's files written and commands run inside it with
`chroot` (argv lists through hugelab.proc.run, never a shell), `mkfs.ext4 -d ROOT` (no loop
mount), `qemu-img convert -O qcow2`, then one atomic rename of the temporary directory to the
final one. A killed build leaves only a `.tmp-*` directory, which the next build removes (after
unmounting whatever a killed debootstrap left mounted inside it), never a half image that looks
complete. Builds take a lock, so two processes never build at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from hugelab import proc
from hugelab.errors import NotRootError, VMError
from hugelab.owned import cache_dir, ensure_private_dir
from hugelab.vm.common.busyboxinitrd import find_busybox
from hugelab.vm.domains.image import (
    CHROOT_PATH,
    DISK,
    HOST_KEY,
    INITRD,
    KERNEL,
    MANIFEST,
    PACKAGES,
    TMP_PREFIX,
    DebootstrapMissingError,
    GuestImage,
    ImageError,
    MirrorUnreachableError,
    find_tool,
    host_key_problem,
    image_dir,
    load_image,
)
from hugelab.vm.domains.imagedirs import fsync_dir, fsync_file, remove_stale, remove_tree
from hugelab.vm.domains.imageinitrd import build_image_initrd
from hugelab.vm.domains.imagerecipe import (
    FS_LABEL,
    GUEST_HOST_KEY,
    HOSTNAME,
    IMAGE_VERSION,
    KERNEL_CMDLINE,
    RECIPE,
    ROOT_DEVICE,
    Recipe,
    recipe_hash,
)

DEBOOTSTRAP_TIMEOUT = 1800.0
STEP_TIMEOUT = 900.0
MiB = 1 << 20

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
    try:
        find_busybox()  # the image's initrd (imageinitrd.py)
    except VMError as exc:
        raise DebootstrapMissingError("busybox", "busybox-static") from exc


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
    fsync_dir(tmp)
    if final.exists():
        old = final.with_name(f"{TMP_PREFIX}old-{final.name}-{os.getpid()}")
        os.rename(final, old)
        os.rename(tmp, final)
        remove_tree(old)
    else:
        os.rename(tmp, final)
    fsync_dir(final.parent)

# --- the build ---------------------------------------------------------------------------------

def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}
    env.update({"PATH": CHROOT_PATH, "LC_ALL": "C", "LANG": "C", "HOME": "/root",
                "DEBIAN_FRONTEND": "noninteractive", "DEBCONF_NONINTERACTIVE_SEEN": "true"})
    env.update(extra or {})
    return env

def _dies_with_us(argv: Sequence[str | Path]) -> list[str | Path]:
    """argv under `setpriv --pdeathsig KILL`: a killed build does not leave debootstrap or a
    chroot command running (and writing into a directory the next build removes)."""
    setpriv = shutil.which("setpriv") or shutil.which("setpriv", path=CHROOT_PATH)
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


def _in_root(root: Path, argv: Sequence[str], *, timeout: float = STEP_TIMEOUT) -> str:
    return proc.run(_dies_with_us([find_tool("chroot"), root, *argv]), env=_env(),
                    timeout=timeout).stdout


def _debootstrap(root: Path, recipe: Recipe) -> None:
    argv: list[str | Path] = [find_tool("debootstrap"), f"--variant={recipe.variant}",
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
    proc.run([find_tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C",
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
    info = json.loads(proc.run([find_tool("qemu-img"), "info", "--output=json", disk],
                               timeout=60).stdout)
    return int(info["virtual-size"])

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
    (out / INITRD).write_bytes(build_image_initrd(root / "lib/modules" / version,
                                                  recipe.initrd_modules))
    size_mib = fs_size_mib(_tree_bytes(root), recipe.free_mib)
    say(f"mkfs.ext4 -d ({size_mib} MiB) ({time.monotonic() - t0:.0f}s)")
    raw = out / "disk.raw"
    proc.run([find_tool("mkfs.ext4"), "-q", "-F", "-L", FS_LABEL, "-d", root, raw, f"{size_mib}M"],
             env=_env(), timeout=STEP_TIMEOUT)
    say(f"qemu-img convert -O qcow2 ({time.monotonic() - t0:.0f}s)")
    proc.run([find_tool("qemu-img"), "convert", "-O", "qcow2", raw, out / DISK],
             timeout=STEP_TIMEOUT)
    raw.unlink()
    remove_tree(root)
    for name in (DISK, KERNEL, INITRD, PACKAGES, HOST_KEY):
        fsync_file(out / name)
    manifest = {
        "recipe_hash": digest,
        "image_version": IMAGE_VERSION,
        "recipe": json.loads(recipe.canonical()),
        "mirror": recipe.mirror,
        "kernel_version": version,
        "initrd": "hugelab-initrd (busybox, imageinitrd.py)",
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
    fsync_file(out / MANIFEST)
