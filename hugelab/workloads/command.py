"""Any user command as a workload.

`CommandWorkload` runs an argv list (never a shell) and takes its metric from the wall time
(default), from a JSON key path in its stdout, or from a regex with one group over its output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.workloads.base import Better, ExecResult, Target, WorkloadResult
from hugelab.workloads.kind import METRIC_KEYS, Kind, key, keys_of, timeout
from hugelab.workloads.process_thp import check_mode, target_for
from hugelab.workloads.toolrun import THP_ONLY_NOTE, check_backing, check_exit, rusage_metrics, tail

MetricSource = Literal["wall", "json", "regex"]
Stream = Literal["stdout", "stderr", "both"]


def json_lookup(data: Any, path: str) -> Any:
    """Follow a dotted key path ('end.sum_received.bits_per_second', list indices as
    numbers: 'results.0.value') through parsed JSON."""
    cur = data
    for part in path.split("."):
        if isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError) as exc:
                raise KeyError(part) from exc
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(part)
    return cur


@dataclass(frozen=True)
class CommandWorkload:
    """A user command (argv list, run without a shell) and where its metric comes from.

    metric="wall": the primary metric is `wall_s` (unit s, lower is better by default).
    metric="json": stdout is JSON; `json_path` (dotted, list indices as numbers) names a number.
    metric="regex": `regex` has exactly one group matching a number, searched in `stream`.
    The user declares `better` and `unit`; `name` is the primary metric's name."""

    argv: tuple[str, ...] = key((), "the program and its arguments (no shell)")
    metric: MetricSource = key("wall", "what is measured: its wall time, a number in its JSON "
                                       "output or one its output matches")
    json_path: str | None = key(None, 'metric "json": the number\'s path ("a.b.0")')
    regex: str | None = key(None, 'metric "regex": one group matching the number')
    stream: Stream = key("both", "which output the json or regex metric reads")
    better: Better = key("lower", METRIC_KEYS["better"])
    unit: str = key("s", METRIC_KEYS["unit"])
    name: str = key("value", METRIC_KEYS["name"])
    timeout_s: float | None = key(None, timeout("a run", "no limit"))
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="command", init=False)

    def __post_init__(self) -> None:
        argv = tuple(self.argv) if isinstance(self.argv, list | tuple) else self.argv
        if not isinstance(argv, tuple) or not argv or not all(isinstance(a, str) for a in argv):
            raise ExperimentError("command: argv must be a non-empty list of strings "
                                  "(it is run without a shell)")
        object.__setattr__(self, "argv", argv)
        if self.metric not in ("wall", "json", "regex"):
            raise ExperimentError(f"command: metric must be wall, json or regex, not {self.metric!r}")
        if self.better not in ("lower", "higher"):
            raise ExperimentError(f"command: better must be lower or higher, not {self.better!r}")
        if self.stream not in ("stdout", "stderr", "both"):
            raise ExperimentError(f"command: stream must be stdout, stderr or both, not {self.stream!r}")
        if self.metric == "json" and not self.json_path:
            raise ExperimentError("command: metric 'json' needs json_path (e.g. 'result.ops_per_s')")
        if self.metric == "regex":
            self._compiled()
        check_mode("command", self.process_thp)

    def _compiled(self) -> re.Pattern[str]:
        if not self.regex:
            raise ExperimentError("command: metric 'regex' needs regex with one group")
        try:
            pat = re.compile(self.regex, re.MULTILINE)
        except re.error as exc:
            raise ExperimentError(f"command: bad regex {self.regex!r}: {exc}") from exc
        if pat.groups != 1:
            raise ExperimentError(f"command: regex {self.regex!r} must have exactly one group, "
                                  f"it has {pat.groups}")
        return pat

    @property
    def primary(self) -> str:
        return "wall_s" if self.metric == "wall" else self.name

    def argv_list(self) -> list[str]:
        return list(self.argv)

    def extract(self, res: ExecResult) -> float:
        """The primary value from one finished run (pure)."""
        if self.metric == "wall":
            return res.wall_s
        if self.metric == "json":
            return self._from_json(res.stdout)
        text = {"stdout": res.stdout, "stderr": res.stderr,
                "both": res.stdout + "\n" + res.stderr}[self.stream]
        m = self._compiled().search(text)
        if m is None:
            raise WorkloadError(f"command: regex {self.regex!r} matched nothing in its {self.stream}"
                                f"\n  {tail(text, 5) or '(no output)'}")
        try:
            return float(m.group(1))
        except ValueError as exc:
            raise WorkloadError(f"command: regex group matched {m.group(1)!r}, not a number") from exc

    def _from_json(self, stdout: str) -> float:
        assert self.json_path is not None
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"command: stdout is not JSON ({exc})\n  {tail(stdout, 5)}") from exc
        try:
            value = json_lookup(data, self.json_path)
        except KeyError as exc:
            raise WorkloadError(f"command: JSON key path {self.json_path!r} not found "
                                f"(missing {exc.args[0]!r})") from exc
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise WorkloadError(f"command: {self.json_path!r} is {value!r}, not a number")
        try:
            return float(value)
        except ValueError as exc:
            raise WorkloadError(f"command: {self.json_path!r} is {value!r}, not a number") from exc

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics of one finished run (pure); WorkloadError when it failed."""
        check_exit(res, Path(res.argv[0]).name if res.argv else "command")
        metrics = rusage_metrics(res)
        metrics[self.primary] = self.extract(res)
        info: dict[str, Any] = {"tool": "command", "version": None, "argv": list(res.argv),
                                "metric_source": self.metric, "warnings": []}
        return WorkloadResult(metrics=metrics, primary=self.primary, unit=self.unit,
                              better=self.better, info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        result = self.parse(target_for(target, self.process_thp).exec(self.argv_list(),
                                                                     timeout=self.timeout_s))
        result.info["backing"] = backing
        result.info["backing_note"] = THP_ONLY_NOTE
        return result


KIND = Kind(keys=keys_of(CommandWorkload), name="command", workload=CommandWorkload,
            summary="any command of yours, its metric from its output (regex) or its wall time",
            duration=("timeout_s", None))
