"""bench/placement/pg_buffers.py: how a server's shared buffers lie in physical memory, its
metrics counted by hand on made-up frames, and a real shared mapping's present pages against
the kernel's own count of them (the mapping's Rss in smaps)."""

from __future__ import annotations

import math
import mmap
import os

import numpy as np
import pytest

from bench.placement.pg_buffers import lie, read_server, segment


def test_metrics_of_made_up_frames():
    # 8 pages: 4 ascending from an aligned frame, a gap, then 3 descending (adjacent only)
    pfn = np.array([100, 101, 102, 103, 0, 57, 56, 55])
    m = lie(pfn)
    assert m["present"] == 7 and m["pages"] == 8
    assert m["contig"] == pytest.approx(3 / 7)   # 100->101->102->103
    assert m["adjacent"] == pytest.approx(5 / 7)  # and 57->56->55
    assert m["coalesce4"] == 1.0  # the second group is not full: only the first counts
    assert math.isnan(m["aligned2m"])  # no 2 MiB piece


def test_an_aligned_2m_piece_is_seen_and_a_shifted_one_is_not():
    aligned = lie(np.arange(1024, 1024 + 512))
    shifted = lie(np.arange(1025, 1025 + 512))
    assert aligned["aligned2m"] == 1.0 and shifted["aligned2m"] == 0.0
    assert aligned["color_cv"] == 0.0  # 512 consecutive frames: 16 of each of 32 colours


@pytest.mark.skipif(os.geteuid() != 0, reason="frame numbers are root's to read")
def test_a_real_shared_mapping_counts_the_pages_the_kernel_counts():
    m = mmap.mmap(-1, 8 << 20)  # MAP_SHARED | MAP_ANONYMOUS: "/dev/zero (deleted)"
    for i in range(0, 6 << 20, 4096):  # touch three quarters of it
        m[i] = 1
    seg = segment(os.getpid())
    assert seg is not None and seg[1] - seg[0] >= 8 << 20
    rec = read_server(os.getpid(), [])
    assert rec is not None
    smaps = open(f"/proc/{os.getpid()}/smaps").read()
    head = f"{seg[0]:x}-{seg[1]:x}"
    block = smaps[smaps.index(head):].split("\nVmFlags")[0]
    rss_kb = int(block.split("\nRss:")[1].split()[0])
    assert rec["present"] == rss_kb // 4 == 1536
    m.close()
