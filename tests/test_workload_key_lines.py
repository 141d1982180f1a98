"""Errors in a workload's keys name the experiment file's line, as the parse's own errors do
(issue 40 item 2): an unknown key or a bad value under [workload], a kind's own check of a
value, a scenario's value, an arm's `app` and an unknown kind, through `hugelab run X.toml
--dry-run` and `hugelab vm qemu-args`. Nothing runs: the errors come before any plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugelab.cli.main import main
from hugelab.experiment.where import workload_line

ARMS = """
[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
"""


def _error(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str],
           argv: tuple[str, ...] = ("run", "{}", "--dry-run")) -> str:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    assert main([a.format(path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hugelab: error: {path}: "), err
    return err


def _line_of(text: str, needle: str) -> int:
    return next(no for no, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("workload, needle, words", [
    ('kind = "sysbench"\nblok_size = "256M"\n', "blok_size", "unknown key 'blok_size'"),
    ('kind = "sysbench"\nthreads = "four"\n', "threads", "key 'threads' must be an integer"),
    ('kind = "memcached"\nconcurrency = 2\nkeyspace = 0\n', "keyspace",
     "keyspace, value_size and duration_s are at least 1"),
    ('kind = "memcached"\ntest = "put"\n', "test", "key 'test' must be one of"),
    ('kind = "redis"\nrequests = 10\npersistence = "both"\n', "persistence",
     "persistence must be one of"),
    ('kind = "sysbnch"\n', "kind", "unknown workload kind 'sysbnch'"),
])
def test_a_bad_workload_key_names_its_line(tmp_path, capsys, workload, needle, words):
    text = 'name = "x"\nblocks = 2\n\n[workload]\n' + workload + ARMS
    err = _error(tmp_path, text, capsys)
    assert f": line {_line_of(text, needle)}: " in err and words in err, err


def test_an_inline_workload_table_names_its_line(tmp_path, capsys):
    text = 'name = "x"\nworkload = { kind = "sysbench", blok_size = "1G" }\n' + ARMS
    assert ": line 2: workload 'sysbench': unknown key 'blok_size'" in _error(tmp_path, text,
                                                                               capsys)


def test_an_arm_app_setting_names_the_arms_line(tmp_path, capsys):
    """memcached checks its app settings when the arm hands them over: the line of that arm's
    app, not the first arm's and not [workload]'s."""
    text = ('[workload]\nkind = "memcached"\n\n[[arms]]\nname = "a"\nbacking = "4k"\n'
            'app = { memory_mb = 64 }\n\n[[arms]]\nname = "b"\nbacking = "thp"\n'
            'app = { large_pages = true, memory_mb = 32 }\n')
    err = _error(tmp_path, text, capsys)
    assert ": line 12: arm 'b': workload 'memcached': " in err and "needs memory_mb >= 48" in err


def test_an_arm_setting_the_kind_does_not_take_names_the_arms_line(tmp_path, capsys):
    text = ('[workload]\nkind = "sysbench"\n\n[[arms]]\nname = "a"\nbacking = "4k"\n\n'
            '[[arms]]\nname = "b"\nbacking = "thp"\napp = { x = 1 }\n')
    assert ": line 11: arm 'b': workload 'sysbench' takes no application settings" in \
        _error(tmp_path, text, capsys)


def test_a_scenario_value_names_its_line(tmp_path, capsys):
    text = ('[workload]\nkind = "memcached"\n\n[scenarios]\nkeyspace = [1000, 0]\n' + ARMS)
    err = _error(tmp_path, text, capsys)
    assert ": line 5: scenario keyspace = 0: workload 'memcached': keyspace" in err, err


def test_vm_qemu_args_names_the_line_too(tmp_path, capsys):
    text = ('[workload]\nkind = "hugelab-mem"\nsize = "64M"\nbogus = 1\n\n[[arms]]\n'
            'name = "g"\nbacking = "4k"\nvm = { mem = "512M" }\n')
    err = _error(tmp_path, text, capsys, ("vm", "qemu-args", "g", "{}"))
    assert ": line 4: workload 'hugelab-mem': unknown key 'bogus'" in err, err


def test_workload_line_falls_back_to_the_workload_table():
    """A kind's error that names no key of the file points at [workload] itself; an arm
    that is not among [[arms]] (a factorial cell) falls back to the key's line."""
    text = 'name = "x"\n\n[workload]  # the load\nkind = "redis"\n'
    assert workload_line(text, None) == 3
    assert workload_line(text, "kind", arm="thp=always") == 4
    assert workload_line('[factors]\napp.memory_mb = [32, 64]\n', "app", arm="cell") == 2
