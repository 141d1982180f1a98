"""A small real Debian guest disk image, built from Debian's packages and cached by recipe hash.

hugelab's own guests need no disk (see initramfs.py); this image is for what users run: a real
distribution with systemd, udev and qemu-guest-agent, as in "your own VMs" (issue 11). It is
built once per recipe and kept in the cache directory (`HUGELAB_CACHE_DIR`, default
`/var/cache/hugelab`; not the state directory, so it outlives test runs):

    cache_dir()/images/<recipe_hash>/
        disk.qcow2      the root filesystem: ext4 on the whole disk (no partition table),
                        label hugelab-root; the guest sees it as /dev/vda (virtio-blk)
        vmlinuz         the guest's own Debian kernel, booted directly (-kernel; no bootloader)
        initrd.img      hugelab's busybox initrd (imageinitrd.py): the root disk's modules,
                        mount root=, switch_root to systemd (Debian's initramfs stays unused)
        packages.txt    every installed package and version (`dpkg-query -W`)
        host_key.pub    the public half of the guest sshd's host key (see below)
        recipe.json     written last: the recipe, sizes, kernel version, build time

It is built by imagebuild.py (its recipe: imagerecipe.py), its build directories are kept and
removed by imagedirs.py, and it is booted by imageboot.py. This module is the image as the cache
holds it: its files, whether a directory holds a complete one, and the errors of them all.

Guests boot a copy-on-write overlay (imageboot.make_overlay), so the cached base is never written.

Each build generates its own ed25519 sshd host key (`ssh-keygen` at build time, after every
key the openssh-server package made is removed; sshd is told to use that key only), so no two
builds share a host key and none is baked into hugelab. Its public half is kept beside the disk
(`host_key.pub`, and in recipe.json): the SSH way into a domain of the image pins it
(hugelab.vm.domains.demo_domain puts it in the domain's metadata, hugelab.vm.domains.ssh writes
it to the connection's known_hosts) instead of trusting the first key it is shown.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from hugelab.errors import ToolMissingError, VMError
from hugelab.owned import cache_path
from hugelab.vm.domains.imagerecipe import RECIPE, ROOT_DEVICE, Recipe, recipe_hash

MANIFEST = "recipe.json"
DISK, KERNEL, INITRD, PACKAGES = "disk.qcow2", "vmlinuz", "initrd.img", "packages.txt"
HOST_KEY = "host_key.pub"  # the guest sshd's host key, public half

TMP_PREFIX = ".tmp-"
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

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

def find_tool(name: str) -> str:
    """The path of a tool the image's build or boot runs (also looked for in the sbin
    directories, which a user's PATH may lack)."""
    found = shutil.which(name) or shutil.which(name, path=CHROOT_PATH)
    if found is None:
        raise DebootstrapMissingError(name, name)
    return found
