"""Benchmarks: every figure is a ratio measured in one run (``python -m bench``)."""
