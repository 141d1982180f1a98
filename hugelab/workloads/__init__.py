"""Workloads: per workload an argv builder and an output parser (pure), run through a Target."""
