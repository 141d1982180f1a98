"""The experiment's model: arms and their layers, the experiment, its seeded schedule. Pure."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

# the vocabulary lives in hugelab.experiment.backings; BACKINGS is re-exported from here
from hugelab.experiment.backings import BACKINGS as BACKINGS
from hugelab.experiment.backings import CLASSIC, mthp_size_kb


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
    domain: str | None = None  # a user's libvirt domain: the arm runs a transient copy of it
    uri: str = "qemu:///system"
    # how hugelab reaches a domain's guest: its qemu-guest-agent, SSH (as ssh_user, with
    # ssh_key or ssh's own defaults, through a NIC hugelab adds with a 127.0.0.1 forward), or
    # auto: the agent, and SSH too (whichever answers first) when ssh_key is given
    access: str = "auto"
    ssh_user: str = "root"
    ssh_key: str | None = None
    # hugelab's own guest: QEMU started by hugelab ("qemu"), or a transient domain of libvirtd
    manager: str = "qemu"
    # trials of the arm per guest boot: the boot is the unit of analysis (its value the
    # geometric mean of its trials), the trials within it repeated measures
    trials_per_boot: int = 1
    # guest RAM (anon, or memfd without page_size) in host multi-size THP folios of this size
    # (a size the host's kernel offers for that memory: `enabled` for anon, `shmem_enabled`
    # for memfd): the runner sets that size's knob for the arm, every other size never
    mthp: str | None = None

    @property
    def mthp_kb(self) -> int | None:
        """vm mthp in kB (64 for "64K")."""
        return mthp_size_kb(f"mthp-{self.mthp}") if self.mthp else None


# vm keys added after runs were stored: left out of to_dict at their default, so an experiment
# that does not set them keeps its identity (key)
VM_LATER_DEFAULTS = {"access": "auto", "ssh_user": "root", "ssh_key": None, "manager": "qemu",
                     "trials_per_boot": 1, "mthp": None}
# arm keys added after runs were stored: left out of to_dict while None
ARM_LATER_KEYS = ("process_thp", "thp_max_ptes_none", "thp_shrink_underused", "memory_limit",
                  "host_state", "fragment")
MANAGERS = ("qemu", "libvirt")
# the one place outside a kind's own module that names a kind: the built-in default experiment's
# (and a file without [workload]'s) kind, hugelab's own micro-benchmark
DEFAULT_KIND = "hugelab-mem"
ACCESS_MODES = ("auto", "agent", "ssh")


@dataclass(frozen=True)
class GuestLayer:
    """The guest kernel's own huge pages: THP mode and hugetlb pools (None/0 = defaults)."""

    thp: str | None = None
    pools_2m: int | None = None
    pools_1g: int | None = None
    # guest multi-size THP: (size, mode) pairs, ("64K", "always"), written to the guest's
    # hugepages-<N>kB/enabled
    mthp: tuple[tuple[str, str], ...] = ()


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
    # a cell of a factorial experiment: (factor, level) for every factor, arm and scenario ones
    levels: tuple[tuple[str, str], ...] = ()
    # the cell's scenario: workload parameters that override the experiment's [workload]
    workload: tuple[tuple[str, Any], ...] = ()
    # the application's own huge-page switches and settings for this arm (PostgreSQL
    # postgresql.conf keys, JVM options, ...): (key, value) pairs the workload kind validates
    app: tuple[tuple[str, Any], ...] = ()
    # THP of the workload's own processes under the host's mode, set per process by prctl
    # (inherited over fork and exec): "never" (PR_SET_THP_DISABLE) or "madvise"
    # (PR_THP_DISABLE_EXCEPT_ADVISED, Linux 6.18+); None: the processes follow the host
    process_thp: str | None = None
    # host THP tunables for the arm's trials (None: as found at the run's start): khugepaged's
    # max_ptes_none (0..511 on x86-64) and the underused-THP shrinker on/off (Linux 6.12+)
    thp_max_ptes_none: int | None = None
    thp_shrink_underused: bool | None = None
    # a memory limit in bytes for a cgroup of the trial's own processes (native arms only;
    # hugelab.host.memcg); None: no limit
    memory_limit: int | None = None
    # the host's state for the arm's trials (hugelab.host.hoststate): "fresh" (no holder) or
    # "fragmented" (free memory made unusable for 2 MiB pages to the share `fragment`, held by
    # hugelab.host.fragment); None: as the host is
    host_state: str | None = None
    fragment: float | None = None

    @property
    def layer(self) -> str:
        return "guest" if self.vm else "native"

    def targets(self) -> list[str]:
        return [f"vm{i}" for i in range(self.vm.vms)] if self.vm else ["native"]

    @property
    def hugetlb_size(self) -> str | None:
        return self.backing.split("-", 1)[1] if self.backing.startswith("hugetlb-") else None

    @property
    def mthp_kb(self) -> int | None:
        """The multi-size THP folio size of an `mthp-<size>` backing, in kB."""
        return mthp_size_kb(self.backing)


