"""The `hugelab-mem` kind, hugelab's own page-size-sensitive memory micro-benchmark: the kind
and its trial (`workload.py`), its JSON report read (`output.py`), what its smaps read proves
(`evidence.py`) and whether one process can hold every arm's buffer (`interleave.py`)."""

from hugelab.workloads.hugelab_mem.workload import KIND, HugelabMem

__all__ = ["KIND", "HugelabMem"]
