"""hugelab: what do huge pages buy this workload, on this host and inside its guests?"""

__version__ = "0.1.0"
