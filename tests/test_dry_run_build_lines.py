"""The dry run's lines for what a run builds first: sizes for people (a 27 KB dump read
"about 0 MB"), the time the cost model gives, cached or not."""

from __future__ import annotations

from hugelab.cli.dryrun import build_lines


def test_a_small_dump_and_a_large_one_have_sizes_a_person_reads():
    small = {"what": "template", "cached": False, "bytes": 27_000, "seconds": 4.0, "note": ""}
    large = {**small, "bytes": 200 * 10**9, "seconds": 5400.0, "cached": None}
    said = build_lines([small, large, {**small, "cached": True}])
    assert "about 26 KiB" in said[0] and "0 MB" not in said[0]
    assert "about 186.3 GiB" in said[1]
    assert said[2] == "cached, reused by the run: template"
