"""Walks an experiment's schedule: apply arm, run trial, collect evidence, commit, resume."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from hugelab.errors import PoolBusyError
from hugelab.experiment import Arm, Experiment, TrialSpec
from hugelab.host import memcg
from hugelab.host.control import HostControl
from hugelab.host.fragment import FragmentTarget, check_reachable, default_reserve_kb
from hugelab.host.hoststate import HostStates
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import state_dir
from hugelab.host.paths import REAL, HostPaths
from hugelab.planning.arms import arm_thp_knobs, unsupported_arms
from hugelab.planning.poolkeep import POOL_RETRY_S, PoolKeeper
from hugelab.planning.pools import workload_bytes
from hugelab.planning.schedule import remaining
from hugelab.planning.schedule import units as plan_units
from hugelab.recovery import run_session
from hugelab.runner.arms import ArmTrials
from hugelab.runner.record import TrialRecorder
from hugelab.store import SqlStore
from hugelab.store.keys import run_key
from hugelab.trial import monitors
from hugelab.vm.domains.domainresolve import resolve_experiment
from hugelab.vm.trial import GuestOutcome, vm_spec
from hugelab.workloads import filepool, process_thp
from hugelab.workloads.base import Target, Workload

SessionFactory = Callable[[], AbstractContextManager[HostControl]]
Progress = Callable[["RunEvent"], None]
# Called after each completed block with (run_id, blocks completed, skipped arms); True stops.
Stopper = Callable[[int, int, dict[str, str]], bool]


@dataclass(frozen=True)
class RunEvent:
    kind: str  # "start" | "skip" | "trial" | "repeat" | "stop" | "done"
    done: int = 0
    total: int = 0
    trial: TrialSpec | None = None
    status: str = ""
    value: float | None = None
    message: str = ""


@dataclass
class RunOutcome:
    run_id: int
    resumed: bool
    executed: int
    skipped: dict[str, str] = field(default_factory=dict)
    pool_holders: list[dict[str, Any]] = field(default_factory=list)  # others' pages at start




class Runner:
    """Runs one experiment into one store. Dependencies are parameters, so tests can pass a
    deterministic target or a session on a fake sysfs tree instead of the real host."""

    def __init__(self, exp: Experiment, store: SqlStore, workload: Workload, *,
                 target: Target, session: SessionFactory | None = None,
                 paths: HostPaths = REAL, progress: Progress | None = None,
                 stopper: Stopper | None = None, retry_failed: bool = False,
                 workloads: Mapping[str, Workload] | None = None, label: str = "",
                 repeat_pause_s: float = 0.0, sleep: Callable[[float], None] = time.sleep
                 ) -> None:
        self.exp = exp
        self.repeat_pause_s = repeat_pause_s  # between repeats, when the run has several
        self.sleep = sleep
        self.workloads = dict(workloads or {})  # per arm, where a scenario sets its own
        self.retry_failed = retry_failed
        self.store = store
        self.workload = workload
        self.target = target
        self.paths = paths
        self.session = session or (lambda: run_session(paths))
        self.label = label  # the host's name in a shared store: its own run of the experiment
        self.progress = progress or (lambda e: None)
        self.stopper = stopper
        self.pool_retry_s = POOL_RETRY_S  # before run(): tests wait less between tries

    def run(self) -> RunOutcome:
        self.exp = resolve_experiment(self.exp)  # users' domains: their memory, or an error
        host = self.host = inspect_host(self.paths)
        skipped = unsupported_arms(self.exp, host)
        self._preflight(skipped)  # tools, kernel features, the application's own settings
        self.hugetlbfs = {size: state_dir() / f"hugetlbfs-{size}" for size in ("2M", "1G")}
        specs = {a.name: vm_spec(a, workload_bytes(self._workload(a), a), self.hugetlbfs)
                 for a in self.exp.arms if a.vm is not None}  # bad guests fail before any change
        self.trials = ArmTrials(self.exp, self.workload, self.target, host=host, specs=specs,
                                workloads=self.workloads)
        self.pools = PoolKeeper(self.exp, self.workload, self.workloads, paths=self.paths,
                                retry_s=self.pool_retry_s)
        self.recorder = TrialRecorder(self.exp, self._workload, self.pools.held_kb, self.paths)
        run_id, created = self.store.get_or_create_run(
            run_key(self.exp, self.label), self.exp.name, self.exp.to_dict(), host, self.label)
        todo = self._remaining(run_id, skipped)
        executed = 0
        if todo:
            with self.session() as control, HostStates(self.exp.seed) as states, \
                    filepool.kept():  # a server's files kept between trials (filepool)
                skipped.update(self.pools.reserve(control, self._arms(skipped)))
                self.pools.mount_hugetlbfs(control, self._arms(skipped), self.hugetlbfs)
                todo = self._remaining(run_id, skipped)  # a duet's block beside a skipped
                # arm is whole without it: its ok trials stay (issue 40)
                for reason in sorted(set(skipped.items())):
                    self.progress(RunEvent("skip", message=f"{reason[0]}: {reason[1]}"))
                self.progress(RunEvent("start", total=len(todo)))
                thp_initial = host["thp"].get("enabled"), host["thp"].get("defrag")
                units = plan_units(todo, self.exp.design)
                for u, unit in enumerate(units):
                    if u and self._new_repeat(units[u - 1][0], unit[0]):
                        self._pause(unit[0])
                    for spec, status, value in self._run_unit(run_id, unit, control, thp_initial,
                                                              states):
                        executed += 1
                        self.progress(RunEvent("trial", executed, len(todo), spec, status, value))
                    nxt = units[u + 1][0] if u + 1 < len(units) else None
                    if self._should_stop(run_id, unit[-1], nxt, skipped):
                        self.progress(RunEvent("stop", executed, len(todo), message=(
                            f"the looks stopped the run after block {unit[-1].block + 1}")))
                        break
        self.store.set_run_status(run_id, "finished", skipped)
        self.progress(RunEvent("done", executed, executed))
        return RunOutcome(run_id, not created, executed, skipped, host.get("pool_holders") or [])

    def _preflight(self, skipped: dict[str, str]) -> None:
        """Each arm's workload checks what it needs before any host change
        (`preflight(backing)`: its programs installed, its settings valid and giving the arm's
        backing), and the kernel has the arm's process_thp; an ExperimentError or
        ToolMissingError stops the run with nothing changed."""
        seen: set[tuple[int, str]] = set()
        for arm in self.exp.arms:
            workload = self._workload(arm)
            if arm.name in skipped:
                continue
            if arm.fragment is not None:  # an aged host this one can make (memory, range)
                check_reachable(FragmentTarget(arm.fragment), default_reserve_kb())
            process_thp.preflight(workload.kind, arm.process_thp)
            check = getattr(workload, "preflight", None)
            if (id(workload), arm.backing) in seen or not callable(check):
                continue
            seen.add((id(workload), arm.backing))
            check(arm.backing)

    def _new_repeat(self, prev: TrialSpec, nxt: TrialSpec) -> bool:
        return self.exp.repeat_of(prev.block) != self.exp.repeat_of(nxt.block)

    def _pause(self, nxt: TrialSpec) -> None:
        """Between two repeats: wait `repeat_pause_s`, so the repeats sample the machine's
        states further apart in time (host settings stay as the run set them)."""
        r = self.exp.repeat_of(nxt.block)
        self.progress(RunEvent("repeat", message=(
            f"repeat {r + 1} of {self.exp.repeats}"
            + (f" after a {self.repeat_pause_s:g} s pause" if self.repeat_pause_s else ""))))
        if self.repeat_pause_s > 0:
            self.sleep(self.repeat_pause_s)

    def _should_stop(self, run_id: int, spec: TrialSpec, nxt: TrialSpec | None,
                     skipped: dict[str, str]) -> bool:
        """At the end of a block (the next trial belongs to a later block), ask the stopper."""
        if self.stopper is None or (nxt is not None and nxt.block == spec.block):
            return False
        return self.stopper(run_id, spec.block + 1, skipped)

    def _remaining(self, run_id: int, skipped: dict[str, str]) -> list[TrialSpec]:
        """Trials still to run: never run, cut short by a killed run, failed for a reason
        outside the workload (or any failure, with retry_failed). A duet or interleaved block
        runs whole."""
        done = self.store.done_keys(run_id, retry_failed=self.retry_failed)
        return remaining(self.exp, done, skipped, self.target.name)

    def _pool_failed(self, run_id: int, unit: list[TrialSpec], why: str
                     ) -> list[tuple[TrialSpec, str, float | None]]:
        """Every trial of a unit whose pool pages could not be had, failed with that reason
        (cause "pool": retried on resume)."""
        now = time.time()
        trials = [self.recorder.record(run_id, spec, arm, None, why, {}, now, now,
                                     GuestOutcome(name, None, why, cause=PoolBusyError.cause))
                  for spec in unit for arm in [self._arm(spec.arm)]
                  for name in (arm.targets() if arm.vm else [self.target.name])]
        self.store.add_trials(trials)
        return [(spec, "failed", None) for spec in unit]

    def _run_unit(self, run_id: int, unit: list[TrialSpec], control: HostControl,
                  thp_initial: tuple[str | None, str | None], states: HostStates
                  ) -> list[tuple[TrialSpec, str, float | None]]:
        """Run one trial (paired) or every arm of a block at the same time (duet), then commit
        the unit's trials together, each with the host state it ran in."""
        first = self._arm(unit[0].arm)  # duet, interleaved: the arms share the host's settings
        states.ensure(first.host_state, first.fragment)  # an aged host: before the pools
        why, held = self.pools.for_unit(control, [self._arm(t.arm) for t in unit])
        if why is not None:
            return self._pool_failed(run_id, unit, why)
        apply_arm(control, first, self.host, thp_initial)
        state = states.record()
        before = monitors.snapshot(self.paths)
        started = time.time()
        results = self.trials.outcomes([self._arm(t.arm) for t in unit], unit[0].block)
        ended = time.time()
        mon = monitors.delta(before, monitors.snapshot(self.paths))
        mon["host_state"] = state
        if cgroup := memcg.trial_counters():  # the arm's memory_limit: its cgroup's own figures
            mon["memcg"] = cgroup
        if held:
            mon["pools_shared"] = held  # pages other users held when the unit started
        trials = [self.recorder.record(run_id, spec, self._arm(spec.arm), o.result, o.error,
                                     {**mon, **o.monitors}, started, ended, o)
                  for spec, outs in zip(unit, results, strict=True) for o in outs]
        self.store.add_trials(trials)
        out = []
        for spec in unit:
            mine = [t for t in trials if t.arm == spec.arm]
            worst = next((t for t in mine if t.status != "ok"), mine[0] if mine else None)
            out.append((spec, worst.status if worst else "failed", worst.value if worst else None))
        return out

    def _workload(self, arm: Arm) -> Workload:
        return self.workloads.get(arm.name, self.workload)

    def _arm(self, name: str) -> Arm:
        return next(a for a in self.exp.arms if a.name == name)

    def _arms(self, skipped: Mapping[str, str]) -> list[Arm]:
        return [a for a in self.exp.arms if a.name not in skipped]


