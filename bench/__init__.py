"""Benchmarks (not part of the test suite): run with ``python -m bench.<name>`` from the repo
root, or all of them with ``python -m bench.run_all [--quick]``. See docs/PERFORMANCE.md."""
