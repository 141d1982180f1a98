"""Evidence for an application's own huge-page switches and a process's own THP mode. Pure.

process layer (an arm's `process_thp`; the peak of the tree's per-process samples, see
hugelab.trial.procscan):
    never     every process of the tree shows `THP_enabled: 0` in /proc/PID/status, in every
              sample (harness processes around the workload, such as `perf stat`, aside)
    madvise   no process has THP outside the mappings it madvised (smaps: AnonHugePages only
              in mappings with `hg` in VmFlags)
app layer (the application's own switch, judged by its workload kind from the application's
own report and its mappings, and handed over as `evidence["app"]`: a Check's fields). A switch
the application ignored (a JVM that fell back to 4 KiB pages, a memcached -L that got no THP)
is contradicted and never counted.
"""

from __future__ import annotations

from typing import Any

from hugelab.trial.evidence import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import amount, page_label

HARNESS_COMMS = frozenset({"perf"})  # hugelab's own wrappers around a workload's processes


def _counts(tree: dict[str, Any], key: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in (tree.get(key) or {}).items()
            if v and str(k) not in HARNESS_COMMS}


def _names(counts: dict[str, int]) -> str:
    return ", ".join(sorted(counts))


def check_process(mode: str, tree: dict[str, Any], where: str = "host") -> Check:
    """The per-process THP mode `mode` ("never" or "madvise") against the tree's samples."""
    if not tree or not tree.get("samples"):
        return Check(NOT_APPLICABLE, f"the workload's processes on {where} ended before the "
                                     "first sample", "process")
    on = _counts(tree, "thp_enabled_by_comm")
    off = _counts(tree, "thp_disabled_by_comm")
    if not on and not off:
        return Check(NOT_APPLICABLE, "this kernel does not report THP_enabled per process "
                                     "(Linux 6.0+)", "process")
    if mode == "never":
        if on:
            return Check(CONTRADICTED, "asked for process THP 'never', but THP_enabled is 1 in "
                                       f"{_names(on)}", "process")
        return Check(VERIFIED, f"THP_enabled 0 in every process of the tree ({_names(off)}) "
                               "in every sample", "process")
    stray = _counts(tree, "unadvised_thp_kb_by_comm")
    if stray:
        kb = sum(stray.values())
        return Check(CONTRADICTED, f"asked for process THP 'madvise', but {amount(kb)} of THP "
                                   f"lie outside madvised mappings in {_names(stray)}", "process")
    return Check(VERIFIED, "no THP outside madvised mappings in any process of the tree "
                           f"({_names({**on, **off})})", "process")


def app_check(evidence: dict[str, Any]) -> Check | None:
    """The application layer's Check from what its workload kind recorded: the JVM's own
    report (evidence["jvm"]), memcached's settings and its server's mappings
    (evidence["memcached"], evidence["server"]), or a Check's fields a kind judged itself
    (evidence["app"]); None for a workload without an application switch."""
    app = evidence.get("app")
    if isinstance(app, dict) and "status" in app:
        return Check(str(app["status"]), str(app.get("reason", "")), "app")
    jvm = evidence.get("jvm")
    if isinstance(jvm, dict):
        return check_jvm(jvm.get("settings") or {}, jvm.get("page_size"), jvm)
    server = evidence.get("server")
    redis = evidence.get("redis")
    if isinstance(redis, dict):
        if not server:
            return Check(NOT_APPLICABLE, "redis-server's memory was not read (it ended first, "
                                         "or runs where hugelab cannot see)", "app")
        return check_redis(bool(redis.get("disable_thp")), redis.get("process_thp"), server)
    memcached = evidence.get("memcached")
    if isinstance(memcached, dict):
        if not server:
            return Check(NOT_APPLICABLE, "memcached's mappings were not read (its server "
                                         "ended first, or runs where hugelab cannot see)", "app")
        return check_memcached(bool(memcached.get("large_pages")),
                               int(memcached.get("memory_mb", 0)), server)
    return None


