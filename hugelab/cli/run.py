"""`hugelab run` and `hugelab show`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from hugelab.cli.output import stacked
from hugelab.errors import ExperimentError, UsageError
from hugelab.experiment import Experiment, default_experiment, load_experiment
from hugelab.host.control import require_root
from hugelab.host.inspect import hardware_counters
from hugelab.store import SqlStore
from hugelab.store.locate import open_store, shown
from hugelab.store.outage import open_waiting, riding
from hugelab.trial.native import NativeTarget
from hugelab.workloads.base import Target

if TYPE_CHECKING:  # the runner and the stopper import scipy: only `run` needs them, not `show`
    from hugelab.runner import RunEvent
    from hugelab.stopping import SequentialStopper

AddOpt = Callable[[argparse.ArgumentParser], None]


def register(sub: argparse._SubParsersAction, add_json: AddOpt, add_store: AddOpt) -> None:
    p = sub.add_parser(
        "run", help="run an experiment (default: the built-in one) and summarise it",
        description="Applies each arm's host settings, runs trials in randomized blocks, checks "
        "each trial's evidence, commits every trial to the store and restores the host. The "
        "same experiment on the same store resumes. Exits 1 when an arm has no ok trial.")
    p.add_argument("experiment", nargs="?", type=Path,
                   help="experiment file (TOML); omitted: the built-in default experiment")
    add_store(p)
    add_json(p)
    p.add_argument("--blocks", type=int, metavar="N", help="override the file's number of blocks")
    p.add_argument("--repeats", type=int, metavar="R",
                   help="run it R times as one run; the report gives the effect across repeats "
                   "and their spread (tau), not one run's minutes (default: the file's, else 1)")
    p.add_argument("--repeat-pause", type=float, default=0.0, metavar="S",
                   help="with --repeats: wait S seconds between repeats (default 0)")
    p.add_argument("--dry-run", action="store_true",
                   help="change and run nothing: list cells, trials, host changes, guests, duration")
    p.add_argument("--budget", type=_budget, metavar="DURATION",
                   help="with --until-verdict: end within it (5m), looks planned from measured "
                   "blocks; with --dry-run: warn past the estimate, naming a cut")
    p.add_argument("--retry-failed", action="store_true",
                   help="on resume, rerun trials whose workload failed (outside failures: always)")
    p.add_argument("--until-verdict", action="store_true",
                   help="stop once every arm has a verdict (group-sequential looks, O'Brien-Fleming)")
    p.add_argument("--max-blocks", type=int, metavar="N",
                   help="with --until-verdict: the most blocks (default: the file's, >= 6 a look)")
    p.add_argument("--looks", type=_looks, default=None, metavar="N|auto",
                   help="with --until-verdict: N even looks, or auto (a look every few blocks)")
    p.add_argument("--alpha", type=float, default=0.05, metavar="A",
                   help="with --until-verdict: family-wise false-positive rate (0.05)")
    p.add_argument("--margin", type=_fraction, default=0.01, metavar="M",
                   help="with --until-verdict: equivalence margin, e.g. 1%% (default)")
    p.add_argument("--label", default="", metavar="NAME",
                   help="a run of its own: a host's, or a day's (report --experiment/--across)")
    p.add_argument("--wait-host", type=float, default=0.0, metavar="S",
                   help="wait S seconds for another hugelab on this host instead of refusing")
    p.add_argument("--store-outage", type=outage_arg, default=DEFAULT_OUTAGE_S, metavar="D",
                   help="how long a postgresql:// store may be away before the run stops "
                   "(default 5m); trials wait in a local spool")
    p.add_argument("--calibrate", action="store_true",
                   help="for a duet: run the baseline and its twin side by side, then apart, and "
                   "say what the duet can claim")
    p.set_defaults(func=cmd_run)

    s = sub.add_parser("show", help="list the runs in a store, or one run's trials")
    s.add_argument("run", nargs="?", type=int, help="run id: show its trials")
    add_store(s)
    add_json(s)
    s.set_defaults(func=cmd_show)


def _budget(text: str) -> float:
    from hugelab.planning.budget import parse_budget
    return parse_budget(text)


DEFAULT_OUTAGE_S = 300.0


def outage_arg(text: str) -> float:
    """A duration (90s, 5m, 1h; a bare number is seconds); 0 stops at the first loss."""
    from hugelab.planning.budget import parse_budget
    try:
        seconds = float(text)
    except ValueError:
        return parse_budget(text)
    if seconds < 0 or seconds != seconds:
        raise argparse.ArgumentTypeError(f"not a duration like 90s, 5m or 1h: {text!r}")
    return seconds


def _looks(text: str) -> int | None:
    """--looks: a number of equally spaced looks, or auto (None)."""
    if text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"not a number of looks (1 or more) or 'auto': {text!r}")
    return n


def _fraction(text: str) -> float:
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction or percentage: {text!r}") from None


def _load(args: argparse.Namespace) -> Experiment:
    exp = load_experiment(args.experiment) if args.experiment else default_experiment()
    blocks = args.max_blocks if args.until_verdict and args.max_blocks else args.blocks
    least = 6 * (args.looks or 5)  # auto: the budget 5 looks had, looked at more often
    if args.until_verdict and args.budget is not None and blocks is None:
        from hugelab.planning.budget import until_verdict_blocks
        blocks = until_verdict_blocks(exp, args.budget, args.dry_run)
    elif args.until_verdict and blocks is None and exp.blocks < least:
        blocks = least  # its own most: 6 blocks per look; it stops at a verdict
    if args.max_blocks and not args.until_verdict:
        raise UsageError("--max-blocks goes with --until-verdict")
    if blocks is not None:
        if blocks < 1:
            raise UsageError("the number of blocks must be at least 1")
        exp = Experiment(**{**exp.__dict__, "blocks": blocks})
    exp = _repeats(args, exp)
    if len(args.label) > 100 or not all(c.isprintable() for c in args.label):
        raise UsageError("--label must be at most 100 printable characters")
    if args.wait_host < 0:
        raise UsageError(f"--wait-host must be 0 or more seconds, got {args.wait_host:g}")
    return exp


def _repeats(args: argparse.Namespace, exp: Experiment) -> Experiment:
    if args.repeats is not None:
        if args.repeats < 1:
            raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
        exp = Experiment(**{**exp.__dict__, "repeats": args.repeats})
    if not args.repeat_pause >= 0:  # NaN too
        raise UsageError(f"--repeat-pause must be 0 or more seconds, got {args.repeat_pause:g}")
    if exp.repeats > 1 and args.until_verdict:
        raise UsageError("--until-verdict stops one run at a look; it does not combine with "
                         "repeats", hint="leave out --until-verdict, or use --repeats 1")
    if exp.repeats > 1 and args.calibrate:
        raise UsageError("--calibrate runs its own A/A runs: leave out --repeats")
    return exp


def _session(args: argparse.Namespace) -> Any:
    """The host session factory: the default, or one that waits for the host lock."""
    if not args.wait_host:
        return None
    from hugelab.recovery import run_session
    return lambda: run_session(lock_wait_s=args.wait_host)


def _more_blocks_hint(blocks: int, looks: int, max_given: bool) -> str:
    """What to add to a too-short --until-verdict run: the most blocks, or fewer looks."""
    hint = (f"{'raise --max-blocks to' if max_given else 'add --max-blocks'} {6 * looks} (the "
            f"most it may run: it stops at the first look with a verdict)")
    if blocks >= 6:
        hint += f", or --looks {blocks // 6} to look within {blocks} blocks"
    return hint


def _stopper(args: argparse.Namespace, exp: Experiment, store: SqlStore,
             started: float) -> SequentialStopper | None:
    """The sequential looks of --until-verdict; with --budget, on a clock started at
    `started` (time.monotonic(): the command's start)."""
    if not args.until_verdict:
        return None
    if args.looks is not None and exp.blocks < 6 * args.looks:
        raise UsageError(f"--until-verdict with {args.looks} looks needs at least "
                         f"{6 * args.looks} blocks, 6 per look (this run has {exp.blocks})",
                         hint=_more_blocks_hint(exp.blocks, args.looks, bool(args.max_blocks)))
    if exp.blocks < 6:
        raise UsageError(f"--until-verdict needs at least 6 blocks (this run has {exp.blocks})",
                         hint=_more_blocks_hint(exp.blocks, 1, bool(args.max_blocks)))
    from hugelab.planning.blockclock import BlockClock
    from hugelab.stopping import SequentialStopper
    clock = BlockClock(args.budget, start=started) if args.budget is not None else None
    return SequentialStopper(exp, store, looks=args.looks, alpha=args.alpha, margin=args.margin,
                             clock=clock)


def _build(exp: Experiment, path: Path | None, dry: bool = False) -> tuple[Any, dict[str, Any]]:
    """The experiment's workloads; for a dry run, built without building anything they need
    (a template cluster, a restored dump): hugelab.workloads.preview. An error in a workload
    key or an arm's app names the experiment file's line, as the parse's own errors do."""
    from hugelab.experiment.where import locate
    from hugelab.workloads.preview import previewing
    from hugelab.workloads.registry import build_for
    try:
        if dry:
            with previewing():
                return build_for(exp)
        return build_for(exp)
    except ExperimentError as exc:
        if path is None:
            raise
        raise locate(exc, path) from None


def _previewing(args: argparse.Namespace) -> bool:
    """A dry run: --dry-run, or a --budget without --until-verdict (which the dry run refuses,
    naming both)."""
    return bool(args.dry_run) or (args.budget is not None and not args.until_verdict)


def _dry_run_or_calibrate(args: argparse.Namespace, exp: Experiment, workload: Any,
                          per_arm: dict[str, Any]) -> int | None:
    """`--dry-run` (nothing runs) or `--calibrate` (a duet's A/A runs): its exit code; None
    for a plain run (root checked)."""
    if _previewing(args):
        from hugelab.cli import dryrun
        from hugelab.planning.domains import resolve_or_note
        from hugelab.planning.dryrun import plan
        dryrun.check_budget_args(args)
        exp, notes = resolve_or_note(exp)  # users' domains: their memory, as the runner does
        preview = plan(exp, workload, per_arm, args.store, args.budget, notes)
        preview["until_verdict"] = bool(args.until_verdict)
        dryrun.print_plan(preview, args.json)
        return 0
    if args.calibrate:
        from hugelab.cli import calibrate
        from hugelab.planning.calibration import experiments
        experiments(exp)  # a duet, or a clear error before root is asked for
        if args.until_verdict:
            raise UsageError("--calibrate runs the planned blocks: leave out --until-verdict")
    require_root("hugelab run")
    if args.calibrate:
        return calibrate.cmd(args, exp, lambda e, store, n: _run_quiet(e, store, args, n))
    return None


def _open_riding(args: argparse.Namespace, con: Console) -> SqlStore:
    """The run's store, waited for when a server store does not answer at first, and riding
    out its later outages (both for --store-outage)."""
    def say(msg: str) -> None:
        con.print(f"[yellow]store:[/] {escape(msg)}")
    opened = open_waiting(lambda: open_store(args.store), args.store_outage, say)
    return riding(opened, args.store_outage, say)


def _progress(bar: Progress, task: TaskID, stopper: SequentialStopper | None
              ) -> Callable[[RunEvent], None]:
    """The run's events on its progress bar; a stop says where a budget cut it short."""
    def progress(e: RunEvent) -> None:
        if e.kind == "skip":
            bar.console.print(f"[yellow]skipping arm[/] {escape(e.message)}")
        elif e.kind == "start":
            bar.update(task, total=e.total)
        elif e.kind == "trial" and e.trial:
            last = f"{e.trial.arm}: {e.status}"
            if e.value is not None:
                last += f" {e.value:.4g}"
            bar.update(task, completed=e.done, last=last)
        elif e.kind == "repeat":
            bar.console.print(escape(e.message))
        elif e.kind == "stop":
            cut = stopper.cut if stopper is not None else None
            said = e.message + (f" ({cut['reason']})" if cut else "")
            bar.console.print(f"[green]{escape(said)}[/]")
    return progress


def cmd_run(args: argparse.Namespace) -> int:
    started = time.monotonic()  # a --budget counts from here: the workloads' builds are in it
    exp = _load(args)
    workload, per_arm = _build(exp, args.experiment, _previewing(args))
    other = _dry_run_or_calibrate(args, exp, workload, per_arm)
    if other is not None:
        return other
    from hugelab.report.summary import run_summary
    from hugelab.runner import Runner

    con = Console(stderr=True)
    with _open_riding(args, con) as store:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[last]}", markup=False), TimeRemainingColumn(),
                      console=con, transient=False) as bar:
            task = bar.add_task(exp.name, total=None, last="")
            stopper = _stopper(args, exp, store, started)
            outcome = Runner(exp, store, workload, target=_target(),
                             progress=_progress(bar, task, stopper),
                             stopper=stopper, retry_failed=args.retry_failed,
                             workloads=per_arm, label=args.label, session=_session(args),
                             repeat_pause_s=args.repeat_pause).run()
            if stopper is not None:
                store.set_run_sequential(outcome.run_id, stopper.describe())
        summary = run_summary(store, exp, outcome.run_id, outcome.skipped, outcome.pool_holders)
    summary = replace(summary, sequential=stopper.describe() if stopper is not None else None,
                      store=shown(args.store), resumed=outcome.resumed,
                      executed=outcome.executed)
    if args.json:
        from hugelab.cli.output import print_json
        print_json(summary.to_json())
    else:
        from hugelab.cli import runsummary
        runsummary.render(exp, summary, Console())
        Console().print("host settings restored. Full report with tails, the classic table, "
                        f"evidence and plots: hugelab report --store {shown(args.store)} --html report.html")
    empty = summary.without_ok()
    if empty:
        Console(stderr=True).print(f"[red]error:[/] no ok trial for arm(s) {escape(', '.join(empty))}: "
                                   "nothing to compare them with (see the reasons above)")
        return 1
    return 0


