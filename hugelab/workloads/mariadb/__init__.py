"""MariaDB as a workload (`kind = "mariadb"`): a private server per trial from a datadir built
once and cached by content, the arm's `--large-pages` (the InnoDB buffer pool, redo log buffers
and caches in the 2 MiB hugetlb pool), and sysbench's OLTP Lua scripts as the load (read-only by
default). Modules, one job each: `datadir` (the private directories, the per-trial copies),
`template` (the cached templates, built once), `userdata` (a user's dump or datadir), `rules`
(the table's and the arm's rules), `server` (argv, start, its own report and mappings),
`evidence` (what the server showed, recorded, and its judge), `oltp` (sysbench's argv and
output), `indomain` (what a trial in a user's domain does that is its own: the base runs it),
`workload` (the dataclass and the kind's declaration)."""
