"""stress-ng memory stressors (remap, malloc, mlock, vm, mmaphuge) with --metrics-brief.

One stressor per workload, N workers, a timeout. The metrics come from the `--metrics-brief`
table stress-ng prints (on stderr with 0.15; older versions print it with an `info:` prefix).
run() also asks for `--yaml FILE` in a temporary directory made on the target (`mktemp -d`),
reads it back with `cat` and keeps the parsed YAML as evidence; `parse_yaml` parses that text.

Caveat, recorded in every result's info: stress-ng's manual (stress-ng(1), --metrics) says
bogo-ops are "not a reliable metric of performance or throughput" and "have not been designed
to be used for benchmarking whatsoever"; treat differences as indications, not benchmarks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.units import parse_size
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.kind import Kind, Tool, key, keys_of, program
from hugelab.workloads.process_thp import check_mode, target_for
from hugelab.workloads.toolrun import THP_ONLY_NOTE, check_backing, check_exit, format_size, tail

STRESSORS = ("remap", "malloc", "mlock", "vm", "mmaphuge")
BYTES_OPTION = {"vm": "--vm-bytes", "malloc": "--malloc-bytes", "mlock": None,
                "remap": None, "mmaphuge": None}

BOGO_NOTE = ("stress-ng's own manual (stress-ng(1), --metrics) says bogo-ops are 'not a reliable "
             "metric of performance or throughput' and 'have not been designed to be used for "
             "benchmarking whatsoever'; treat differences as indications only")

_ROW = re.compile(
    r"stress-ng:\s*(?:metrc|info):\s*\[\d+\]\s+(?P<name>[a-z0-9][\w-]*)\s+(?P<ops>\d+)\s+"
    r"(?P<real>[\d.]+)\s+(?P<usr>[\d.]+)\s+(?P<sys>[\d.]+)\s+(?P<rate_real>[\d.]+)\s+"
    r"(?P<rate_cpu>[\d.]+)\s*$")
_MISC = re.compile(r"stress-ng:\s*(?:metrc|info):\s*\[\d+\]\s+(?P<name>[a-z0-9][\w-]*)\s+"
                   r"(?P<value>[\d.]+)\s+(?P<what>[A-Za-z][^(]*?)\s*(?:\(.*\))?\s*$")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def parse_brief(text: str) -> dict[str, dict[str, float]]:
    """Per stressor: bogo ops, times and rates from the --metrics-brief table (pure).

    Rows of the 'miscellaneous metrics' section become extra keys, e.g.
    'nanosecs_per_page_remap'."""
    out: dict[str, dict[str, float]] = {}
    misc = False
    for line in text.splitlines():
        if "miscellaneous metrics" in line:
            misc = True
            continue
        m = _ROW.search(line)
        if m and not misc:
            out[m["name"]] = {
                "bogo_ops": float(m["ops"]), "real_time_s": float(m["real"]),
                "usr_time_s": float(m["usr"]), "sys_time_s": float(m["sys"]),
                "bogo_ops_per_s_real": float(m["rate_real"]),
                "bogo_ops_per_s_usr_sys": float(m["rate_cpu"]),
            }
            continue
        mm = _MISC.search(line) if misc else None
        if mm and mm["name"] in out:
            out[mm["name"]][_slug(mm["what"])] = float(mm["value"])
    return out


def _scalar(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_yaml(text: str) -> dict[str, Any]:
    """The `--yaml` file of stress-ng 0.1x: {'system-info': {...}, 'metrics': [{...}, ...]}.

    A small reader for exactly this layout (top-level mappings, one list of flat mappings),
    so hugelab needs no YAML library (pure)."""
    doc: dict[str, Any] = {}
    section: str | None = None
    item: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if not line.startswith(" ") and line.endswith(":"):
            section = line[:-1]
            doc[section] = None
            item = None
            continue
        if section is None:
            continue
        body = line.strip()
        if body.startswith("- "):
            if not isinstance(doc[section], list):
                doc[section] = []
            item = {}
            doc[section].append(item)
            body = body[2:]
        key, sep, value = body.partition(":")
        if not sep:
            continue
        if item is not None and isinstance(doc[section], list):
            item[key.strip()] = _scalar(value)
        else:
            if not isinstance(doc[section], dict):
                doc[section] = {}
            doc[section][key.strip()] = _scalar(value)
    return doc


def yaml_metrics(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per stressor metrics from parse_yaml() output, named like parse_brief()'s (pure)."""
    names = {"bogo-ops": "bogo_ops", "wall-clock-time": "real_time_s", "user-time": "usr_time_s",
             "system-time": "sys_time_s", "bogo-ops-per-second-real-time": "bogo_ops_per_s_real",
             "bogo-ops-per-second-usr-sys-time": "bogo_ops_per_s_usr_sys"}
    out: dict[str, dict[str, float]] = {}
    for entry in doc.get("metrics") or []:
        if not isinstance(entry, dict) or "stressor" not in entry:
            continue
        row = {names.get(k, _slug(k)): float(v) for k, v in entry.items()
               if k != "stressor" and isinstance(v, int | float)}
        out[str(entry["stressor"])] = row
    return out


