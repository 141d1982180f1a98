"""PostgreSQL as a workload (`kind = "postgres"`): a private cluster per trial, the arm's
huge-page settings as server options, pgbench as the load, and the shared memory segment's own
smaps as evidence. `workload.Postgres` is the registry's class; the other modules each do one
job: `cluster` (binaries, template cache, trial directories), `server` (start, ready, stop),
`segment` (the segment's smaps and its System V key), `pgbench` (argv and parsing),
`leftovers` (what `hugelab recover` removes after a killed run)."""
