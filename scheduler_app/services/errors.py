"""Errors the services raise, one family, so every edge (API, tasks, commands) maps them the
same way: ``NotFound`` -> 404, ``Forbidden`` -> 403, ``Conflict`` -> 409, any other
``ServiceError`` -> 400.

Each carries ``field`` (the input it is about, e.g. ``"jobs[3].gpus"``, or None) and
``code`` (a stable machine-readable word). ``Invalid`` may carry every bad field at once in
``errors`` ({field: message}).
"""

from __future__ import annotations

from scheduler_app.core.states import IllegalTransition, JobState, illegal_transition_words


class ServiceError(ValueError):
    """A request the services refuse. Nothing was written."""

    default_code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.code = code or self.default_code


class Invalid(ServiceError):
    """Bad input. ``errors`` maps each bad field to its message (``field`` is the first).
    ``codes``: the code of a field whose code is not ``code`` (a batch's bad dependency is
    ``bad_dependency`` beside another job's ``invalid`` GPUs)."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        code: str | None = None,
        errors: dict[str, str] | None = None,
        codes: dict[str, str] | None = None,
    ):
        self.codes = dict(codes or {})
        super().__init__(message, field=field,
                         code=code or (self.codes.get(field) if field else None))
        self.errors = dict(errors or ({field: message} if field else {}))

    def code_of(self, field: str | None) -> str:
        """The code of ``field``'s error."""
        return self.codes.get(field, self.code) if field is not None else self.code


class NotFound(ServiceError):
    default_code = "not_found"


class Forbidden(ServiceError):
    """The caller may not act on this object (an agent asking about another node's job)."""

    default_code = "forbidden"


class Conflict(ServiceError):
    """The object's current state does not allow the request (e.g. confirm a job that is
    not PLACING, drain a node that is down)."""

    default_code = "conflict"


class TransitionConflict(Conflict, IllegalTransition):
    """A job move the state machine refuses. Also an ``IllegalTransition``, so callers that
    think in core terms and callers that think in service errors both catch it."""

    def __init__(self, job_id: object, from_state: JobState | str, to_state: JobState | str):
        # IllegalTransition's attributes and words, not its __init__: compiled, that
        # refuses this class's instance as self (a TypeError: see core/states.py)
        self.job_id, self.from_state, self.to_state = job_id, str(from_state), str(to_state)
        # (ValueError's: ServiceError's super() would reach IllegalTransition's, by the MRO)
        self.message = illegal_transition_words(job_id, self.from_state, self.to_state)
        ValueError.__init__(self, self.message)
        self.field = None
        self.code = "illegal_transition"


__all__ = ["Conflict", "Forbidden", "Invalid", "NotFound", "ServiceError", "TransitionConflict"]
