"""The REST API (issue 6): DRF under ``/api/v1/``, OpenAPI 3 at ``/api/schema/``.

A process edge: every view is thin and calls the services (writes) and selectors
(reads). The package also owns its one model, :class:`ApiToken` (bearer tokens for
pipelines and node agents), so it is a Django app of its own (label ``api``).
Reference: docs/api.md.
"""
