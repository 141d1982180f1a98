"""`hugelab inspect`, `hugelab host set|restore`, `hugelab recover`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from hugelab.cli.output import action
from hugelab.errors import UsageError
from hugelab.host.control import (
    THP_DEFRAG,
    THP_ENABLED,
    HostControl,
    require_root,
    size_kb_from_name,
)
from hugelab.host.inspect import inspect_host
from hugelab.host.journal import Journal, locked, state_dir
from hugelab.host.paths import HostPaths
from hugelab.recovery import recover

MANUAL_JOURNAL = "host-set.json"


def register(sub: argparse._SubParsersAction, add_json: Callable[[argparse.ArgumentParser], None]) -> None:
    p = action(sub, cmd_inspect, "inspect",
               help="show this host's huge-page state (read-only, no root)",
               description="Kernel and CPU support, THP modes, hugetlb pools per size and "
               "NUMA node and who holds their pages (processes, SysV segments, "
               "hugetlbfs files; other users' processes only as root), hugetlbfs "
               "mounts, meminfo, fragmentation — with warnings.")
    add_json(p)
    p.add_argument("--sysfs-root", type=Path, default=Path("/"), help=argparse.SUPPRESS)

    host = sub.add_parser("host", help="change or restore host huge-page settings (root)")
    hsub = host.add_subparsers(dest="host_command", metavar="ACTION", required=True)
    s = action(hsub, cmd_host_set, "set", help="set THP modes, reserve pools, mount hugetlbfs",
               description="Changes are journaled first; `hugelab host restore` puts back "
               "exactly what was there.")
    s.add_argument("--thp", choices=THP_ENABLED, help="THP 'enabled' mode")
    s.add_argument("--defrag", choices=THP_DEFRAG, help="THP 'defrag' mode")
    s.add_argument("--pool", action="append", default=[], metavar="SIZE=PAGES[@NODE]",
                   help="reserve a hugetlb pool, e.g. 2M=512 or 1G=4@0 (repeatable)")
    s.add_argument("--mount", action="append", default=[], metavar="SIZE[=DIR]",
                   help="mount hugetlbfs with this page size (default dir /dev/hugepages-SIZE)")
    s.add_argument("--compact-deadline", type=float, default=10.0, metavar="SECONDS",
                   help="how long to compact memory while a pool grows (default 10)")
    s.add_argument("--dry-run", action="store_true", help="print the equivalent shell commands")
    add_json(s)
    r = action(hsub, cmd_host_restore, "restore",
               help="undo every `hugelab host set` since the last restore")
    add_json(r)

    rec = action(sub, cmd_recover, "recover",
                 help="clean up after a killed run (workloads, QEMU, THP, pools)",
                 description="After a hugelab that was killed (SIGKILL, power loss): kills "
                 "the workload processes and guests of its trials, removes their "
                 "temporary files and its SSH connections' directories (hugelab-ssh-*, "
                 "their master connections stopped), then replays its journal (THP modes, pools, mounts). "
                 "Waits a few seconds for a dying hugelab to let go of the lock. Safe to "
                 "run any time; every `hugelab run` does the same before it starts.")
    add_json(rec)
    rec.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                     help="how long to wait for another hugelab that holds this host's lock (10; "
                     "a fleet whose hosts share one kernel waits for the others' trials)")


def _print_json(data: Any) -> None:
    from hugelab.cli.output import print_json
    print_json(data)


def cmd_inspect(args: argparse.Namespace) -> int:
    info = inspect_host(HostPaths(args.sysfs_root))
    if args.json:
        _print_json(info)
        return 0
    con = Console()
    cpu, thp, mem = info["cpu"], info["thp"], info["meminfo_kb"]
    con.print(f"[bold]kernel[/] {info['kernel']} ({info['machine']}), {cpu['cpus']} CPUs, "
              f"pse={'yes' if cpu['pse'] else 'no'} pdpe1gb={'yes' if cpu['pdpe1gb'] else 'no'}")
    if thp.get("supported"):
        fixed = f" (cmdline: transparent_hugepage={thp['cmdline']})" if thp.get("cmdline") else ""
        con.print(f"[bold]THP[/] enabled={thp['enabled']} defrag={thp['defrag']}{fixed}; "
                  f"khugepaged defrag={thp['khugepaged'].get('defrag')} "
                  f"pages_collapsed={thp['khugepaged'].get('pages_collapsed')} "
                  f"max_ptes_none={thp['khugepaged'].get('max_ptes_none', 'n/a')}; "
                  f"shrink_underused={_on_off(thp.get('shrink_underused'))}")
    else:
        con.print("[bold]THP[/] not supported")
    con.print(mthp_line(info))
    t = Table(title="hugetlb pools")
    for col in ("size", "node", "total", "free", "reserved", "surplus"):
        t.add_column(col, justify="right")
    for p in info["pools"]:
        t.add_row(p["size"], "all", str(p["nr"]), str(p["free"]), str(p["resv"]), str(p["surplus"]))
        for n in p["nodes"] if len(p["nodes"]) > 1 else []:
            t.add_row("", str(n["node"]), str(n["nr"]), str(n["free"]), "", str(n["surplus"]))
    con.print(t)
    for line in holder_lines(info):
        con.print(line, highlight=False, markup=False)
    mounts = ", ".join(f"{m['target']} ({m['pagesize']})" for m in info["hugetlbfs_mounts"])
    con.print(f"[bold]hugetlbfs[/] {mounts or 'none mounted'}")
    gib = 1048576
    con.print(f"[bold]memory[/] total {mem.get('MemTotal', 0) / gib:.1f} GiB, available "
              f"{mem.get('MemAvailable', 0) / gib:.1f} GiB, AnonHugePages "
              f"{mem.get('AnonHugePages', 0) / 1024:.0f} MiB, Hugetlb {mem.get('Hugetlb', 0) / 1024:.0f} MiB; "
              f"{info['fragmentation']['free_in_2M_blocks_pct']}% of free memory in 2 MiB+ blocks")
    cg = info["memcg"]
    con.print("[bold]memory cgroups[/] " + (f"v{cg['version']} at {cg['root']} (an arm's "
              f"memory_limit writes {cg['limit_file']})" if cg["supported"] else cg["reason"]),
              highlight=False)
    hw = info["hardware_counters"]
    con.print("[bold]hardware counters[/] " + (f"available ({hw['pmu']} PMU, perf stat)"
                                                if hw["available"] else hw["reason"]))
    for w in info["warnings"]:
        con.print(f"[yellow]warning:[/] {w}")
    return 0


def _on_off(value: bool | None) -> str:
    return "n/a (Linux 6.12+)" if value is None else "on" if value else "off"


def holder_lines(info: dict[str, Any]) -> list[str]:
    """Who holds each pool's pages, one line per holder (pure)."""
    out = []
    for e in info.get("pool_holders") or []:
        out.append(f"{e['size']} pool: {e['held']} of {e['of']} pages held by other users")
        out += [f"  {h}" for h in e["holders"]]
        if e["reserved"]:
            out.append(f"  {e['reserved']} of them reserved (mapped, not yet touched)")
        if e["unaccounted"]:
            out.append(f"  {e['unaccounted']} of them in use that no process maps (SysV "
                       "segments no process attaches, or files in hugetlbfs)")
    return out


