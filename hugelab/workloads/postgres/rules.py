"""A Postgres workload's rules: its [workload] table checked once, the arm's backing against
its app's huge_pages, the server settings that follow, and what pgbench needs of this host before any host change."""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.units import parse_size
from hugelab.workloads.postgres import pgbench, server, userconf, userdata

BACKINGS = {"4k": None, "hugetlb-2M": "2MB", "hugetlb-1G": "1GB"}
HUGE_PAGES = ("off", "on", "try")


def validate(w: Any) -> None:
    """A Postgres workload `w`'s settings, checked once (ExperimentError naming what is wrong)."""
    if w.script is None and w.builtin not in pgbench.BUILTINS:
        raise ExperimentError(f"postgres: unknown builtin {w.builtin!r}; known: "
                              f"{', '.join(pgbench.BUILTINS)} (or script = a file)")
    if w.script is not None and (why := pgbench.script_problem(w.script)):
        raise ExperimentError(f"postgres: script {w.script!r} {why}",
                              hint="script = a pgbench script (pgbench -f): SQL statements "
                                   "and \\set lines, e.g. SELECT abalance FROM "
                                   "pgbench_accounts WHERE aid = :aid;")
    for name in ("scale", "clients", "threads"):
        if getattr(w, name) < 1:
            raise ExperimentError(f"postgres: {name} must be at least 1")
    if w.threads > w.clients:
        raise ExperimentError("postgres: threads must not exceed clients (pgbench -j <= -c)")
    if w.duration_s < 1 or w.window_s < 1 or w.warmup_s < 0:
        raise ExperimentError("postgres: duration_s and window_s are whole seconds, at "
                              "least 1 (pgbench -T); warmup_s at least 0")
    if w.transactions is not None and w.transactions < 1:
        raise ExperimentError("postgres: transactions must be at least 1")
    if w.window_ops is not None and (w.window_ops < 1 or w.warm_ops < 0):
        raise ExperimentError("postgres: window_ops is at least 1 and warm_ops at least 0")
    object.__setattr__(w, "app", tuple(w.app))
    app = dict(w.app)
    if bad := sorted(k for k in app if k in server.RESERVED):
        raise ExperimentError(f"postgres: app sets {bad[0]}, which hugelab sets itself "
                              "(the server listens on a private socket only)")
    hp = app.get("huge_pages")
    if hp is not None and hp not in HUGE_PAGES:
        raise ExperimentError(f"postgres: huge_pages must be one of {', '.join(HUGE_PAGES)}"
                              f", not {hp!r}")
    userdata.check_user_data(w)
    if w.arm_backing is not None:
        check_backing(w, w.arm_backing)


def check_backing(w: Any, backing: str) -> None:
    """ExperimentError unless `w`'s shared memory can be given `backing`, as its app's
    huge_pages says."""
    if backing not in BACKINGS:
        raise ExperimentError(
            f"postgres: backing {backing!r} is not one PostgreSQL's shared memory can be "
            f"given; use {', '.join(BACKINGS)}",
            hint="4k with app huge_pages = \"off\", hugetlb-2M or hugetlb-1G with \"on\" "
                 "(or \"try\", to see whether it falls back)")
    hp = dict(w.app).get("huge_pages")
    if backing == "4k" and hp in ("on", "try"):
        raise ExperimentError(f"postgres: huge_pages = {hp!r} needs a hugetlb backing "
                              "(hugetlb-2M or hugetlb-1G), not 4k")
    if backing != "4k" and hp == "off":
        raise ExperimentError(f"postgres: backing {backing} with huge_pages = 'off' would "
                              "never use the pool; use backing 4k")


def check_open_files(clients: int) -> None:
    """Before any host change: pgbench opens a connection (a file) per client and refuses
    to start beyond this process's open-file limit, so every trial would fail."""
    need = clients + 3  # pgbench's own count: clients + stdin, stdout, stderr
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and need > soft:
        raise ExperimentError(
            f"postgres: clients = {clients} needs {need} open files in pgbench; this "
            f"host allows {soft} (ulimit -n; hard limit {hard})",
            hint=f"lower clients to {max(1, soft - 3)} or raise the limit (ulimit -n "
                 f"{need}) in the shell that runs hugelab")


def server_settings(w: Any, backing: str) -> dict[str, object]:
    """The server settings of `w`'s arm on `backing`: the user's conf (less what hugelab
    owns), then huge_pages explicit always, huge_page_size from the backing, then every app
    setting."""
    out: dict[str, object] = {"huge_pages": "off" if backing == "4k" else "on"}
    if BACKINGS.get(backing):
        out["huge_page_size"] = BACKINGS[backing]
    out = {**userconf.kept(list(w.conf_items)), **out, **dict(w.app)}
    out.setdefault("max_connections", max(100, w.clients + 10))
    return out


def hugetlb_bytes(w: Any, unbuilt: Callable[[], bool]) -> int:
    """Bytes of huge pages Postgres workload `w`'s server maps: PostgreSQL's own count (0:
    huge_pages off); estimated from its settings while its template is `unbuilt` (a dry
    run: no server to ask yet)."""
    settings = w.settings()
    if settings["huge_pages"] == "off" or not BACKINGS.get(w.arm_backing or "4k") \
            or w.domain_arm:  # a domain's pool is grown in the trial, from its server
        return 0
    page = parse_size(str(settings.get("huge_page_size", "2MB")))  # "2MB", "1GB"
    if unbuilt():
        return -(-server.shared_estimate(settings) // page) * page
    return max(int(w.ask("shared_memory_size_in_huge_pages")), 0) * page


def keeps_cluster(builtin: str, script: str | None, fresh_copy: bool) -> bool:
    """Whether a stopped server's cluster serves the run's next server (hugelab.workloads.
    filepool) rather than a fresh copy per trial: pgbench's select-only, which only reads it,
    unless `fresh_copy` asks for one (pure). A script that may write (tpcb-like, simple-update,
    the user's own) gets a fresh copy."""
    return script is None and builtin == "select-only" and not fresh_copy
