"""Helpers that several VM test modules share (issue 37 item 5), here rather than in one test
module that the others import.

- libvirt: `virsh` (the system connection, its failure an AssertionError), `libvirt_missing`
  (why no libvirtd answers, after starting one where the packages are there; None when it does).
- the user's domain of the tests: `DOMAIN` (the demo image's domain they define), `PREFIX`
  (hugelab's transient copies of it) and `transient` (those copies libvirt still knows).
- the demo image: `fake_image` (what a finished build leaves in its directory, tiny stand-ins),
  `FAKE_HOST_KEY` (its guest's host key).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from hugelab.vm.domains import image as img

VIRSH = ["virsh", "-c", "qemu:///system"]
DOMAIN = "hugelab-test-debian"
PREFIX = f"hugelab-{DOMAIN}-"
FAKE_HOST_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2UgaG9zdCBrZXkgZm9yIHRlc3RzIG9ubHkgMDEy "
                 "root@hugelab-guest")


# --- libvirt ------------------------------------------------------------------------------------

def virsh(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([*VIRSH, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"virsh {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def start_daemons() -> None:
    """Start virtlogd and libvirtd as the brief says (`virtlogd -d`, then `libvirtd -d`) when
    no libvirtd answers: a fresh CI machine has the packages but no running daemons. They start
    under a parent that reaps libvirt's QEMUs at once, as systemd does (tests/libvirtd_reaper.py)."""
    r = subprocess.run([*VIRSH, "uri"], capture_output=True, text=True, timeout=30)
    if r.returncode == 0 or os.geteuid() != 0:
        return
    from tests.libvirtd_reaper import start
    start()


def libvirt_missing() -> str | None:
    if not shutil.which("virsh"):
        return "virsh is not installed (apt-get install libvirt-clients libvirt-daemon-system)"
    start_daemons()
    try:
        r = subprocess.run([*VIRSH, "uri"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"virsh cannot reach libvirtd: {exc}"
    if r.returncode != 0:
        return f"libvirtd is not reachable (start virtlogd -d; libvirtd -d): {r.stderr.strip()}"
    return None


# --- the user's domain of the tests -------------------------------------------------------------

def transient() -> list[str]:
    """hugelab's transient copies of DOMAIN that libvirt still lists."""
    return [n for n in virsh("list", "--all", "--name").stdout.split() if n.startswith(PREFIX)]


# --- the demo image -----------------------------------------------------------------------------

def fake_image(directory: Path, digest: str) -> None:
    """What a finished build leaves in its directory (tiny stand-in files)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / img.DISK).write_bytes(b"QFI\xfb" + b"\0" * 60)
    (directory / img.KERNEL).write_bytes(b"kernel")
    (directory / img.INITRD).write_bytes(b"initrd")
    (directory / img.PACKAGES).write_text("sysbench 1.0.20\n")
    (directory / img.HOST_KEY).write_text(FAKE_HOST_KEY + "\n")
    (directory / img.MANIFEST).write_text(json.dumps({
        "recipe_hash": digest, "virtual_size": 1 << 30, "disk_file_bytes": 64,
        "root_device": "/dev/vda", "kernel_version": "6.1.0-test-amd64"}))
