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
from pathlib import Path

import pytest

from tests.helpers import HUGELAB
from tests.hostguard import host_state

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


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_dry_run_changes_nothing(path, tmp_path):
    domain = re.search(r'^domain = "([^"]+)"', path.read_text(), re.MULTILINE)
    if domain:  # "your own VM": the demo domain the README has a user define (not our change)
        from hugelab.vm.domains.demo_domain import define_image_domain
        from tests.vmhelpers import libvirt_missing
        assert (missing := libvirt_missing()) is None, missing  # a fresh machine starts it
        define_image_domain(domain.group(1))
    cache, state, store = tmp_path / "cache", tmp_path / "state", tmp_path / "s.db"
    cache.mkdir()
    (cache / "kept").write_text("a file the dry run must leave as it is\n")
    env = {**os.environ, "HUGELAB_CACHE_DIR": str(cache), "HUGELAB_STATE_DIR": str(state)}
    before, cache_before = host_state(), tree(cache)
    cp = subprocess.run([*HUGELAB, "run", str(path), "--dry-run", "--json", "--store",
                         str(store)], env=env, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    plan = json.loads(cp.stdout)
    assert host_state() == before
    assert tree(cache) == cache_before
    assert not store.exists() and tree(state) == {}
    assert plan["estimated_s"] > 0
    assert all(c["trial_s"] for c in plan["cells"] if not c["skipped"]), plan["cells"]
    kind = re.search(r'^kind = "([^"]+)"', path.read_text(), re.MULTILINE)
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
    assert len(said) == 1 and "custom dump, 50000.0 MB" in said[0]["what"]
    assert said[0]["cached"] is None and "not hashed" in said[0]["note"]
    assert said[0]["bytes"] == 200 * 10**9 and said[0]["seconds"] > 3600
    assert not (tmp_path / "cache").exists()