@dataclass(frozen=True)
class Factor:
    """One swept setting. An arm factor sets host, QEMU, guest or workload-backing settings and
    is compared; a scenario factor sets a workload parameter, and its levels are different
    workloads, compared never with each other but as the background of every arm comparison.
    Level names come in order; an arm factor's first level is its baseline."""

    name: str
    levels: tuple[str, ...]
    scenario: bool = False
    ordered: bool = False  # numeric levels (workers 1, 4, 16): effects are drawn along them
    positions: tuple[float, ...] = ()  # the numeric value of each level, when ordered


TOP_LATER_DEFAULTS: dict[str, Any] = {"repeats": 1, "memory_margin": None}


def _trim_arm(arm: dict[str, Any]) -> None:
    """An arm's dict without the keys it never sets (identities stay as they were)."""
    for k in ("levels", "workload", "app"):
        if not arm[k]:
            del arm[k]
    for k in ARM_LATER_KEYS:  # keys added later: identities stay as they were
        if arm[k] is None:
            del arm[k]
    if arm.get("guest") and not arm["guest"]["mthp"]:
        del arm["guest"]["mthp"]  # a key added later: identities stay as they were
    vm = arm.get("vm")
    if vm and vm["domain"] is None:  # hugelab's own guest
        del vm["domain"], vm["uri"]
    for k, default in VM_LATER_DEFAULTS.items():
        if vm and vm.get(k, default) == default:
            vm.pop(k, None)


@dataclass(frozen=True)
class Experiment:
    name: str
    arms: tuple[Arm, ...]
    workload: dict[str, Any] = field(default_factory=lambda: {"kind": DEFAULT_KIND})
    seed: int = 1
    blocks: int = 10
    design: str = "paired"
    baseline: str = ""
    thp_min_fraction: float = 0.5
    description: str = ""
    factors: tuple[Factor, ...] = ()
    # separate repeats of the whole experiment, one after another (`blocks` blocks each,
    # numbered on: repeat r holds blocks r*blocks .. (r+1)*blocks - 1); the report treats the
    # repeat as a random effect (hugelab.stats.repeats)
    repeats: int = 1
    # `[costs] memory_margin`: the memory cost beyond which the report states an arm's trade
    # (None: the report's default, 2%)
    memory_margin: float | None = None

    @property
    def baseline_arm(self) -> str:
        return self.baseline or self.arms[0].name

    @property
    def scenario_factors(self) -> tuple[Factor, ...]:
        return tuple(f for f in self.factors if f.scenario)

    @property
    def condition_factors(self) -> tuple[Factor, ...]:
        """Arm factors whose levels set the host's state (`host_state`, issue 38): a host
        condition is not a choice a user makes but the background of one, like a scenario.
        Its effect and its interactions are estimated as an arm factor's; every other cell is
        compared with the baseline cell of its own condition."""
        out = []
        for f in self.factors:
            if f.scenario or len(f.levels) < 2:
                continue
            state: dict[str, set[tuple[str, float | None]]] = {}
            for a in self.arms:
                lv = dict(a.levels).get(f.name)
                if lv is not None:
                    state.setdefault(lv, set()).add((a.host_state or "as found", a.fragment))
            if len(state) > 1 and all(len(s) == 1 for s in state.values()) and \
                    len({next(iter(s)) for s in state.values()}) == len(state):
                out.append(f)
        return tuple(out) if len(out) < len([f for f in self.factors if not f.scenario]) \
            else ()

    def baseline_of(self, arm: str) -> str:
        """The arm a cell is compared with: the baseline cell of its own scenario and host
        condition."""
        scen = {f.name for f in self.scenario_factors + self.condition_factors}
        mine = next(a for a in self.arms if a.name == arm)
        if not scen:
            return self.baseline_arm
        base = next(a for a in self.arms if a.name == self.baseline_arm)
        want = {k: v for k, v in mine.levels if k in scen} | \
            {k: v for k, v in base.levels if k not in scen}
        return next((a.name for a in self.arms if dict(a.levels) == want), self.baseline_arm)

    def repeat_of(self, block: int) -> int:
        """The repeat (0-based) a block belongs to."""
        return block // self.blocks

    def workload_for(self, arm: Arm) -> dict[str, Any]:
        """The [workload] table this arm runs: the experiment's, with its scenario's values."""
        return {**self.workload, **dict(arm.workload)}

    def to_dict(self) -> dict[str, Any]:
        """As JSON-able dicts; keys a flat experiment never sets are left out, so a flat
        experiment keeps the identity (key) it had before factors existed."""
        d = asdict(self)
        if not self.factors:
            del d["factors"]
        for k, default in TOP_LATER_DEFAULTS.items():  # keys added later, at their defaults:
            if d[k] == default:  # identities stay as they were
                del d[k]
        for arm in d["arms"]:
            _trim_arm(arm)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Experiment:
        def vm(v: dict[str, Any] | None) -> VmLayer | None:
            if v is None:
                return None
            pin = v.get("cpu_pin")
            return VmLayer(**{**v, "cpu_pin": tuple(pin) if pin is not None else None})

        def pairs(v: Any) -> tuple[tuple[Any, Any], ...]:
            return tuple((k, tuple(x) if isinstance(x, list) else x) for k, x in v or ())

        def guest(g: dict[str, Any] | None) -> GuestLayer | None:
            return GuestLayer(**{**g, "mthp": pairs(g.get("mthp"))}) if g else None

        arms = tuple(Arm(**{**a, "pools": tuple(PoolSpec(**p) for p in a["pools"]),
                            "vm": vm(a.get("vm")),
                            "guest": guest(a.get("guest")),
                            "levels": pairs(a.get("levels")),
                            "workload": pairs(a.get("workload")),
                            "app": pairs(a.get("app"))})
                     for a in d["arms"])
        factors = tuple(Factor(**{**f, "levels": tuple(f["levels"]),
                                  "positions": tuple(f.get("positions") or ())})
                        for f in d.get("factors") or ())
        return cls(**{**d, "arms": arms, "factors": factors})

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
    """Every arm once per block, in a fresh random order per block, from the stored seed; a run
    of several repeats has `blocks` blocks per repeat, numbered on. Design "interleaved" (its
    servers start in the block's order) draws its orders balanced (`balanced_orders`)."""
    rng = random.Random(exp.seed)
    out: list[TrialSpec] = []
    names = [a.name for a in exp.arms]
    groups = _host_state_groups(exp)
    cycle: list[list[str]] = []
    for block in range(exp.blocks * exp.repeats):
        if exp.design == "interleaved" and not groups:
            cycle = cycle or balanced_orders(names, rng)
            order = cycle.pop()
        elif groups:  # a split plot: each host state's arms together, in random orders
            rng.shuffle(groups)
            order = []
            for group in groups:
                rng.shuffle(group)
                order += group
        else:
            order = names[:]
            rng.shuffle(order)
        out.extend(TrialSpec(block, pos, arm) for pos, arm in enumerate(order))
    return out


