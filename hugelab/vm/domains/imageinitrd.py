"""The Debian image's initrd: a static busybox, the root disk's modules and a short /init.

Debian's own initramfs (initramfs-tools, still built into the image) runs udev before it mounts
the root: 3.5 s of a TCG boot. This one loads only the modules the root disk needs (the recipe's
`initrd_modules`: virtio-pci, virtio-blk, ext4, with their dependencies from the guest kernel's
modules.dep; built-in ones skipped), waits for `root=` (at most ROOT_WAIT_S, then says why on the console and powers off),
mounts it as the command line says (`rw`/`ro`, `rootfstype=`, `rootflags=`) and `switch_root`s
to `init=` (default /sbin/init): systemd then mounts /run and the rest itself. It leaves one line
in the kernel log, `hugelab-initrd: ...`, which tells a boot through it from one through Debian's.
"""

from __future__ import annotations

from pathlib import Path

from hugelab.vm.common.busyboxinitrd import busybox_initrd, init_prelude

ROOT_WAIT_S = 30
NAME = "hugelab-initrd"
_POLL_US = 50_000

_INIT = r"""root= fstype=ext4 mode=ro flags= init=/sbin/init
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    root=*) root="${{arg#root=}}";;
    rootfstype=*) fstype="${{arg#rootfstype=}}";;
    rootflags=*) flags=",${{arg#rootflags=}}";;
    init=*) init="${{arg#init=}}";;
    rw|ro) mode="$arg";;
  esac
done
[ -n "$root" ] || fail "no root= on the kernel command line"
n=0
while :; do
  case "$root" in
    /dev/*) dev="$root"; [ -b "$dev" ] || dev=;;
    *) dev="$(findfs "$root" 2>/dev/null)";;
  esac
  [ -n "$dev" ] && break
  [ $n -ge {polls} ] && fail "root device $root did not appear within {wait_s} s \
(modules: $(tr '\n' ' ' < /modules.order))"
  usleep {poll_us}
  n=$((n + 1))
done
mount -t "$fstype" -o "$mode$flags" "$dev" /newroot \
  || fail "cannot mount the root $dev ($fstype, $mode$flags)"
[ -e "/newroot$init" ] || [ -L "/newroot$init" ] || fail "the root $dev has no $init"
echo "<6>{name}: root $dev mounted $mode, starting $init" > /dev/kmsg
mount -o move /dev /newroot/dev || fail "cannot move /dev"
mount -o move /proc /newroot/proc || fail "cannot move /proc"
mount -o move /sys /newroot/sys || fail "cannot move /sys"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
exec switch_root /newroot "$init" "$@"
"""


def init_script() -> str:
    """The initrd's /init."""
    return init_prelude(NAME) + _INIT.format(
        polls=ROOT_WAIT_S * 1_000_000 // _POLL_US, wait_s=ROOT_WAIT_S, poll_us=_POLL_US, name=NAME)


def build_image_initrd(modules_dir: Path, modules: tuple[str, ...], *,
                       busybox: Path | None = None) -> bytes:
    """The initrd archive loading `modules` (the recipe's `initrd_modules`) of the kernel whose
    modules are in `modules_dir` (the guest root's /lib/modules/VERSION); busybox is the host's
    static one (`find_busybox`) unless named."""
    w = busybox_initrd(modules_dir, modules, busybox=busybox, dirs=("newroot",))
    w.file("init", init_script().encode(), 0o755)
    return w.finish()
