"""MariaDB as a workload (`kind = "mariadb"`): a private server per trial from a datadir built
once and cached by content, the arm's `--large-pages` (the InnoDB buffer pool, redo log buffers
and caches in the 2 MiB hugetlb pool), and sysbench's OLTP Lua scripts as the load (read-only by
default). Modules, one job each: `datadir` (the cached template and the per-trial copies),
`server` (argv, start, ready, stop, its own report and mappings), `oltp` (sysbench's argv and
output), `workload` (the dataclass, its evidence rule and the kind's declaration)."""