def apply_arm(control: HostControl, arm: Arm, host: dict[str, Any],
              thp_initial: tuple[str | None, str | None]) -> None:
    """Set the THP modes, per-size knobs and tunables (max_ptes_none, shrink_underused) an
    arm's trials run under, and make the trial's memory cgroup: a fresh one with the arm's
    memory_limit, which the trial's workload processes join (the previous trial's is removed;
    none without a limit). `host`: inspect_host() at the run's start; `thp_initial`: its
    enabled and defrag modes. Knobs an arm does not set go back to what `host` found."""
    from hugelab.planning.arms import arm_tunables

    native_mthp = arm.mthp_kb and arm.vm is None  # its `thp` is the size's mode
    enabled = (None if native_mthp else arm.thp) or thp_initial[0]
    defrag = arm.thp_defrag or thp_initial[1]
    if enabled or defrag:
        control.set_thp(enabled, defrag)
    anon, shmem = arm_thp_knobs(arm, host)
    for size_kb, mode in anon.items():
        control.set_mthp(size_kb, mode)
    for shmem_kb, mode in shmem.items():
        control.set_shmem_thp(mode, shmem_kb)
    tunables = arm_tunables(arm, host)
    if "max_ptes_none" in tunables:
        control.set_max_ptes_none(tunables["max_ptes_none"])
    if "shrink_underused" in tunables:
        control.set_shrink_underused(tunables["shrink_underused"])
    control.set_memory_limit(arm.memory_limit)


def iter_arm_values(store: SqlStore, run_id: int) -> Iterator[tuple[str, int, float]]:
    """(arm, block, value) of trials that count: status ok, value present."""
    for block, _pos, arm, _target, status, value in store.values(run_id):
        if status == "ok" and value is not None:
            yield arm, block, value