def check_jvm(settings: dict[str, Any], page_size: int | None, report: dict[str, Any]) -> Check:
    """A JVM's own report (-Xlog:pagesize, -Xlog:gc+init) against its switches: the heap's page
    size is the one asked for (hugetlb: LargePageSizeInBytes, default 2 MiB; THP: 2 MiB; neither:
    4 KiB), and a JVM that disabled UseLargePages for want of a pool is contradicted."""
    heap = report.get("heap_page_kb")
    support = report.get("large_page_support") or "not reported"
    if heap is None:
        return Check(NOT_APPLICABLE, "the JVM printed no heap page size (-Xlog:pagesize)", "app")
    if settings.get("UseLargePages"):
        want = (page_size or 2 << 20) // 1024
        fell_back = [w for w in report.get("warnings") or [] if "UseLargePages disabled" in w]
        if fell_back or heap != want:
            why = fell_back[0] if fell_back else f"Large Page Support: {support}"
            return Check(CONTRADICTED, f"asked for UseLargePages with {page_label(want)} pages, "
                                       f"but the heap has {page_label(heap)} pages ({why})", "app")
        return Check(VERIFIED, f"the JVM reports its heap in {page_label(heap)} pages "
                               f"(Large Page Support: {support})", "app")
    want = 2048 if settings.get("UseTransparentHugePages") else 4
    switch = "UseTransparentHugePages" if want == 2048 else "no large-page switch"
    if heap != want:
        return Check(CONTRADICTED, f"asked for {switch}, but the JVM reports its heap in "
                                   f"{page_label(heap)} pages (Large Page Support: {support})",
                     "app")
    return Check(VERIFIED, f"{switch}: the JVM reports its heap in {page_label(heap)} pages "
                           f"(Large Page Support: {support})", "app")


def check_memcached(large_pages: bool, memory_mb: int, server: dict[str, Any]) -> Check:
    """memcached's own switch from its mappings, read just before it stopped: with -L it
    madvised (MADV_HUGEPAGE) a chunk of at least its -m and that chunk is in THP; without -L
    it madvised nothing."""
    advised = int(server.get("madvised_kb", 0))
    huge = int(server.get("madvised_thp_kb", 0))
    total = int(server.get("anon_huge_kb", 0))
    if not large_pages:
        if advised:
            return Check(CONTRADICTED, f"memcached without -L, yet {amount(advised)} of its "
                                       "memory is madvised for THP", "app")
        return Check(VERIFIED, f"memcached without -L madvised nothing ({amount(total)} in "
                               "THP by the host's mode)", "app")
    if advised < memory_mb * 1024:
        return Check(CONTRADICTED, f"memcached -L madvised {amount(advised)}, less than its "
                                   f"-m {memory_mb} MiB", "app")
    if not huge:
        return Check(CONTRADICTED, f"memcached -L madvised {amount(advised)} but none of it is "
                                   "in THP (host THP never, or no huge page could be had)", "app")
    return Check(VERIFIED, f"memcached -L: {amount(huge)} of its {amount(advised)} madvised "
                           "memory in THP", "app")


def check_redis(disable_thp: bool, process_thp: str | None, server: dict[str, Any]) -> Check:
    """Redis's own disable-thp from its server process, read just before it stopped: `yes`
    switches THP off for itself (prctl, so THP_enabled 0) when the host's mode is `always`,
    after start-up (what it faulted in THP before stays THP: measured 6 MiB with Redis 7.0);
    `no` keeps it (THP_enabled 1, unless the arm's process_thp wraps it)."""
    enabled = server.get("thp_enabled")
    huge = int(server.get("anon_huge_kb", 0))
    if enabled is None:
        return Check(NOT_APPLICABLE, "this kernel does not report THP_enabled per process "
                                     "(Linux 6.0+)", "app")
    if disable_thp:
        if enabled == 0:
            return Check(VERIFIED, "disable-thp yes: redis-server switched THP off for itself "
                                   f"(THP_enabled 0; {amount(huge)} faulted in THP before "
                                   "it did stays THP)", "app")
        if huge:
            return Check(CONTRADICTED, f"disable-thp yes, yet redis-server has {amount(huge)} "
                                       "in THP", "app")
        return Check(NOT_APPLICABLE, "disable-thp yes: redis-server kept THP_enabled 1 (it "
                                     "switches THP off only under host THP always) and has no "
                                     "THP", "app")
    if enabled == 0 and process_thp != "never":
        return Check(CONTRADICTED, "disable-thp no, yet redis-server runs with THP_enabled 0",
                     "app")
    return Check(VERIFIED, f"disable-thp no: redis-server kept THP "
                           f"(THP_enabled {enabled}, {amount(huge)} in THP)", "app")
