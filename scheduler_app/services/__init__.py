"""Services: every write goes through a function here (``<noun>_<verb>``, keyword-only).

Views, API endpoints, tasks and management commands call these; none writes models
directly. Job state changes go through :func:`job_transition` alone.
"""

from . import early_tick  # noqa: F401 - connects the early-tick receiver
from .errors import Conflict, Forbidden, Invalid, NotFound, ServiceError
from .jobs import array_cancel, array_submit, job_cancel, job_submit, jobs_submit_batch
from .transitions import AllocationError, job_transition

__all__ = [
    "AllocationError",
    "Conflict",
    "Forbidden",
    "Invalid",
    "NotFound",
    "ServiceError",
    "array_cancel",
    "array_submit",
    "job_cancel",
    "job_submit",
    "job_transition",
    "jobs_submit_batch",
]
