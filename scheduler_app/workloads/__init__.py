"""Workloads for the simulator: a seeded synthetic busy day and the Helios trace importer.

Pure Python (no Django import), so bench scripts use them directly. Both produce a scenario
dict in the format of SCENARIOS.md; :func:`write_scenario` writes it as YAML or JSON.
"""

from .helios import CheckpointModel, HeliosParams, import_helios
from .io import dump_scenario, write_scenario
from .synthetic import SyntheticParams, generate

__all__ = [
    "CheckpointModel",
    "HeliosParams",
    "SyntheticParams",
    "dump_scenario",
    "generate",
    "import_helios",
    "write_scenario",
]
