"""The libvirt XML both kinds of guest share (pure): the arm's `<memoryBacking>`, written the
same for hugelab's own guests under libvirtd and for users' transient copies, and the `qemu:`
namespace that passes options to QEMU verbatim.

- `anon`  -> no `<hugepages>`: libvirt's memory-backend-ram, THP follows the host THP mode.
- `file`  -> `<hugepages><page size=.../></hugepages>` + `<source type='file'/>`: a hugetlbfs
  file. libvirt picks the hugetlbfs mount itself (`hugetlbfs_mount` in /etc/libvirt/qemu.conf, or
  the mounts it found when libvirtd started); the spec's `hugetlbfs_path` cannot be named in a
  domain and is not used.
- `memfd` -> `<source type='memfd'/>`, plus `<hugepages>` when a hugetlb size is set.
- `share` -> `<access mode='shared'/>`; `prealloc` -> `<allocation mode='immediate'/>`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hugelab.vm.common.spec import VmSpec

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"


def memory_backing(spec: VmSpec) -> ET.Element | None:
    """`<memoryBacking>` for the spec's guest RAM; None for plain anon RAM."""
    mb = ET.Element("memoryBacking")
    hugetlb = spec.backing == "file" or (spec.backing == "memfd"
                                         and spec.hugetlb_size_kb is not None)
    if hugetlb:
        pages = ET.SubElement(mb, "hugepages")
        if spec.hugetlb_size_kb is not None:  # file without a size: libvirt's default size
            ET.SubElement(pages, "page", size=str(spec.hugetlb_size_kb), unit="KiB")
    if spec.backing in ("file", "memfd"):
        ET.SubElement(mb, "source", type=spec.backing)
    if spec.share:
        ET.SubElement(mb, "access", mode="shared")
    if spec.prealloc:
        ET.SubElement(mb, "allocation", mode="immediate")
    return mb if len(mb) else None
