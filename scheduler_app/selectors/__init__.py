"""Selectors: read-only queries. Views, the API and commands read through these."""