@dataclass(frozen=True)
class StressNg:
    """`stress-ng --<stressor> N --timeout Ts --metrics-brief`; primary bogo ops/s (real time).

    `bytes_per_worker` sets --vm-bytes / --malloc-bytes (vm and malloc only)."""

    stressor: str = key("remap", 'the stress-ng stressor ("remap", "vm", ...)')
    workers: int = key(1, "workers of that stressor")
    timeout_s: int = key(10, "--timeout: how long it runs", unit="s")
    bytes_per_worker: int | str | None = key(None, "the stressor's size per worker, where it "
                                                   "has one (none: its default)", unit="bytes")
    binary: str = key("stress-ng", program("binary", "stress-ng"))
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    kind: str = field(default="stress-ng", init=False)

    def __post_init__(self) -> None:
        check_mode("stress-ng", self.process_thp)
        if self.stressor not in STRESSORS:
            raise ExperimentError(f"stress-ng: unknown stressor {self.stressor!r}; "
                                  f"one of: {', '.join(STRESSORS)}")
        if self.workers < 1 or self.timeout_s < 1:
            raise ExperimentError("stress-ng: workers and timeout_s must be at least 1")
        if self.bytes_per_worker is not None:
            if BYTES_OPTION[self.stressor] is None:
                raise ExperimentError(f"stress-ng: bytes_per_worker applies to vm and malloc, "
                                      f"not {self.stressor}")
            try:
                object.__setattr__(self, "bytes_per_worker", parse_size(self.bytes_per_worker))
            except ValueError as exc:
                raise ExperimentError(f"stress-ng: bytes_per_worker: {exc}") from exc

    def argv(self, yaml_path: str | None = None, temp_path: str | None = None) -> list[str]:
        """The stress-ng command line (pure). `temp_path`: a writable directory for stress-ng's
        own temporary files (by default it uses the working directory, which is read-only `/`
        for commands run by the guest agent: "temp-path '.' must be readable and writeable")."""
        argv = [self.binary, f"--{self.stressor}", str(self.workers),
                "--timeout", f"{self.timeout_s}s", "--metrics-brief"]
        opt = BYTES_OPTION[self.stressor]
        if opt and isinstance(self.bytes_per_worker, int):
            argv += [opt, format_size(self.bytes_per_worker)]
        if temp_path:
            argv += ["--temp-path", temp_path]
        if yaml_path:
            argv += ["--yaml", yaml_path]
        return argv

    def parse(self, res: ExecResult, yaml_text: str | None = None) -> WorkloadResult:
        """Metrics of one finished run (pure): from the --metrics-brief text, YAML as evidence."""
        check_exit(res, "stress-ng")
        text = res.stderr + "\n" + res.stdout
        rows = parse_brief(text)
        if self.stressor not in rows:
            raise WorkloadError(f"stress-ng printed no metrics for stressor {self.stressor!r} "
                                f"(skipped or unsupported here?)\n  "
                                + (tail(text, 6) or "(no output)").replace("\n", "\n  "))
        metrics = dict(rows[self.stressor])
        metrics["wall_s"] = res.wall_s
        warnings: list[str] = []
        if metrics["bogo_ops"] == 0:
            warnings.append(f"{self.stressor} completed 0 bogo ops in {self.timeout_s}s: the "
                            "timeout is too short for one operation, the rate means nothing")
        warnings += [ln.split("]", 1)[-1].strip() for ln in text.splitlines()
                     if re.search(r"stress-ng:\s*(?:warn|error|fail):", ln)]
        evidence: dict[str, Any] = {}
        version = None
        if yaml_text:
            doc = parse_yaml(yaml_text)
            evidence["yaml_metrics"] = yaml_metrics(doc).get(self.stressor, {})
            sysinfo = doc.get("system-info") or {}
            version = sysinfo.get("stress-ng-version") if isinstance(sysinfo, dict) else None
        info: dict[str, Any] = {"tool": "stress-ng", "version": None if version is None
                                else str(version), "stressor": self.stressor,
                                "workers": self.workers, "note": BOGO_NOTE,
                                "warnings": warnings}
        return WorkloadResult(metrics=metrics, primary="bogo_ops_per_s_real",
                              unit="bogo ops/s", better="higher", evidence=evidence, info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        target = target_for(target, self.process_thp)
        tmp = target.exec(["mktemp", "-d", "-t", "hugelab-stress-ng.XXXXXX"])
        check_exit(tmp, "mktemp")
        tmpdir = tmp.stdout.strip()
        try:
            yaml_path = f"{tmpdir}/metrics.yaml"
            res = target.exec(self.argv(yaml_path, tmpdir), timeout=self.timeout_s + 60.0)
            cat = target.exec(["cat", yaml_path]) if res.returncode == 0 else None
            yaml_text = cat.stdout if cat is not None and cat.returncode == 0 else None
            result = self.parse(res, yaml_text)
        finally:
            target.exec(["rm", "-rf", "--", tmpdir])
        if yaml_text is None:
            result.info["warnings"].append("stress-ng wrote no YAML file; metrics come from "
                                           "the --metrics-brief text only")
        result.info["backing"] = backing
        result.info["backing_note"] = THP_ONLY_NOTE
        if self.stressor == "mmaphuge":
            result.info["backing_note"] += ("; mmaphuge itself always tries MAP_HUGETLB "
                                            "mappings and MADV_(NO)HUGEPAGE, whatever the arm")
        return result


KIND = Kind(keys=keys_of(StressNg), name="stress-ng", workload=StressNg,
            summary="stress-ng memory stressors (remap, malloc, mlock, vm, mmaphuge), bogo ops/s",
            tools=(Tool("stress-ng", "stress-ng"),), duration=("timeout_s", 10.0))
