"""Experiment files (TOML) -> validated, frozen Experiment -> seeded schedule of trials. Pure."""

from __future__ import annotations

import hashlib
import json
import random
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError

BACKINGS = ("4k", "thp", "hugetlb-2M", "hugetlb-1G")
THP_MODES = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")
DESIGNS = ("paired", "duet")
TOP_KEYS = {"name", "seed", "blocks", "design", "baseline", "workload", "arms", "evidence",
            "description", "vm"}
ARM_KEYS = {"name", "backing", "thp", "thp_defrag", "pools", "description", "vm", "guest"}
VM_BACKINGS = ("anon", "file", "memfd")
VM_KEYS = {"backing", "page_size", "prealloc", "share", "mem", "vcpus", "vms", "numa_node",
           "cpu_pin", "kernel", "accel"}
GUEST_KEYS = {"thp", "pools"}
VM_DEFAULT_KEYS = {"kernel", "accel", "mem", "vcpus"}
EVIDENCE_KEYS = {"thp_min_fraction"}


@dataclass(frozen=True)
class PoolSpec:
    size: str  # "2M" or "1G"
    pages: int
    node: int | None = None


@dataclass(frozen=True)
class VmLayer:
    """How QEMU backs guest RAM, and the guest shape; `vms` guests run the arm at once."""

    backing: str = "anon"  # anon | file | memfd
    page_size: str | None = None  # "2M" | "1G" for file (hugetlbfs) or memfd hugetlb
    prealloc: bool = False
    share: bool = False
    mem_mib: int = 512
    vcpus: int = 1
    vms: int = 1
    numa_node: int | None = None
    cpu_pin: tuple[int, ...] | None = None
    kernel: str | None = None
    accel: str = "auto"


@dataclass(frozen=True)
class GuestLayer:
    """The guest kernel's own huge pages: THP mode and hugetlb pools (None/0 = defaults)."""

    thp: str | None = None
    pools_2m: int | None = None
    pools_1g: int | None = None


@dataclass(frozen=True)
class Arm:
    name: str
    backing: str
    thp: str | None = None
    thp_defrag: str | None = None
    pools: tuple[PoolSpec, ...] = ()
    description: str = ""
    vm: VmLayer | None = None
    guest: GuestLayer | None = None

    @property
    def layer(self) -> str:
        return "guest" if self.vm else "native"

    def targets(self) -> list[str]:
        return [f"vm{i}" for i in range(self.vm.vms)] if self.vm else ["native"]

    @property
    def hugetlb_size(self) -> str | None:
        return self.backing.split("-", 1)[1] if self.backing.startswith("hugetlb-") else None


