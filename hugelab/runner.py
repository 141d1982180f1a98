"""Walks an experiment's schedule: apply arm, run trial, collect evidence, commit, resume."""

from __future__ import annotations

import platform
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from hugelab import __version__
from hugelab.errors import HugelabError, PoolBusyError, PoolError, internal_error
from hugelab.experiment import Arm, Experiment, TrialSpec
from hugelab.host import holders, memcg
from hugelab.host.control import HostControl, size_kb_from_name
from hugelab.host.fragment import FragmentTarget, check_reachable, default_reserve_kb
from hugelab.host.hoststate import HostStates
from hugelab.host.inspect import inspect_host
from hugelab.host.inspect import pools as host_pools
from hugelab.host.journal import state_dir
from hugelab.host.paths import REAL, HostPaths, parse_selected, read_text
from hugelab.planning.arms import PMD_KB, arm_thp_knobs, unsupported_arms
from hugelab.planning.pools import arm_pool_need, global_first, pool_plan, workload_bytes
from hugelab.planning.schedule import remaining
from hugelab.planning.schedule import units as plan_units
from hugelab.recovery import run_session
from hugelab.store import SqlStore, Trial
from hugelab.store.keys import run_key
from hugelab.store.spool import write_id
from hugelab.trial import costs, monitors
from hugelab.trial.appevidence import app_check, check_process
from hugelab.trial.contain import TrialScope
from hugelab.trial.evidence import (
    CONTRADICTED,
    VERIFIED,
    Check,
    check_vm,
    check_workload,
    combine,
)
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.domains.libvirt_guest import resolve_experiment
from hugelab.vm.trial import GuestOutcome, run_guest_trial, vm_spec
from hugelab.workloads import process_thp
from hugelab.workloads.base import Target, Workload, WorkloadResult
from hugelab.workloads.interleave import is_server, serve
from hugelab.workloads.registry import kind_of

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


