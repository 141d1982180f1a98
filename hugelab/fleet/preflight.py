"""Fleet preflight: can this host run every arm of the experiment? Decided before anything
changes, so a host that cannot is selected out of the fleet run with the reason.

Runs on each host (`python -m hugelab.fleet.preflight EXPERIMENT`, from the fleet playbook) and
prints one JSON object: the plan `hugelab run EXPERIMENT --dry-run --json` prints there, and
`reasons`, arm (cell) -> why this host cannot run it. Empty `reasons`: the host takes part.

What the dry run already tells (its cells' `skipped`: no pdpe1gb for 1 GiB pages, a page size
or THP the kernel lacks, a multi-size THP size it does not offer) is taken as it is. What it
does not tell is checked here: a hugetlb pool larger than the memory this host can give it
(MemAvailable plus the pool's pages already reserved, less a reserve kept for the host's own
work), and an arm that insists on KVM (`accel = "kvm"`) where /dev/kvm cannot be opened. A pool
that fits in free memory may still fail to grow (fragmentation, above all for 1 GiB pages):
`hugelab run` reports that arm as skipped at run time, so the check here only catches what is
certain to fail.

The decision (`unrunnable`) is a pure function over plain data; `main` gathers the data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hugelab.proc import run
from hugelab.units import amount

RESERVE_MIB = 256  # memory a pool may not take: the host's own processes need some
KIB_PER_GIB = 1024 * 1024


@dataclass(frozen=True)
class ArmNeeds:
    """What one arm (cell) needs of a host beyond what the dry run checks."""

    name: str
    pool_sizes: frozenset[str]  # "2M", "1G": host hugetlb pools its trials use
    needs_kvm: bool = False  # accel = "kvm": refuses to fall back to TCG


def arm_needs(exp: Any) -> list[ArmNeeds]:
    """ArmNeeds of every arm (cell) of an Experiment."""
    out = []
    for arm in exp.arms:
        sizes = {p.size for p in arm.pools}
        if arm.vm is None and arm.hugetlb_size:
            sizes.add(arm.hugetlb_size)
        if arm.vm is not None and arm.vm.page_size:
            sizes.add(arm.vm.page_size)
        out.append(ArmNeeds(arm.name, frozenset(sizes),
                            arm.vm is not None and arm.vm.accel == "kvm"))
    return out


def _free_for_a_run(pool: Mapping[str, Any]) -> int:
    """Pages of a pool (inspect's entry) a run can take without growing it: free and not
    reserved; an entry without counters (an older hugelab's) counts all its pages."""
    if pool.get("free") is None:
        return int(pool.get("nr") or 0)
    return max(int(pool["free"]) - int(pool.get("resv") or 0), 0)


def pool_shortfalls(plan: Mapping[str, Any], host: Mapping[str, Any],
                    reserve_kb: int) -> dict[str, str]:
    """Pool size -> why this host cannot give the plan's pools of that size: every pool the
    run reserves at once must fit in MemAvailable (plus pages of those pools free for it:
    pages other users hold or have reserved are not), less `reserve_kb`."""
    size_kb = {p["size"]: int(p["size_kb"]) for p in host.get("pools", [])}
    held_kb = {p["size"]: _free_for_a_run(p) * int(p["size_kb"]) for p in host.get("pools", [])}
    need_kb: dict[str, int] = {}
    for pool in plan.get("host_changes", {}).get("pools", []):
        kb = size_kb.get(pool["size"])
        if kb is None:
            continue  # a size the kernel lacks: the dry run marks its arms skipped
        need_kb[pool["size"]] = need_kb.get(pool["size"], 0) + int(pool["pages"]) * kb
    extra = {s: max(0, kb - held_kb.get(s, 0)) for s, kb in need_kb.items()}
    available = int(host.get("meminfo_kb", {}).get("MemAvailable", 0)) - reserve_kb
    if sum(extra.values()) <= available:
        return {}
    total = amount(sum(extra.values()))
    return {s: f"needs {need_kb[s] // size_kb[s]} x {s} pages ({amount(need_kb[s])}): the "
               f"run's pools need {total} more than is reserved now, and this host can give "
               f"{amount(max(available, 0))} (MemAvailable less {amount(reserve_kb)} kept "
               "for the host)"
            for s in sorted(extra) if extra[s]}


def unrunnable(plan: Mapping[str, Any], host: Mapping[str, Any], arms: Sequence[ArmNeeds], *,
               kvm_problem: str | None = None, reserve_kb: int = RESERVE_MIB * 1024
               ) -> dict[str, str]:
    """Arm (cell) -> why this host cannot run it; empty when it can run every arm.

    `plan`: `hugelab run --dry-run --json`'s output on this host; `host`: `hugelab inspect
    --json`'s; `kvm_problem`: why /dev/kvm cannot be used here (None: it can)."""
    out: dict[str, str] = {}
    for cell in plan.get("cells", []):
        if cell.get("skipped"):
            out[cell["name"]] = str(cell["skipped"])
    short = pool_shortfalls(plan, host, reserve_kb)
    for arm in arms:
        if arm.name in out:
            continue
        sizes = sorted(arm.pool_sizes & short.keys())
        if sizes:
            out[arm.name] = "; ".join(f"its {s} pool {short[s]}" for s in sizes)
        elif arm.needs_kvm and kvm_problem:
            out[arm.name] = f"accel = \"kvm\" and KVM is not usable here ({kvm_problem})"
    return out


def kvm_problem(dev: str = "/dev/kvm") -> str | None:
    """None when `dev` opens read-write, else why not (the guests' own first check)."""
    from hugelab.vm.own.accel import kvm_openable
    return kvm_openable(dev)


def dry_run_plan(experiment: Path) -> dict[str, Any]:
    """`hugelab run EXPERIMENT --dry-run --json` of this Python's hugelab, parsed."""
    argv = [sys.executable, "-m", "hugelab.cli", "run", str(experiment), "--dry-run", "--json"]
    cp = run(argv, check=False)
    if cp.returncode != 0:
        raise SystemExit(f"preflight: `hugelab run --dry-run` failed (exit {cp.returncode}): "
                         f"{cp.stderr.strip() or cp.stdout.strip()}")
    return dict(json.loads(cp.stdout))


def main(argv: Sequence[str] | None = None) -> int:
    from hugelab.experiment import load_experiment
    from hugelab.host.inspect import inspect_host

    p = argparse.ArgumentParser(prog="python -m hugelab.fleet.preflight",
                                description="Can this host run every arm of EXPERIMENT? "
                                "Prints JSON: the dry-run plan and, per arm it cannot run, why.")
    p.add_argument("experiment", type=Path)
    p.add_argument("--reserve-mib", type=int, default=RESERVE_MIB,
                   help=f"memory hugetlb pools may not take from this host ({RESERVE_MIB})")
    args = p.parse_args(argv)
    plan = dry_run_plan(args.experiment)
    host = inspect_host()
    arms = arm_needs(load_experiment(args.experiment))
    kvm = kvm_problem() if any(a.needs_kvm for a in arms) else None
    reasons = unrunnable(plan, host, arms, kvm_problem=kvm, reserve_kb=args.reserve_mib * 1024)
    mem = host.get("meminfo_kb", {})
    print(json.dumps({"runnable": not reasons, "reasons": reasons, "plan": plan,
                      "host": {"kernel": host.get("kernel"), "cpu": host.get("cpu"),
                               "mem_total_kb": mem.get("MemTotal"),
                               "mem_available_kb": mem.get("MemAvailable")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
