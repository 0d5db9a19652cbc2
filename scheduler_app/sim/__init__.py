"""The simulator: drives the production scheduling core through virtual time.

``scenario`` loads and validates scenario files, ``engine`` runs them (memory engine),
``result`` writes the result file and its metrics, ``invariants`` checks a result against
the contract's rules, ``cli`` is the shared command line of ``manage.py simulate`` and
``python -m scheduler_app.sim``. See docs/simulator.md.
"""

from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = ["Scenario", "ScenarioError", "load_scenario", "parse_scenario"]
