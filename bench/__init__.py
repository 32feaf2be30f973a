"""Benchmarks: what tooltrace costs per call, how its audit trail scales, how it compares.

Run ``python -m bench --help``. Nothing here is part of the unit tests; the smoke test
``tests/test_bench_smoke.py`` only checks that every section still runs and prints its table.
"""
