"""PostgreSQL as a workload (`kind = "postgres"`): a private cluster per trial, the arm's
huge-page settings as server options, pgbench as the load, and the shared memory segment's own
smaps as evidence. `workload.Postgres` is the registry's class; the other modules each do one
job: `cluster` (binaries, trial directories), `template` (the cached templates and the
server's answers on a copy), `rules` (the table's and the arm's rules and settings), `server`
(start, ready, stop, its shared memory estimate), `segment` (the segment's smaps and its
System V key), `pgbench` (argv, parsing, a trial's metrics), `leftovers` (what `hugelab
recover` removes after a killed run)."""
