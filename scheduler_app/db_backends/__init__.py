"""Database backends: thin subclasses of Django's, for the append-only Transition table."""
