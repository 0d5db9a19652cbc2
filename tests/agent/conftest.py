"""The API tests' cluster, roles and tokens (``world``), for the log tail endpoints."""

from tests.api.conftest import world  # noqa: F401 - a fixture, used by name
