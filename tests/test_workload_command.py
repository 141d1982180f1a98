"""command: any argv (no shell), metric from wall time, a JSON key path, or a regex."""

from __future__ import annotations

import sys

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.units import parse_size
from hugelab.workloads.base import ExecResult
from hugelab.workloads.command import CommandWorkload, json_lookup
from hugelab.workloads.toolrun import error_summary, format_size

PY = sys.executable


def test_wall_time_default():
    w = CommandWorkload(argv=(PY, "-c", "import time; time.sleep(0.2)"))
    res = w.run(NativeTarget(), "4k")
    assert res.primary == "wall_s" and res.unit == "s" and res.better == "lower"
    assert 0.2 <= res.value < 5
    assert "user_s" in res.metrics and "minflt" in res.metrics
    assert "THP mode" in res.info["backing_note"]


def test_json_key_path():
    code = "import json; print(json.dumps({'results': [{'ops': 12.5}], 'ok': True}))"
    w = CommandWorkload(argv=(PY, "-c", code), metric="json", json_path="results.0.ops",
                        better="higher", unit="ops/s", name="ops")
    res = w.run(NativeTarget(), "thp")
    assert res.primary == "ops" and res.value == 12.5 and res.better == "higher"
    assert res.unit == "ops/s" and res.metrics["wall_s"] > 0
    bad = CommandWorkload(argv=(PY, "-c", code), metric="json", json_path="results.0.nope")
    with pytest.raises(WorkloadError, match="not found"):
        bad.run(NativeTarget(), "4k")
    notnum = CommandWorkload(argv=(PY, "-c", code), metric="json", json_path="ok")
    with pytest.raises(WorkloadError, match="not a number"):
        notnum.run(NativeTarget(), "4k")


def test_regex_over_output_streams():
    code = "import sys; print('rate: 41.5 MB/s'); print('lat 3 ms', file=sys.stderr)"
    hi = CommandWorkload(argv=(PY, "-c", code), metric="regex", regex=r"rate: ([\d.]+)",
                         better="higher", unit="MB/s")
    assert hi.run(NativeTarget(), "4k").value == 41.5
    lat = CommandWorkload(argv=(PY, "-c", code), metric="regex", regex=r"lat (\d+) ms",
                          stream="stderr", unit="ms")
    assert lat.run(NativeTarget(), "4k").value == 3.0
    miss = CommandWorkload(argv=(PY, "-c", code), metric="regex", regex=r"lat (\d+) ms",
                           stream="stdout")
    with pytest.raises(WorkloadError, match="matched nothing"):
        miss.run(NativeTarget(), "4k")


def test_no_shell_metacharacters_are_literal():
    w = CommandWorkload(argv=("echo", "$(id)", ";", "x"), metric="regex", regex=r"(\d+)$",
                        stream="stdout")
    with pytest.raises(WorkloadError, match="matched nothing"):
        w.run(NativeTarget(), "4k")  # prints "$(id) ; x" verbatim


@pytest.mark.parametrize("kwargs,match", [
    ({"argv": ()}, "non-empty list"),
    ({"argv": "ls -l"}, "non-empty list"),
    ({"argv": ("x",), "metric": "json"}, "json_path"),
    ({"argv": ("x",), "metric": "regex", "regex": r"(\d+) (\d+)"}, "exactly one group"),
    ({"argv": ("x",), "metric": "regex", "regex": "("}, "bad regex"),
    ({"argv": ("x",), "better": "more"}, "better"),
    ({"argv": ("x",), "metric": "cpu"}, "metric"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ExperimentError, match=match):
        CommandWorkload(**kwargs)


def test_nonzero_exit_keeps_stderr():
    w = CommandWorkload(argv=(PY, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"))
    with pytest.raises(WorkloadError) as ei:
        w.run(NativeTarget(), "4k")
    assert "exited with 3" in ei.value.message and "boom" in ei.value.message
    assert ei.value.stderr == "boom\n"  # type: ignore[attr-defined]


def test_missing_tool():
    with pytest.raises(ToolMissingError) as ei:
        CommandWorkload(argv=("/nonexistent/sysbench",)).run(NativeTarget(), "4k")
    assert ei.value.package == "sysbench"


def test_helpers():
    assert parse_size("2M") == 2 << 20 and parse_size(4096) == 4096
    assert parse_size("1GiB") == 1 << 30
    with pytest.raises(ValueError):
        parse_size("2 X")
    assert format_size(2 << 20) == "2M" and format_size(1000) == "1000"
    assert json_lookup({"a": [{"b": 1}]}, "a.0.b") == 1
    out = "Invalid option \"-z\"\n" + "\n".join(f"usage line {i}" for i in range(40))
    summary = error_summary(out)
    assert summary.startswith("Invalid option") and "usage line 39" in summary
    res = ExecResult(["t"], 0, "7\n", "", 0.5, {"utime_s": 0.1})
    parsed = CommandWorkload(argv=("t",), metric="regex", regex=r"(\d+)").parse(res)
    assert parsed.metrics == {"wall_s": 0.5, "user_s": 0.1, "value": 7.0}


def test_a_failure_leads_with_the_tools_own_words_then_the_command():
    """A report's "why failed" cell shows the first line: pgbench's error, not its argv."""
    from hugelab.workloads.base import ExecResult
    from hugelab.workloads.toolrun import failure_text
    argv = ["/usr/lib/postgresql/15/bin/pgbench", "-h", "/var/tmp/hugelab-postgres/x" * 5,
            "-c", "100000", "-f", "/etc/hostname"]
    res = ExecResult(argv, 1, "", "pgbench: error: ERROR:  syntax error at or near \"x\"\n", 0.1)
    first, *rest = failure_text("pgbench", res).splitlines()
    assert first == 'pgbench exited with 1: pgbench: error: ERROR:  syntax error at or near "x"'
    assert rest[-1].strip().startswith("command: /usr/lib/postgresql/15/bin/pgbench -h ")


def test_a_failed_command_error_leads_with_the_programs_words():
    from hugelab.errors import CommandError
    err = CommandError(["/usr/sbin/virt-xml-validate", "/tmp/x" * 30], 1,
                       "\nrelax-ng validity error: element domain\nfails to validate\n")
    first, *rest = err.message.splitlines()
    assert first == "virt-xml-validate failed (exit 1): relax-ng validity error: element domain"
    assert rest[0].strip() == "fails to validate"
    assert rest[-1].strip().startswith("command: /usr/sbin/virt-xml-validate /tmp/x")


def test_a_tool_ended_by_a_signal_shows_its_stdout_crash_report_too():
    """The JVM prints its fatal-error report on stdout; stderr held only its GC log when a
    java in a domain ended by SIGABRT (the suite's trial said nothing else)."""
    from hugelab.workloads.base import ExecResult
    from hugelab.workloads.toolrun import failure_text
    crash = ("#\n# A fatal error has been detected by the Java Runtime Environment:\n#\n"
             "#  Internal Error (os_linux.cpp:123), pid=7, tid=8\n#  Error: ShouldNotReachHere()\n")
    res = ExecResult(["java", "-jar", "walk.jar"], -6, crash,
                     "[0.3s][info][gc,init ] Pre-touch: Enabled\n[hugelab: ended by signal 6]\n",
                     0.4)
    text = failure_text("java", res)
    assert text.startswith("java exited with -6: ") and "Internal Error (os_linux.cpp:123)" in text
    calm = failure_text("java", ExecResult(["java"], 1, crash, "Error: bad heap\n", 0.1))
    assert "Internal Error" not in calm  # an ordinary exit keeps to stderr, as before