def _run_quiet(exp: Experiment, store: SqlStore, args: argparse.Namespace, blocks: int
               ) -> tuple[int, list[dict[str, Any]]]:
    """The run of `exp` (resumed) up to `blocks` blocks, with a progress bar: (run id, its
    comparisons)."""
    from hugelab.runner import Runner

    workload, per_arm = _build(exp, args.experiment)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True)) as bar:
        task = bar.add_task(escape(exp.name), total=None)

        def progress(e: RunEvent) -> None:
            if e.kind == "start":
                bar.update(task, total=e.total)
            elif e.kind == "trial":
                bar.update(task, completed=e.done)

        out = Runner(exp, store, workload, target=_target(), progress=progress,
                     retry_failed=args.retry_failed, workloads=per_arm,
                     stopper=lambda _run, done, _skipped: done >= blocks,
                     label=args.label, session=_session(args)).run()
    return out.run_id, _verdicts(store, out.run_id).get("comparisons", [])


def _target() -> Target:
    """Native, under `perf stat` when this host exposes a CPU PMU (hardware counters)."""
    if hardware_counters()["available"]:
        from hugelab.trial.perfstat import PerfTarget
        return PerfTarget(NativeTarget())
    return NativeTarget()


def _verdicts(store: SqlStore, run_id: int) -> dict[str, Any]:
    """The paired analysis `hugelab report` does, for a duet's calibration runs."""
    from hugelab.report.analysis import Options, analyse
    from hugelab.report.runload import load_run
    return analyse(load_run(store, run_id), Options()).json()


