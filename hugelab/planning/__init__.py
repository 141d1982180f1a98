"""Planning, before and between a run's trials: what a host can run (`arms.py`), the hugetlb
pages a run needs (`pools.py`), the order its trials run in (`schedule.py`), what it costs
(`cost.py`) and whether that fits a budget (`budget.py`), the dry run's whole plan
(`dryrun.py`), the blocks a verdict needs from a pilot (`pilot.py`), and a duet's calibration
(`calibration.py`). Nothing here changes the host."""
