"""Every `hugelab` command starts by building the whole parser. A command that needs no
statistics (show, recover, inspect, host, vm) must not pay for scipy at its start: the suite
runs the CLI as a subprocess hundreds of times, and a user's `hugelab show` took 1.1 s where
0.3 s does (docs/testing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = ("import sys; from hugelab.cli.main import build_parser; build_parser(); "
         "print(sorted(m for m in ('scipy', 'hugelab.runner', 'hugelab.stopping') "
         "if m in sys.modules))")


def test_building_the_parser_loads_neither_scipy_nor_the_runner():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


def test_show_loads_no_scipy(tmp_path):
    from tests.helpers import make_store

    store = tmp_path / "s.db"
    make_store(store)
    code = ("import runpy, sys; sys.argv = ['hugelab', 'show', '--store', sys.argv[1]]\n"
            "try:\n    runpy.run_module('hugelab.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('scipy' in sys.modules, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "False", r.stderr


def test_a_dry_run_loads_no_scipy():
    """A dry run only plans (the blocks, their time, what would change): thirty examples'
    dry runs in the suite, and a user's preview, paid 1.9 s each for scipy.stats here."""
    code = ("import runpy, sys; sys.argv = ['hugelab', 'run', 'examples/redis-thp.toml', "
            "'--dry-run', '--json']\n"
            "try:\n    runpy.run_module('hugelab.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('scipy.stats' in sys.modules, file=sys.stderr)")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert '"blocks"' in r.stdout, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1] == "False", r.stderr
