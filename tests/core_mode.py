"""A pytest plugin loaded before Django (``-p tests.core_mode`` in pyproject.toml): the
suite runs the core's Python sources unless SCHED_CORE says otherwise.

Django's setup imports the core before any conftest runs, and the core picks its modules
once, on import (scheduler_app/core/__init__.py). The tests that patch the core's
methods need the Python sources (a compiled class's methods cannot be replaced), and the
compiled build is held to the same decisions by tests/sim/test_compiled_core.py.
"""

import os

os.environ.setdefault("SCHED_CORE", "pure")