POOL_ATTEMPTS = 3  # tries to make a unit's pool pages free before its trials fail (cause "pool")
POOL_RETRY_S = 1.0  # pause between them: a holder that is exiting lets go of its pages


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
        self.pool_retry_s = POOL_RETRY_S

    def run(self) -> RunOutcome:
        self.exp = resolve_experiment(self.exp)  # users' domains: their memory, or an error
        host = self.host = inspect_host(self.paths)
        skipped = unsupported_arms(self.exp, host)
        self._preflight(skipped)  # tools, kernel features, the application's own settings
        self.hugetlbfs = {size: state_dir() / f"hugetlbfs-{size}" for size in ("2M", "1G")}
        specs = {a.name: vm_spec(a, workload_bytes(self._workload(a), a), self.hugetlbfs)
                 for a in self.exp.arms if a.vm is not None}  # bad guests fail before any change
        self.trials = ArmTrials(self.exp, self.workload, self.target, host=host, specs=specs,
                                paths=self.paths, workloads=self.workloads)
        run_id, created = self.store.get_or_create_run(
            run_key(self.exp, self.label), self.exp.name, self.exp.to_dict(), host, self.label)
        todo = self._remaining(run_id, skipped)
        executed = 0
        if todo:
            with self.session() as control, HostStates(self.exp.seed) as states:
                skipped.update(self._reserve_pools(control, skipped))
                self._mount_hugetlbfs(control, skipped)
                todo = [t for t in todo if t.arm not in skipped]
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
                            f"verdict reached after block {unit[-1].block + 1}")))
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

    def _mount_hugetlbfs(self, control: HostControl, skipped: dict[str, str]) -> None:
        sizes = {a.vm.page_size for a in self.exp.arms  # a user's domain: libvirt's own mount
                 if a.vm and a.vm.backing == "file" and a.vm.page_size and a.name not in skipped
                 and a.vm.domain is None}
        for size in sorted(s for s in sizes if s):
            control.mount_hugetlbfs(size_kb_from_name(size), self.hugetlbfs[size])

    def _reserve_pools(self, control: HostControl, skipped: dict[str, str]) -> dict[str, str]:
        """Make free, before the first trial, the pages every pool the arms need (on top of
        what other users hold); an arm whose pool cannot be had is skipped with the reason
        (requested vs achieved)."""
        arms = [a for a in self.exp.arms if a.name not in skipped]
        needs = {a.name: arm_pool_need(a, workload_bytes(self._workload(a), a)) for a in arms}
        out: dict[str, str] = {}
        plan = pool_plan(self.exp, self.workload, arms, self.workloads)
        for (size, node), pages in global_first(plan):
            try:
                control.ensure_free(size_kb_from_name(size), pages, node)
            except PoolError as exc:
                for name, need in needs.items():
                    if (size, node) in need:
                        out[name] = exc.message
        return out

    def _unit_pools(self, unit: list[TrialSpec], control: HostControl
                    ) -> tuple[str | None, dict[str, Any]]:
        """Before each unit, the pages its arms need free again: another user may have taken
        some since the last one (a database that started), so a pool is grown on top of what
        is held now, tried POOL_ATTEMPTS times. Returns the reason when the pages cannot be
        had, and per pool the pages others held (for the trials' monitors)."""
        plan = pool_plan(self.exp, self.workload, [self._arm(t.arm) for t in unit],
                         self.workloads)
        held: dict[str, Any] = {}
        for (size, node), pages in global_first(plan):
            last: PoolError | None = None
            for attempt in range(POOL_ATTEMPTS):
                try:
                    counts = control.ensure_free(size_kb_from_name(size), pages, node)
                    if counts.held:
                        held[size if node is None else f"{size}@{node}"] = {
                            "held_by_others": counts.held, "needed": pages}
                    last = None
                    break
                except PoolError as exc:
                    last = exc
                    if attempt + 1 < POOL_ATTEMPTS:
                        time.sleep(self.pool_retry_s)
            if last is not None:
                where = f" on node {node}" if node is not None else ""
                return (f"the {size} pool{where} could not give this trial its {pages} pages "
                        f"({POOL_ATTEMPTS} attempts): {last.message}{holders_now(self.paths)}"), held
        return None, held

    def _pool_failed(self, run_id: int, unit: list[TrialSpec], why: str
                     ) -> list[tuple[TrialSpec, str, float | None]]:
        """Every trial of a unit whose pool pages could not be had, failed with that reason
        (cause "pool": retried on resume)."""
        now = time.time()
        trials = [self.trials.record(run_id, spec, arm, None, why, {}, now, now,
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
        why, held = self._unit_pools(unit, control)
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
        trials = [self.trials.record(run_id, spec, self._arm(spec.arm), o.result, o.error,
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


class ArmTrials:
    """The trials of a run's arms: each arm's workload run natively or in its guests inside a
    trial scope, and its outcomes as the store's trials with their evidence checks.
    `host`: inspect_host() at the run's start; `specs`: each guest arm's guest spec."""

    def __init__(self, exp: Experiment, workload: Workload, target: Target, *,
                 host: dict[str, Any], specs: Mapping[str, VmSpec], paths: HostPaths = REAL,
                 workloads: Mapping[str, Workload] | None = None) -> None:
        self.exp = exp
        self.workload = workload
        self.target = target
        self.host = host
        self.specs = specs
        self.paths = paths
        self.workloads = dict(workloads or {})  # per arm, where a scenario sets its own

    def outcomes(self, arms: list[Arm], block: int = 0) -> list[list[GuestOutcome]]:
        """Each arm's outcomes: one arm alone (paired), every arm of a block in one process
        (interleaved), or every arm of a block at the same time, each in a thread (duet).
        An interleaved block's windows and request seeds are drawn from the run's seed and
        the block, so a run repeats them."""
        if self.exp.design == "interleaved":
            return self._interleaved(arms, random.Random(f"{self.exp.seed}:{block}"))
        if len(arms) == 1:
            return [self._execute(arms[0])]
        results: list[list[GuestOutcome]] = [[] for _ in arms]

        def work(i: int) -> None:
            results[i] = self._execute(arms[i], duet=True)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arms))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def _wants_folios(self, arm: Arm) -> bool:
        """Sample folio sizes (pagemap; some CPU during the measured phase) only where smaps
        cannot tell and the workload does not count them itself: an mthp or collapse arm, or
        any native arm while a size below the PMD's is not `never` (its 4 KiB or THP memory
        could get mTHP folios)."""
        declared = kind_of(self._workload(arm))
        if arm.vm is not None or (declared is not None and declared.counts_own_folios):
            return False  # the workload counts its own buffer's folios, race-free, after setup
        if arm.mthp_kb or arm.backing == "thp-collapse":
            return True
        anon, _ = arm_thp_knobs(arm, self.host)
        return any(mode != "never" for kb, mode in anon.items() if kb != PMD_KB)

    def _workload(self, arm: Arm) -> Workload:
        return self.workloads.get(arm.name, self.workload)

    def _execute(self, arm: Arm, duet: bool = False) -> list[GuestOutcome]:
        """Run the workload for one arm, natively or in the arm's guests, inside one trial
        scope (its processes recorded, sampled, and killed if they outlive the trial). Never
        raises: a failure becomes a failed outcome with its cause."""
        names = arm.targets() if arm.vm else [self.target.name]
        try:
            with TrialScope(f"arm {arm.name}", folios=self._wants_folios(arm)) as scope:
                outs = (run_guest_trial(arm, self._workload(arm), self.specs[arm.name])
                        if arm.vm is not None else [self._native(arm, duet)])
        except HugelabError as exc:
            return [GuestOutcome(n, None, exc.message, cause=exc.cause) for n in names]
        except Exception as exc:  # noqa: BLE001 - a bug must fail the trial, not the run
            return [GuestOutcome(n, None, internal_error(exc), cause="environment")
                    for n in names]
        for o in outs:
            if arm.vm is None:
                o.evidence["tree"] = {**scope.tree, "where": "host"}
                if scope.folios:  # sampled (a workload's own census needs no sampler)
                    o.evidence["folios"] = scope.folios
            elif scope.tree.get("samples"):
                o.monitors["host_tree"] = scope.tree  # host-side clients of a guest server
            if scope.leftovers_killed:
                o.monitors["leftovers_killed"] = scope.leftovers_killed
        return outs

    def _interleaved(self, arms: list[Arm], rng: random.Random) -> list[list[GuestOutcome]]:
        """Every arm of a block at once, measured in alternating windows (design 'interleaved'):
        one process holding every arm's buffer, or every arm's server; one outcome per arm,
        with its buffer's or its server's own evidence. Never raises."""
        name = self.target.name
        try:
            with TrialScope("interleaved block") as scope:
                if is_server(self.workload):  # every arm's server up, windows alternated
                    results = self._servers(arms, rng)
                else:
                    results = self.workload.run_interleaved(  # type: ignore[attr-defined]
                        self.target, [a.backing for a in arms])
        except HugelabError as exc:
            return [[GuestOutcome(name, None, exc.message, cause=exc.cause)] for _ in arms]
        except Exception as exc:  # noqa: BLE001 - a bug must fail the trial, not the run
            return [[GuestOutcome(name, None, internal_error(exc), cause="environment")]
                    for _ in arms]
        out = []
        for r in results:
            o = GuestOutcome(name, r, None)
            tree = {**scope.tree, "where": "host (every arm's server)"
                    if is_server(self.workload) else "host (one process: every arm's buffer)"}
            if "tree" in r.evidence:  # the arm's own server, judged alone
                o.monitors["host_tree"] = tree
            else:
                o.evidence["tree"] = tree
            o.monitors["perf"] = "not separable in an interleaved block"
            o.provenance["workload_s"] = r.metrics.get("duration_s")  # the measured phase
            if scope.leftovers_killed:
                o.monitors["leftovers_killed"] = scope.leftovers_killed
            out.append([o])
        return out

    def _servers(self, arms: list[Arm], rng: random.Random) -> list[WorkloadResult]:
        """Interleaved servers, started in the block's (random) order, so no arm's server is
        always the first; the windows' effects are against the baseline's."""
        ref = next((i for i, a in enumerate(arms) if a.name == self.exp.baseline), 0)
        return serve(self.target, [(self._workload(a), a.backing)  # type: ignore[misc]
                                   for a in arms], rng=rng, reference=ref)

    def _native(self, arm: Arm, duet: bool) -> GuestOutcome:
        try:
            outcome = GuestOutcome(self.target.name,
                                   self._workload(arm).run(self.target, arm.backing),
                                   None)
        except HugelabError as exc:
            outcome = GuestOutcome(self.target.name, None, exc.message, cause=exc.cause)
        take = getattr(self.target, "take_counters", None)
        if duet:  # one perf-wrapped target serves every arm of the block: counts would mix
            outcome.monitors["perf"] = "not separable in a duet block"
        else:
            outcome.monitors["perf"] = take() if take else "not available"
        return outcome

    def _cell(self, arm: Arm) -> tuple[str, str]:
        """(host backing, guest backing) of an arm, for the report's host x guest grid."""
        if arm.vm is None:
            return arm.backing, "native"
        if arm.vm.page_size:
            return f"hugetlb-{arm.vm.page_size}", arm.backing
        if arm.vm.mthp:
            return f"mthp-{arm.vm.mthp}", arm.backing
        if arm.vm.backing == "memfd":
            return "shmem", arm.backing
        thp = parse_selected(read_text(self.paths.thp_enabled, "never") or "never")
        return ("4k" if thp == "never" else "thp"), arm.backing

    def record(self, run_id: int, spec: TrialSpec, arm: Arm, result: WorkloadResult | None,
               error: str | None, mon: dict[str, Any], started: float, ended: float,
               guest: GuestOutcome) -> Trial:
        """One target's outcome of a trial of `arm` as the store's trial: its provenance, and
        its evidence judged (flagged when it contradicts the arm)."""
        target = guest.target
        host_backing, guest_backing = self._cell(arm)
        prov = {"hugelab": __version__, "kernel": platform.release(), "accel": "native",
                "layer": arm.layer, "target": target, "backing": arm.backing,
                "host_backing": host_backing, "guest_backing": guest_backing,
                "thp": arm.thp, "thp_defrag": arm.thp_defrag, "design": self.exp.design,
                **({"levels": dict(arm.levels)} if arm.levels else {}), **guest.provenance,
                "write_id": write_id()}  # the store writes this trial once, however often sent
        if result is None:
            if guest.cause == PoolBusyError.cause and error and "held by other users" not in error:
                error += holders_now(self.paths)  # who took the pages, while they still hold them
            return Trial(run_id, spec.block, spec.position, spec.arm, "failed", None,
                         monitors=mon, provenance=prov, error=error, started=started,
                         ended=ended, target=target, cause=guest.cause)
        evidence = {**result.evidence, **guest.evidence}
        mon = {**mon, "costs": self._costs(arm, evidence, mon)}
        checks = self._checks(arm, evidence, target, host_backing) + host_state_check(mon)
        status, reason = combine(checks)
        evidence.update(check=status, reason=reason,
                        checks={c.layer: c.to_dict() for c in checks})
        flagged = status == CONTRADICTED
        return Trial(run_id, spec.block, spec.position, spec.arm, "flagged" if flagged else "ok",
                     result.value, result.primary, result.unit, result.better, result.metrics,
                     evidence, mon, {**prov, **result.info}, reason if flagged else None, None,
                     started, ended, target)

    def _costs(self, arm: Arm, evidence: dict[str, Any], mon: dict[str, Any]
               ) -> dict[str, float]:
        """The trial's cost record (hugelab.trial.costs): its tree's memory, the pool pages
        held for the arm, the host's background counters and the application's own figures."""
        need = arm_pool_need(arm, workload_bytes(self._workload(arm), arm))
        held_kb = sum(pages * size_kb_from_name(size) for (size, _n), pages in need.items())
        return costs.record(evidence.get("tree"), mon, pool_held_kb=held_kb,
                            host_tree=mon.get("host_tree"), qemu=evidence.get("qemu"),
                            app=evidence.get("app_costs"), guest=arm.vm is not None)

    def _checks(self, arm: Arm, evidence: dict[str, Any], target: str,
                host_backing: str) -> list[Check]:
        """The evidence rules (hugelab.trial.evidence) for every layer this arm sets."""
        where = "host" if arm.vm is None else f"guest {target}"
        checks = [check_workload(arm.backing, evidence, self.exp.thp_min_fraction, where)]
        if arm.process_thp:
            checks.append(check_process(arm.process_thp, evidence.get("tree") or {}, where))
        declared = kind_of(self._workload(arm))  # the application's own switch, by its kind
        app = app_check(evidence, declared.judge if declared else None)
        if app is not None:
            checks.append(app)
        if arm.vm is not None:
            host_thp = "never" if host_backing == "4k" else "always/madvise"
            checks.append(check_vm(arm.vm.backing, arm.vm.page_size, evidence.get("qemu") or {},
                                   host_thp, mthp=arm.vm.mthp,
                                   min_fraction=self.exp.thp_min_fraction))
        return checks



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


def host_state_check(mon: dict[str, Any]) -> list[Check]:
    """A fragmented trial whose measured fragmentation missed its target is contradicted: it
    did not run on the host it asked for (the `host` layer of its evidence)."""
    state = mon.get("host_state") or {}
    if state.get("state") != "fragmented":
        return []
    if state.get("missed"):
        return [Check(CONTRADICTED, f"host: {state['missed']}", layer="host")]
    return [Check(VERIFIED, f"host: fragmented to {state.get('unusable', 0):.2f} of free memory "
                  f"unusable for 2 MiB pages (target {state.get('target')})", layer="host")]


def holders_now(paths: HostPaths) -> str:
    """Who holds pool pages now, as lines to add to a trial's error."""
    entries = holders.pool_holders(host_pools(paths), holders.scan(paths))
    return "".join(f"\n  {holders.describe(e, limit=8)}" for e in entries)


def iter_arm_values(store: SqlStore, run_id: int) -> Iterator[tuple[str, int, float]]:
    """(arm, block, value) of trials that count: status ok, value present."""
    for block, _pos, arm, _target, status, value in store.values(run_id):
        if status == "ok" and value is not None:
            yield arm, block, value
