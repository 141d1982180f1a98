"""A prepared layer over a user's domain: what a server kind builds in the guest once (a
PostgreSQL cluster filled by pgbench or the user's dump) kept in qcow2 overlays over the
domain's writable disks, so that each trial's copy boots over the layer instead of building it
again (issue 39: the sizes users run; at scale 100 pgbench -i takes minutes a trial).

- The kind declares what to build (`hugelab.workloads.guestside.LayerBuild`: a key and a build
  through the way in); `ensure` returns the layer, built first when not cached: one transient
  copy of the domain boots over fresh overlays kept in the layer's directory, the build runs
  in the guest, the guest syncs and powers off (a clean file system: no journal replay in every
  trial's boot), and the directory becomes the layer only once whole (owned.TemplateCache: two
  runs that need one build it once; a killed build's half is removed by the next, or `sweep`).
- The key covers the domain, its URI, each writable disk's path, size and mtime, and the
  kind's build key: a domain whose disks change (the user booted and wrote to it) gets a new
  layer, and its stale layers are removed when the new one is made, unless a live run still
  boots over them (each run holds the layers it uses: owned.TemplateCache.ensure(hold=True)).
- The user's disks are only read, as in every trial: the layer's overlays write beside them,
  under LAYER_ROOT (where libvirt's QEMU user can reach them). A domain with a disk that is
  not a regular file (a block device, a network disk) gets no layer: nothing would show that
  it changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from hugelab import owned
from hugelab.vm.common.libvirtd import connect
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.domains import domain as dx
from hugelab.vm.domains.domainresolve import lookup, user_xml
from hugelab.vm.domains.libvirt_guest import Access, DomainGuest
from hugelab.workloads.guestside import LayerBuild

LAYER_ROOT = Path("/var/lib/libvirt/images/hugelab-layers")
LAYER_VERSION = 1  # bump when what a layer holds changes in a way its key does not show
MANIFEST = "layer.json"
POWEROFF_S = 120.0  # the builder's clean power-off, under TCG


def _sources(domain: str, uri: str) -> list[tuple[str, int, int]] | None:
    """Each writable disk of the domain: (path, size, mtime in ns); None when one is not a
    regular file (a block device or a network disk, whose writes no mtime shows: no layer
    could tell that it changed)."""
    conn = connect(uri)
    try:
        disks = dx.disks(dx.parse(user_xml(lookup(conn, domain))))
    finally:
        conn.close()
    return disk_stats([d.source for d in disks if not d.readonly])


def disk_stats(paths: list[str]) -> list[tuple[str, int, int]] | None:
    """(path, size, mtime in ns) of each disk; None when one is not a regular file."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        out.append((path, st.st_size, st.st_mtime_ns))
    return out


def layer_key(domain: str, uri: str, sources: list[tuple[str, int, int]], build_key: str) -> str:
    """The layer's cache key (pure): the domain, its disks as they are now, the kind's build."""
    text = json.dumps({"domain": domain, "uri": uri, "disks": sorted(sources),
                       "content": build_key, "version": LAYER_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache() -> owned.TemplateCache:
    if not LAYER_ROOT.is_dir():
        LAYER_ROOT.mkdir(parents=True, mode=0o711)
    os.chmod(LAYER_ROOT, 0o711)  # libvirt's QEMU user walks through to a layer's overlays
    return owned.TemplateCache(LAYER_ROOT)


@dataclasses.dataclass(frozen=True)
class Layer:
    """A built layer: its directory and, for each of the domain's writable disks, the overlay
    a trial's copy stacks its own over."""

    path: Path
    overlays: Mapping[str, str]
    what: str


def ensure(domain: str, uri: str, spec: VmSpec, build: LayerBuild, access: Access
           ) -> Layer | None:
    """The layer of `build` over `domain`, built first when not cached (see the module
    docstring); None for a domain with a disk that is not a regular file (every trial then
    builds its own data, as without a layer). A build that fails raises its own error (a
    guest without the kind's server: the kind's ToolMissingError, a workload's cause)."""
    sources = _sources(domain, uri)
    if sources is None:
        return None
    key = layer_key(domain, uri, sources, build.key)
    store = cache()
    path = store.ensure(key, lambda tmp: _build(tmp, domain, uri, spec, build, access,
                                                sources),
                        ready=lambda p: (p / MANIFEST).is_file(), hold=True)
    manifest = json.loads((path / MANIFEST).read_text())
    _drop_stale(store, domain, uri, keep=key)
    return Layer(path, {src: str(path / name) for src, name in manifest["disks"].items()},
                 str(manifest["what"]))


def _build(tmp: Path, domain: str, uri: str, spec: VmSpec, build: LayerBuild, access: Access,
           sources: list[tuple[str, int, int]]) -> None:
    tmp.mkdir(mode=0o711)
    quiet = dataclasses.replace(  # the layer is data: no pool, no THP mode, no pinning
        spec, backing="anon", prealloc=False, share=False, hugetlbfs_path=None,
        hugetlb_size_kb=None, numa_node=None, cpu_pin=None, guest_thp=None,
        guest_hugepages_2m=0, guest_hugepages_1g=0, guest_mthp=(), port_forwards=())
    t0 = time.monotonic()
    guest = DomainGuest(quiet, domain=domain, uri=uri, name="layer", access=access, keep=tmp)
    with guest:
        build.build(guest.target)
        guest.power_off(POWEROFF_S)
    manifest = {"domain": domain, "uri": uri, "what": build.what, "key": build.key,
                "disks": guest.overlay_names, "sources": sources,
                "build_s": round(time.monotonic() - t0, 1)}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def _drop_stale(store: owned.TemplateCache, domain: str, uri: str, keep: str) -> None:
    """Layers of the same domain built over disks that have changed since: never used again."""
    for manifest in store.root.glob(f"*/{MANIFEST}"):
        layer = manifest.parent
        if layer.name == keep:
            continue
        try:
            m = json.loads(manifest.read_text())
            if m.get("domain") != domain or m.get("uri") != uri:
                continue
            built = [tuple(s) for s in m["sources"]]
            now = [(src, os.stat(src).st_size, os.stat(src).st_mtime_ns)
                   for src, _size, _mtime in built]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not one of this domain's, or its disk is gone: left alone
        if now != built:
            store.drop(layer.name)


def sweep() -> list[str]:
    """Half-built layers of killed runs removed (`hugelab recover`)."""
    return owned.TemplateCache(LAYER_ROOT).sweep() if LAYER_ROOT.is_dir() else []
