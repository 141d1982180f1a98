"""MariaDB's template cache (hugelab.owned.TemplateCache): two runs that need the same template
at once build it once and both get it whole; a half-built template a killed run left (`.tmp`)
is removed by the kind's leftovers, unless a live build holds its lock."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from hugelab.workloads.mariadb import datadir, template, workload
from tests.hostguard import workload_processes

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

TABLES, TABLE_SIZE = 1, 50


@pytest.fixture
def maria_env(tmp_path, monkeypatch):
    work = Path(f"/var/tmp/hugelab-mariadb-test-{uuid.uuid4().hex[:8]}")
    for k, v in (("HUGELAB_STATE_DIR", tmp_path / "state"), ("HUGELAB_MARIADB_WORK", work),
                 ("HUGELAB_CACHE_DIR", tmp_path / "cache")):
        monkeypatch.setenv(k, str(v))
    yield work
    shutil.rmtree(work, ignore_errors=True)


def _build(start: Any, out: Any) -> None:
    """In a child: wait for the other, then ask for the template; what it got, or the error."""
    start.wait(timeout=60)
    try:
        out.put(("ok", str(template.ensure_template(TABLES, TABLE_SIZE))))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        out.put(("error", f"{type(exc).__name__}: {exc}"))


@pytest.mark.server
@pytest.mark.slow
def test_two_runs_building_the_same_template_at_once_both_get_it_whole(tmp_path, maria_env):
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_build, args=(start, out)) for _ in range(2)]
    before = workload_processes()
    for p in procs:
        p.start()
    got = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [g[0] for g in got] == ["ok", "ok"], got
    assert got[0][1] == got[1][1]
    template = Path(got[0][1])
    datadir.check_template(template)
    cache = tmp_path / "cache" / "mariadb"
    assert not list(cache.glob("*.tmp")), "a half-built template is left"
    assert not list(template.glob("data")), "a copy landed inside the template"
    assert not list(maria_env.glob("*-*")), "a build's private directory is left"
    assert workload_processes() == before, "a build's server is left"


def test_leftovers_remove_a_killed_builds_tmp_but_not_a_live_ones(tmp_path, maria_env):
    cache = tmp_path / "cache" / "mariadb"
    (cache / "k1.tmp" / "data").mkdir(parents=True)  # a killed build's
    (cache / "k2.tmp").mkdir()                        # a live build's
    (cache / "k3").mkdir()                            # a finished template
    fd = os.open(cache / "k2.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        done = workload.leftovers()
    finally:
        os.close(fd)
    assert not (cache / "k1.tmp").exists()
    assert (cache / "k2.tmp").is_dir() and (cache / "k3").is_dir()
    assert any(str(cache / "k1.tmp") in d for d in done)
