"""`hugelab run --dry-run` changes nothing (issue 40 item 1): on every example, the host's THP
modes and pools, the cache (an empty HUGELAB_CACHE_DIR: PostgreSQL's template must not be
built, nor a dump restored), the state directory and the store are byte-for-byte as they were;
and the dry run still says what the run will build, how large and how long."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import HUGELAB
from tests.hostguard import host_lock, host_state

pytestmark = [pytest.mark.tools, pytest.mark.vm]
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))


def tree(top: Path) -> dict[str, str]:
    """Every path under `top` with its mode and, for a file, its content's sha256."""
    out = {}
    for p in sorted(top.rglob("*")) if top.exists() else []:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(top))] = f"{st.st_mode:o} {digest}"
    return out


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Every example's dry run, three at a time (each reads and changes nothing, so they may
    overlap: the host is read before the first starts and after the last ends): per example,
    its cache directory before, its process, its directories."""
    from hugelab.vm.domains.demo_domain import define_image_domain
    from tests.vmhelpers import libvirt_missing
    for path in EXAMPLES:
        domain = re.search(r'^domain = "([^"]+)"', path.read_text(), re.MULTILINE)
        if domain:  # "your own VM": the demo domain the README has a user define (not our change)
            assert (missing := libvirt_missing()) is None, missing  # a fresh machine starts it
            define_image_domain(domain.group(1))

    def one(path: Path) -> dict:
        top = tmp_path_factory.mktemp(path.stem)
        cache, state, store = top / "cache", top / "state", top / "s.db"
        cache.mkdir()
        (cache / "kept").write_text("a file the dry run must leave as it is\n")
        env = {**os.environ, "HUGELAB_CACHE_DIR": str(cache), "HUGELAB_STATE_DIR": str(state)}
        cache_before = tree(cache)
        cp = subprocess.run([*HUGELAB, "run", str(path), "--dry-run", "--json", "--store",
                             str(store)], env=env, capture_output=True, text=True, timeout=300)
        return {"cp": cp, "cache": cache, "cache_before": cache_before, "state": state,
                "store": store}

    with host_lock(), ThreadPoolExecutor(3) as pool:  # taken here: module fixtures come first
        host_before = host_state()
        done = dict(zip(EXAMPLES, pool.map(one, EXAMPLES), strict=True))
        return done, host_before, host_state()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_dry_run_changes_nothing(path, dry_runs):
    done, host_before, host_after = dry_runs
    run = done[path]
    cp = run["cp"]
    assert cp.returncode == 0, cp.stdout + cp.stderr
    plan = json.loads(cp.stdout)
    assert host_after == host_before
    assert tree(run["cache"]) == run["cache_before"]
    assert not run["store"].exists() and tree(run["state"]) == {}
    assert plan["estimated_s"] > 0
    assert all(c["trial_s"] for c in plan["cells"] if not c["skipped"]), plan["cells"]
    kind = re.search(r'^kind = "([^"]+)"', path.read_text(), re.MULTILINE)
    domain = re.search(r'^domain = "([^"]+)"', path.read_text(), re.MULTILINE)
    if kind and kind.group(1) == "postgres" and not domain:  # the template it did not build
        assert [b["cached"] for b in plan["builds"]] == [False], plan["builds"]
        assert plan["builds"][0]["bytes"] > 0 and plan["builds"][0]["seconds"] > 0


def test_a_large_dump_is_read_not_hashed_nor_restored(tmp_path, monkeypatch):
    """A DBA's 50 GB dump: the dry run reads its size and format, hashes nothing past 1 GiB,
    and says what restoring it will take by the cost model."""
    from hugelab.planning.dryrun import builds
    from hugelab.workloads.postgres.workload import Postgres
    from hugelab.workloads.preview import previewing
    monkeypatch.setenv("HUGELAB_CACHE_DIR", str(tmp_path / "cache"))
    dump = tmp_path / "big.dump"
    with open(dump, "wb") as f:
        f.write(b"PGDMP" + bytes(4096))
        f.truncate(50 * 10**9)  # sparse: 50 GB by its size
    script = tmp_path / "load.sql"
    script.write_text("SELECT 1;\n")  # its own load: the builtin's tables are not looked for
    with previewing():
        said = builds(Postgres(dump=str(dump), script=str(script)), {})
    assert len(said) == 1 and "custom dump, 46.6 GiB" in said[0]["what"]
    assert said[0]["cached"] is None and "not hashed" in said[0]["note"]
    assert said[0]["bytes"] == 200 * 10**9 and said[0]["seconds"] > 3600
    assert not (tmp_path / "cache").exists()
