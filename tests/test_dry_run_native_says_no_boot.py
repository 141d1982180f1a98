"""`run --dry-run` of an experiment that boots no guest says nothing of guest boots: it said
"guests booted per block: 0 (boot 8.0 s, assumed (tcg))" for Redis and memcached on the host
(issue 40's operator journey), a boot time for guests that never boot."""

from __future__ import annotations

from hugelab.cli.main import main

NATIVE = """name = "native"
blocks = 2

[workload]
kind = "command"
argv = ["python3", "-c", "print('rate: 1.0')"]
metric = "regex"
regex = "rate: ([0-9.]+)"
better = "higher"
unit = "ops/s"
name = "rate"
timeout_s = 5

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
"""


def test_a_native_dry_run_names_no_guest_boot(tmp_path, capsys):
    path = tmp_path / "native.toml"
    path.write_text(NATIVE)
    assert main(["run", str(path), "--dry-run", "--store", str(tmp_path / "s.db")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("trials:"))
    # the count follows the host as it is now (an arm it cannot run is skipped: a host test
    # beside this one may hold THP at never), the boot words must never appear
    assert line.startswith("trials: "), out
    assert "guests booted" not in out and "(boot" not in out, out
    assert not (tmp_path / "s.db").exists()
