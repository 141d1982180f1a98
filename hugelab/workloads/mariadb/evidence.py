"""MariaDB's own evidence and its judge: what the server says and maps (its error log's report,
its mappings in huge pages, its own memory), recorded the same way natively, interleaved and
in a user's domain, and the rule that holds the arm's --large-pages to it (Kind.judge)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import amount
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.mariadb import server
from hugelab.workloads.servermem import server_tree
from hugelab.workloads.toolrun import first_version


def record(result: WorkloadResult, large: bool, pool: int, log: str,
           maps: list[dict[str, int]], memory: dict[str, object], where: str = "host") -> None:
    """The server's own evidence into `result`: its switch and report (evidence["mariadb"]),
    its memory (["server"]) and, read, its tree alone (["tree"]: the trial's tree is another
    arm's or the client's); `where` the server runs, in words."""
    result.evidence["mariadb"] = {"large_pages": large, "buffer_pool_kb": pool // 1024,
                                  "mappings": maps, **server.report(log)}
    result.evidence["server"] = memory
    if memory:
        result.evidence["tree"] = server_tree("mariadbd", memory, where)
        tree_pages(result)


def tree_pages(result: WorkloadResult) -> None:
    """The server's own tree (evidence["tree"], where it was read: interleaved, in a user's
    domain) with its hugetlb mappings' sizes by page size; none without a tree."""
    tree = result.evidence.get("tree")
    if isinstance(tree, dict) and "mariadb" in result.evidence:
        hugetlb: dict[int, int] = {}
        for m in result.evidence["mariadb"]["mappings"]:
            hugetlb[m["page_kb"]] = hugetlb.get(m["page_kb"], 0) + m["size_kb"]
        tree["hugetlb_by_page_kb"] = hugetlb


def tell(w: Any, result: WorkloadResult, log: str, sysbench_version: str | None) -> None:
    """Mariadb workload `w`'s info: its load, the server's version from its log, the user's
    data."""
    result.info.update({"tool": "sysbench", "script": w.script, "backing": None,
                        "server_version": server_version(log),
                        "sysbench_version": sysbench_version})
    if w.dump or w.datadir:
        result.info["user_data"] = {"dump": w.dump} if w.dump else {"datadir": w.datadir}


def server_version(log: str) -> str | None:
    """The server's version from its own error log."""
    return first_version(log, r"Version: '([^']+)'")


def check(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer: --large-pages got the buffer pool into huge pages (mysqld's mapping of the
    pool's size in pages larger than 4 KiB), or the server fell back and said so; without it,
    no mapping of the server is in huge pages."""
    m = evidence.get("mariadb")
    if not isinstance(m, dict):
        return None
    maps = m.get("mappings") or []
    huge_kb = sum(int(x["size_kb"]) for x in maps)
    failed = m.get("large_page_failures") or []
    said = f" (the server: couldn't allocate {failed[0]['bytes']} bytes in huge pages)" \
        if failed else ""
    if not m.get("large_pages"):
        if huge_kb:
            return Check(CONTRADICTED, f"mariadbd without --large-pages, yet "
                                       f"{amount(huge_kb)} of its memory is in huge pages", "app")
        return Check(VERIFIED, "mariadbd without --large-pages: none of its memory in huge "
                               "pages", "app")
    if not maps and not failed:
        return Check(NOT_APPLICABLE, "mariadbd's mappings were not read (it ended first)", "app")
    pool = int(m.get("buffer_pool_kb") or 0)
    if not any(int(x["size_kb"]) >= pool for x in maps):
        return Check(CONTRADICTED, f"asked for --large-pages, but the {amount(pool)} buffer "
                                   f"pool is not in huge pages{said}", "app")
    return Check(VERIFIED, f"--large-pages: the {amount(pool)} buffer pool in "
                           f"{maps[0]['page_kb'] // 1024} MiB pages, {amount(huge_kb)} of "
                           f"mysqld in huge pages{said}", "app")