def balanced_orders(names: list[str], rng: random.Random) -> list[list[str]]:
    """2n orders of n arms, in a random sequence: the n rotations of a random order and their
    mirrors, so that over them each arm takes each place exactly twice and goes before each
    other arm exactly n times (n = 3: all six orders). An interleaved block starts its servers
    in its order; drawn one order per block independently, a 30-block run's twin could start
    before the arm it copies in 6 blocks of 30 (seed 901, redis-thp-interleaved; issue 39)."""
    first = names[:]
    rng.shuffle(first)
    n = len(first)
    rows = [first[k:] + first[:k] for k in range(n)]
    rows += [r[::-1] for r in rows]
    rng.shuffle(rows)
    return rows


def _host_state_groups(exp: Experiment) -> list[list[str]]:
    """The arms by the host state they run in, when some arm sets one (else []): making an
    aged host takes tens of seconds, so a block runs each state's arms one after another (the
    states' order and the arms' order within each drawn per block) and changes state at most
    once per state and block. Backing x host state stays paired within each block."""
    if all(a.host_state is None for a in exp.arms):
        return []
    by: dict[tuple[str | None, float | None], list[str]] = {}
    for a in exp.arms:
        by.setdefault((a.host_state, a.fragment), []).append(a.name)
    return list(by.values())


# --- the built-in default experiment -------------------------------------------------------

def default_experiment() -> Experiment:
    """The default kind's dependent random loads on 1 GiB (far beyond any TLB's reach: 1,536 4 KiB
    entries cover 6 MiB), four backings, 10 blocks of ~2.5 s trials: a few minutes here."""
    return Experiment(
        name="default",
        description="pointer chase over 1 GiB: 4k vs THP vs hugetlb 2M vs hugetlb 1G",
        workload={"kind": DEFAULT_KIND, "workload": "chase", "size": "1G", "duration": 1.0},
        arms=tuple(Arm(name=b, backing=b) for b in CLASSIC),
        seed=20261122,
        blocks=10,
        baseline="4k",
    )


