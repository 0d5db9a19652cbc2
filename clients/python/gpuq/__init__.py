"""gpuq: the GPU scheduler's command line and Python SDK, over its public REST API.

Standard library only (as the node agent): ``pip install ./clients/python``.
The SDK: :class:`Client`, :class:`Job` and :class:`JobArray`; the errors:
:class:`ApiError` (with the API's field messages in ``.errors``) and its subclasses.
The manual: docs/cli.md.
"""

__version__ = "0.1.0"

from .client import FINAL_STATES, Client, Job, JobArray, LogTail, Tenant  # noqa: E402
from .errors import (  # noqa: E402
    ApiError,
    BadURL,
    ConfigError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    GpuqError,
    InvalidRequest,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
)

__all__ = [
    "FINAL_STATES", "ApiError", "BadURL", "Client", "ConfigError", "Conflict", "ConnectionFailed",
    "Forbidden", "GpuqError", "InvalidRequest", "Job", "JobArray", "LogTail", "NotFound",
    "ServerError", "Tenant", "Throttled", "Unauthorized", "__version__",
]
