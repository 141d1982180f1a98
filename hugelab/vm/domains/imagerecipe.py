"""What goes into hugelab's Debian guest image (see image.py): its recipe, the recipe's hash,
and the mirror the packages come from.

The recipe hash covers what ends up in the image (suite, packages, files, commands, removals,
initramfs and initrd modules, free space) and IMAGE_VERSION, not the mirror: where packages come
from is transport (the guest's own /etc/apt/sources.list always names deb.debian.org). The image is
*not* bit-reproducible: a rebuild of the same recipe gets the suite's current point release.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGE_VERSION = 3  # bump when the build steps change in a way the recipe does not show
# (3: the image boots hugelab's busybox initrd, imageinitrd.py, not Debian's initramfs)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES_FILES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
ROOT_DEVICE = "/dev/vda"
FS_LABEL = "hugelab-root"
HOSTNAME = "hugelab-guest"

KERNEL_CMDLINE = (f"root={ROOT_DEVICE}", "rw", "console=ttyS0", "panic=-1")

GUEST_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key"  # its private half, in the guest only

# The guest's apt sources: fixed, whatever mirror the build used.
_GUEST_SOURCES = "deb http://deb.debian.org/debian bookworm main\n"
_INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod", "virtio_console", "ext4")
# What the image's own initrd loads (imageinitrd.py; Debian's initramfs above stays in the image,
# unused): the root disk's, and crc32c_generic, ext4's and jbd2's soft dependency
# (`softdep ext4 pre: crypto-crc32c`), which insmod does not follow.
_INITRD_MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4")
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
# Units that cost the guest seconds at every boot under TCG and give a benchmark guest nothing
# (systemd-analyze blame and critical-chain in a copy: e2scrub_reap 5.3 s, getty-static 3.2 s;
# then, of a 26.8 s userspace: update-utmp 3.3 s on the agent's critical chain, the modprobe@
# units, kmod-static-nodes and the debug/tracing/mqueue mounts ~5 s each in parallel, the
# journal's flush to disk, random-seed, sysusers (the packages made their users at build);
# docs/benchmarks.md, "Your own VMs"). mariadb.socket would listen where hugelab's own mysqld
# does: hugelab starts the servers, as for _SERVER_UNITS.
_SLOW_BOOT_UNITS = (
    "e2scrub_reap.service", "getty-static.service", "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service", "modprobe@configfs.service",
    "modprobe@dm_mod.service", "modprobe@efi_pstore.service", "modprobe@fuse.service",
    "modprobe@loop.service", "kmod-static-nodes.service", "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount", "dev-mqueue.mount", "sys-fs-fuse-connections.mount",
    "sys-kernel-config.mount", "systemd-journal-flush.service", "systemd-random-seed.service",
    "systemd-network-generator.service", "systemd-sysusers.service",
    "systemd-modules-load.service", "mariadb.socket",
)
# systemd generators that run before any unit starts (2.7 s of them under TCG) and make units
# a benchmark guest does not use: init.d scripts, PostgreSQL's cluster units (hugelab makes its
# own cluster), encrypted/verity disks, GPT auto-mounts, resume, rc.local. Masked with a
# /dev/null link of the same name in /etc/systemd/system-generators (systemd.generator(7)).
# The fstab and getty generators stay (the root's remount; the serial console's login).
_SKIPPED_GENERATORS = (
    "postgresql-generator", "systemd-cryptsetup-generator", "systemd-debug-generator",
    "systemd-gpt-auto-generator", "systemd-hibernate-resume-generator",
    "systemd-integritysetup-generator", "systemd-rc-local-generator", "systemd-run-generator",
    "systemd-system-update-generator", "systemd-sysv-generator",
    "systemd-veritysetup-generator",
)
_GENERATORS_DIR = "/etc/systemd/system-generators"
# Timers that would wake up in the middle of a benchmark.
_QUIET_TIMERS = ("apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
                 "e2scrub_all.timer", "fstrim.timer")

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
        ("mkdir", "-p", _GENERATORS_DIR),
        *(("ln", "-sf", "/dev/null", f"{_GENERATORS_DIR}/{g}") for g in _SKIPPED_GENERATORS),
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
    initrd_modules: tuple[str, ...] = _INITRD_MODULES
    free_mib: int = 384  # free space in the guest's root filesystem

    def canonical(self) -> str:
        """The hashed form: every field but the mirror, and IMAGE_VERSION."""
        data: dict[str, Any] = dataclasses.asdict(self)
        del data["mirror"]
        data["image_version"] = IMAGE_VERSION
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

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
