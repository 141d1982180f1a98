"""Many hosts: run one experiment on a fleet through Ansible.

`dispatch` is the driver (`run_fleet`, `recover_fleet`): it packs hugelab's source, runs the
playbook `ansible/fleet.yml` through ansible-runner (install with `./bootstrap setup`, preflight,
`hugelab run` as an async task, `hugelab recover` when a run fails) and turns Ansible's events
into per-host progress and outcomes; over `tarball` (hugelab's source, packed), `playbook`
(one playbook through ansible-runner) and `events` (its events made into outcomes).
`preflight` runs on each host and says which arms that host cannot run; `launch` starts
`hugelab run` there with the store password handed over in a file
it deletes, never on a command line.
"""