@dataclass(frozen=True)
class Experiment:
    name: str
    arms: tuple[Arm, ...]
    workload: dict[str, Any] = field(default_factory=lambda: {"kind": "hugelab-mem"})
    seed: int = 1
    blocks: int = 10
    design: str = "paired"
    baseline: str = ""
    thp_min_fraction: float = 0.5
    description: str = ""

    @property
    def baseline_arm(self) -> str:
        return self.baseline or self.arms[0].name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Experiment:
        def vm(v: dict[str, Any] | None) -> VmLayer | None:
            if v is None:
                return None
            pin = v.get("cpu_pin")
            return VmLayer(**{**v, "cpu_pin": tuple(pin) if pin is not None else None})

        arms = tuple(Arm(**{**a, "pools": tuple(PoolSpec(**p) for p in a["pools"]),
                            "vm": vm(a.get("vm")),
                            "guest": GuestLayer(**a["guest"]) if a.get("guest") else None})
                     for a in d["arms"])
        return cls(**{**d, "arms": arms})

    def key(self) -> str:
        """Identity of a run of this experiment: same file, same seed -> same run (resume)."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialSpec:
    block: int
    position: int
    arm: str


def schedule(exp: Experiment) -> list[TrialSpec]:
    """Every arm once per block, in a fresh random order per block, from the stored seed."""
    rng = random.Random(exp.seed)
    out: list[TrialSpec] = []
    names = [a.name for a in exp.arms]
    for block in range(exp.blocks):
        order = names[:]
        rng.shuffle(order)
        out.extend(TrialSpec(block, pos, arm) for pos, arm in enumerate(order))
    return out


# --- the built-in default experiment -------------------------------------------------------

def default_experiment() -> Experiment:
    """hugelab-mem dependent random loads on 1 GiB (far beyond any TLB's reach: 1,536 4 KiB
    entries cover 6 MiB), four backings, 10 blocks of ~2.5 s trials: a few minutes here."""
    return Experiment(
        name="default",
        description="pointer chase over 1 GiB: 4k vs THP vs hugetlb 2M vs hugetlb 1G",
        workload={"kind": "hugelab-mem", "workload": "chase", "size": "1G", "duration": 1.0},
        arms=tuple(Arm(name=b, backing=b) for b in BACKINGS),
        seed=20261122,
        blocks=10,
        baseline="4k",
    )


# --- parsing and validation ---------------------------------------------------------------

class _Locator:
    """Finds the line of a key in a TOML text, so errors can say where to look."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def line_of(self, key: str, arm_index: int | None = None, table: str | None = None) -> int | None:
        current: tuple[str, int] = ("", -1)
        arm_count = -1
        for no, raw in enumerate(self.lines, 1):
            line = raw.strip()
            if line.startswith("[[arms]]"):
                arm_count += 1
                current = ("arms", arm_count)
                continue
            m = re.match(r"\[\s*([A-Za-z0-9_.\-]+)\s*\]", line)
            if m:  # [arms.vm] / [arms.guest] belong to the latest [[arms]]
                sub = m.group(1).startswith("arms.")
                current = (m.group(1), arm_count) if sub else (m.group(1), -1)
                continue
            if not re.match(rf"{re.escape(key)}\s*=", line):
                continue
            if arm_index is not None:
                if current == ("arms" if table is None else f"arms.{table}", arm_index):
                    return no
                continue
            if table is not None and current[0] == table:
                return no
            if arm_index is None and table is None and current[0] == "":
                return no
        return None


def _err(loc: _Locator | None, msg: str, key: str, *, arm: int | None = None,
         table: str | None = None, hint: str | None = None) -> ExperimentError:
    line = loc.line_of(key, arm, table) if loc else None
    where = f"line {line}: " if line else ""
    return ExperimentError(f"{where}{msg}", hint=hint)


def parse_pools(value: Any, loc: _Locator | None, idx: int,
                table: str | None = None) -> tuple[PoolSpec, ...]:
    """pools = { "2M" = 600, "1G" = 2 }  or  pools = ["2M=600", "1G=2@0"] (page count @ node)."""
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [tuple(str(v).split("=", 1)) if "=" in str(v) else (str(v), None) for v in value]  # type: ignore[misc]
    else:
        raise _err(loc, "pools must be a table like { \"2M\" = 512 }", "pools", arm=idx, table=table)
    out = []
    for size, count in items:
        m = re.fullmatch(r"(\d+)(?:@(\d+))?", str(count))
        if size not in ("2M", "1G") or not m:
            raise _err(loc, f"bad pool '{size}={count}'", "pools", arm=idx, table=table,
                       hint="sizes are 2M or 1G; counts are page numbers, optionally @NODE")
        out.append(PoolSpec(size, int(m.group(1)), int(m.group(2)) if m.group(2) else None))
    return tuple(out)


def _check_keys(d: dict[str, Any], allowed: set[str], loc: _Locator | None, what: str,
                arm: int | None = None, table: str | None = None) -> None:
    for key in d:
        if key not in allowed:
            raise _err(loc, f"unknown key '{key}' in {what}", key, arm=arm, table=table,
                       hint=f"known keys: {', '.join(sorted(allowed))}")