def mthp_line(info: dict[str, Any]) -> str:
    """The sizes multi-size THP offers and their modes, on one line (pure)."""
    mthp, thp = info.get("mthp") or {}, info.get("thp") or {}
    if not mthp.get("supported"):
        return f"[bold]multi-size THP[/] {mthp.get('reason', 'not supported')}"
    anon = ", ".join(f"{s['size']} {s['enabled']}" for s in mthp["sizes"] if s["enabled"])
    shmem = ", ".join(f"{s['size']} {s['shmem_enabled']}" for s in mthp["sizes"]
                      if s["shmem_enabled"])
    line = f"[bold]multi-size THP[/] anon: {anon or 'none'}"
    if thp.get("shmem_enabled"):
        line += f"; shmem_enabled={thp['shmem_enabled']}"
    return line + (f" (per size: {shmem})" if shmem else "")


def parse_pool_arg(text: str) -> tuple[int, int, int | None]:
    m = re.fullmatch(r"(2M|1G)=(\d+)(?:@(\d+))?", text.strip())
    if not m:
        raise UsageError(f"bad --pool '{text}'", hint="write SIZE=PAGES[@NODE], e.g. 2M=512 or 1G=2@0")
    return size_kb_from_name(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None


def parse_mount_arg(text: str) -> tuple[int, Path]:
    size, _, target = text.partition("=")
    if size not in ("2M", "1G"):
        raise UsageError(f"bad --mount '{text}'", hint="write SIZE[=DIR], e.g. 2M or 1G=/mnt/huge1G")
    path = Path(target) if target else Path(f"/dev/hugepages-{size}")
    if not path.is_absolute():
        raise UsageError(f"--mount directory must be absolute: {path}")
    return size_kb_from_name(size), path


def cmd_host_set(args: argparse.Namespace) -> int:
    pools = [parse_pool_arg(p) for p in args.pool]
    mounts = [parse_mount_arg(m) for m in args.mount]
    if not (args.thp or args.defrag or pools or mounts):
        raise UsageError("nothing to set", hint="give --thp, --defrag, --pool or --mount")
    if not args.dry_run:
        require_root("hugelab host set")
    jpath = state_dir() / MANUAL_JOURNAL
    if args.dry_run:
        control = HostControl(journal=Journal(jpath), dry_run=True)
        _apply(control, args, pools, mounts)
        if args.json:
            _print_json({"commands": control.commands})
        else:
            print("\n".join(control.commands))
        return 0
    with locked(jpath):
        journal = Journal.load(jpath) or Journal(jpath)
        control = HostControl(journal=journal, compact_deadline_s=args.compact_deadline)
        # Validate every pool before changing anything: no half-applied change.
        for size_kb, pages, node in pools:
            control.check_pool_fits(size_kb, pages, node)
        _apply(control, args, pools, mounts)
    if args.json:
        _print_json({"changed": journal.entries})
    else:
        print(f"done; the journal holds {len(journal)} change(s) since the last restore "
              "(this command's and earlier ones'). Undo them all with: hugelab host restore")
    return 0


def _apply(control: HostControl, args: argparse.Namespace,
           pools: list[tuple[int, int, int | None]], mounts: list[tuple[int, Path]]) -> None:
    n = len(control.journal)
    try:
        control.set_thp(args.thp, args.defrag)
        for size_kb, pages, node in pools:
            control.reserve_pool(size_kb, pages, node)
        for size_kb, path in mounts:
            control.mount_hugetlbfs(size_kb, path)
    except BaseException:
        # Undo only what this invocation did, keep earlier `host set` changes.
        if not control.dry_run:
            from hugelab.host.control import restore_journal
            partial = Journal(control.journal.path, entries=control.journal.entries[n:])
            control.journal.entries = control.journal.entries[:n]
            restore_journal(partial, control.paths)
            if control.journal.entries:
                control.journal.record(control.journal.entries.pop())
            else:
                control.journal.clear()
        raise


def cmd_host_restore(args: argparse.Namespace) -> int:
    require_root("hugelab host restore")
    jpath = state_dir() / MANUAL_JOURNAL
    from hugelab.host.control import restore_journal
    with locked(jpath):
        journal = Journal.load(jpath)
        done = restore_journal(journal) if journal else []
    if args.json:
        _print_json({"restored": done})
    else:
        print("\n".join(done) if done else "nothing to restore")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    require_root("hugelab recover")
    if args.wait < 0:
        raise UsageError(f"--wait must be 0 or more seconds, got {args.wait:g}")
    done = recover(lock_wait_s=args.wait)
    if args.json:
        _print_json({"restored": done})
    else:
        print("\n".join(done) if done else "nothing to recover: the host is as hugelab found it")
    return 0