def _tries(tr: dict[str, Any]) -> str:
    return str(tr.get("attempts") or 1)


def _note(tr: dict[str, Any]) -> str:
    """The trial's error, or its evidence verdict with the reason of each layer."""
    ev = tr["evidence"] or {}
    text = tr["error"] or tr["flag"] or (f"{ev.get('check', '')}: {ev['reason']}"
                                         if ev.get("reason") else str(ev.get("check", "")))
    earlier = (tr["provenance"] or {}).get("earlier_attempts") or []
    if earlier:
        first = (earlier[-1].get("error") or "").strip().splitlines()
        text += f" [retried; before: {first[0] if first else 'no error recorded'}]"
    return text.strip().splitlines()[0] if text.strip() else ""


def cmd_show(args: argparse.Namespace) -> int:
    with open_store(args.store, must_exist=True) as store:
        if args.run is None:
            data: Any = store.runs()
        else:
            run = store.run(args.run)
            data = {"run": run, "trials": list(store.trials(run["id"]))}
    if args.json:
        from hugelab.cli.output import print_json
        print_json(data)
        return 0
    con = Console()
    if args.run is None:
        t = Table(title=f"runs in {shown(args.store)}")
        for col in ("id", "name", "status", "trials", "flagged", "failed", "skipped arms"):
            t.add_column(col)
        for r in data:
            t.add_row(str(r["id"]), Text(r["name"]), r["status"], str(r["trials"]), str(r["flagged"]),
                      str(r["failed"]), Text(", ".join(r["skipped"]) or "-"))
        con.print(t)
        return 0
    from hugelab.report.table import num  # the report's numbers: 17,670, not 1.767e+04
    unit = next((tr["unit"] for tr in data["trials"] if tr["unit"]), "")
    t = Table(title=escape(f"run {args.run}: {data['run']['name']} (values in {unit or '-'})"),
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for col in ("block", "arm", "target", "status", "tries", "value"):
        t.add_column(col, no_wrap=True, justify="right" if col in ("block", "value") else "left")
    t.add_column("evidence / error", overflow="fold", ratio=1)
    names = stacked([tr["arm"] for tr in data["trials"]], con.width, 100)  # evidence's room
    for tr in data["trials"]:
        t.add_row(str(tr["block"]), Text(names[tr["arm"]]), tr["target"], tr["status"], _tries(tr),
                  num(tr["value"]), Text(_note(tr)))
    con.print(t)
    return 0