def _choice(value: Any, allowed: tuple[str, ...], key: str, loc: _Locator | None,
            arm: int | None = None, what: str = "", table: str | None = None) -> str:
    if value not in allowed:
        raise _err(loc, f"{what}{key} = {value!r} is not one of: {', '.join(allowed)}", key,
                   arm=arm, table=table)
    return str(value)


def parse_arm(d: Any, idx: int, loc: _Locator | None,
              defaults: dict[str, Any] | None = None) -> Arm:
    defaults = defaults or {}
    if not isinstance(d, dict):
        raise _err(loc, "each [[arms]] entry must be a table", "arms")
    _check_keys(d, ARM_KEYS, loc, f"arm #{idx + 1}", arm=idx)
    name = d.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+\-]{1,64}", name):
        raise _err(loc, f"arm #{idx + 1} needs a name of letters, digits, '_.+-' (got {name!r})",
                   "name", arm=idx)
    what = f"arm '{name}': "
    backing = _choice(d.get("backing"), BACKINGS, "backing", loc, idx, what)
    thp = _choice(d["thp"], THP_MODES, "thp", loc, idx, what) if "thp" in d else None
    defrag = (_choice(d["thp_defrag"], THP_DEFRAG, "thp_defrag", loc, idx, what)
              if "thp_defrag" in d else None)
    pools = parse_pools(d["pools"], loc, idx) if "pools" in d else ()
    vm = parse_vm(d["vm"], defaults, loc, idx, what) if "vm" in d else None
    guest = parse_guest(d["guest"], loc, idx, what) if "guest" in d else None
    if guest is not None and vm is None:
        raise _err(loc, f"{what}a [arms.guest] layer needs an [arms.vm] layer", "guest", arm=idx)
    return Arm(name, backing, thp, defrag, pools, str(d.get("description", "")), vm, guest)


def parse_mib(value: Any, key: str, loc: _Locator | None, idx: int | None,
              table: str | None = None) -> int:
    m = re.fullmatch(r"(\d+)\s*([MG])i?B?", str(value).strip(), re.IGNORECASE)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not m:
        raise _err(loc, f"{key} = {value!r}: write a size like \"512M\" or \"2G\"", key, arm=idx,
                   table=table)
    return int(m.group(1)) * (1024 if m.group(2).upper() == "G" else 1)


def parse_vm(d: Any, defaults: dict[str, Any], loc: _Locator | None, idx: int,
             what: str) -> VmLayer:
    if not isinstance(d, dict):
        raise _err(loc, f"{what}vm must be a table", "vm", arm=idx, table="vm")
    _check_keys(d, VM_KEYS, loc, f"{what}[arms.vm]", arm=idx, table="vm")
    d = {**defaults, **d}
    backing = _choice(d.get("backing", "anon"), VM_BACKINGS, "backing", loc, idx, f"{what}vm ", "vm")
    page = d.get("page_size")
    if page is not None and page not in ("2M", "1G"):
        raise _err(loc, f"{what}vm page_size = {page!r} is not 2M or 1G", "page_size", arm=idx, table="vm")
    if backing == "file" and page is None:
        raise _err(loc, f"{what}vm backing 'file' (hugetlbfs) needs page_size", "backing",
                   arm=idx, table="vm", hint="page_size = \"2M\" or \"1G\"")
    if backing == "anon" and page is not None:
        raise _err(loc, f"{what}vm backing 'anon' takes no page_size (THP follows the host mode)",
                   "page_size", arm=idx, table="vm", hint="use backing = \"file\" or \"memfd\" for hugetlb")
    ints = {k: d[k] for k in ("vcpus", "vms", "numa_node") if k in d}
    for k, v in ints.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "numa_node" else 1):
            raise _err(loc, f"{what}vm {k} must be a positive integer (got {v!r})", k, arm=idx, table="vm")
    pin = d.get("cpu_pin")
    if pin is not None and not (isinstance(pin, list) and all(isinstance(c, int) for c in pin)):
        raise _err(loc, f"{what}vm cpu_pin must be a list of host CPU numbers", "cpu_pin", arm=idx, table="vm")
    return VmLayer(backing, page, bool(d.get("prealloc", False)), bool(d.get("share", False)),
                   parse_mib(d.get("mem", 512), "mem", loc, idx, "vm"), ints.get("vcpus", 1),
                   ints.get("vms", 1), ints.get("numa_node"), tuple(pin) if pin else None,
                   d.get("kernel"), _choice(d.get("accel", "auto"), ("auto", "kvm", "tcg"),
                                            "accel", loc, idx, f"{what}vm ", "vm"))


def parse_guest(d: Any, loc: _Locator | None, idx: int, what: str) -> GuestLayer:
    if not isinstance(d, dict):
        raise _err(loc, f"{what}guest must be a table", "guest", arm=idx)
    _check_keys(d, GUEST_KEYS, loc, f"{what}[arms.guest]", arm=idx, table="guest")
    thp = (_choice(d["thp"], THP_MODES, "thp", loc, idx, f"{what}guest ", "guest")
           if "thp" in d else None)
    pools = {p.size: p.pages for p in parse_pools(d["pools"], loc, idx, "guest")} if "pools" in d else {}
    return GuestLayer(thp, pools.get("2M"), pools.get("1G"))


def _int(d: dict[str, Any], key: str, default: int, lo: int, loc: _Locator | None) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise _err(loc, f"{key} must be an integer >= {lo} (got {v!r})", key)
    return v


def parse_experiment(d: dict[str, Any], text: str | None = None, name: str = "experiment") -> Experiment:
    loc = _Locator(text) if text is not None else None
    _check_keys(d, TOP_KEYS, loc, "the experiment")
    arms_raw = d.get("arms")
    if not isinstance(arms_raw, list) or not arms_raw:
        raise ExperimentError("the experiment has no arms",
                              hint="add at least two [[arms]] tables, each with name and backing")
    vm_defaults = d.get("vm", {})
    if not isinstance(vm_defaults, dict):
        raise _err(loc, "[vm] must be a table of guest defaults", "vm")
    _check_keys(vm_defaults, VM_DEFAULT_KEYS, loc, "[vm]", table="vm")
    arms = tuple(parse_arm(a, i, loc, vm_defaults) for i, a in enumerate(arms_raw))
    names = [a.name for a in arms]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise _err(loc, f"arm names must be unique: {', '.join(sorted(dup))}", "name")
    baseline = d.get("baseline", names[0])
    if baseline not in names:
        raise _err(loc, f"baseline '{baseline}' is not an arm", "baseline",
                   hint=f"arms: {', '.join(names)}")
    design = _choice(d.get("design", "paired"), DESIGNS, "design", loc)
    if design == "duet" and len({(a.thp, a.thp_defrag) for a in arms}) > 1:
        raise _err(loc, "design 'duet' runs all arms at the same time, so they must share the "
                   "host THP modes (thp, thp_defrag)", "design",
                   hint="use design = \"paired\" to compare host THP modes")
    workload = d.get("workload", {"kind": "hugelab-mem"})
    if not isinstance(workload, dict) or "kind" not in workload:
        raise _err(loc, "[workload] needs a kind", "workload",
                   hint="e.g. kind = \"hugelab-mem\", \"sysbench\", \"stress-ng\", \"command\"")
    evidence = d.get("evidence", {})
    _check_keys(evidence, EVIDENCE_KEYS, loc, "[evidence]", table="evidence")
    return Experiment(
        name=str(d.get("name", name)),
        description=str(d.get("description", "")),
        arms=arms,
        workload=dict(workload),
        seed=_int(d, "seed", 1, 0, loc),
        blocks=_int(d, "blocks", 10, 1, loc),
        design=design,
        baseline=baseline,
        thp_min_fraction=float(evidence.get("thp_min_fraction", 0.5)),
    )


def load_experiment(path: Path) -> Experiment:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExperimentError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return parse_experiment(data, text, name=path.stem)
    except ExperimentError as exc:
        raise ExperimentError(f"{path}: {exc.message}", hint=exc.hint) from exc
