"""The Python SDK: a :class:`Client` for the scheduler's public REST API and the
:class:`Job` it hands back.

    import gpuq

    client = gpuq.Client()                      # GPUQ_URL/GPUQ_TOKEN or the config file
    job = client.submit(tenant="vision", name="llm-1b", gpus=16, gpus_per_node=8,
                        max_runtime_s=7200)
    job.wait()                                  # the refreshed job, once it is final
    print(job.state, job.logs().stdout)

Fields keep the API's names (``max_runtime_s``, not ``--time``): what the SDK sends is
what ``docs/api.md`` documents, and a field the API gains later passes through unchanged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import config
from .errors import Conflict
from .http import Transport

#: States a job never leaves.
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
#: The most jobs one batch may hold (the API's limit): a larger batch would not be one
#: transaction, so the SDK refuses it rather than split it silently.
MAX_BATCH = 1000
#: The job list's filters (``GET /api/v1/jobs/``), plus ``mine``. An unknown name is a
#: TypeError: the API ignores parameters it does not know, and a misspelt filter would
#: silently list everything.
JOB_FILTERS = frozenset({"tenant", "state", "owner", "size_class", "submitted_after",
                         "submitted_before", "page_size", "mine"})
#: Fields only the job's detail has (a listed or submitted job reads its detail the first
#: time one is asked for).
DETAIL_FIELDS = frozenset({
    "command", "checkpointable", "checkpoint_interval_s", "checkpoint_time_s", "restart_s",
    "max_runtime_s", "max_runtime_from", "min_gpus", "preemptible", "interactive",
    "last_checkpoint_at", "resume_pointer", "retry_count", "pending_sentence",
    "queue_position", "estimate", "allocation", "preemptions",
})


def new_idempotency_key() -> str:
    """A key no other submit uses: a retry of the same request sends it again."""
    return f"gpuq-{uuid.uuid4().hex}"


class Record:
    """An API object with its fields as attributes (``tenant.share``), and as items."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def __repr__(self) -> str:
        key = self._data.get("id", self._data.get("name"))
        return f"<{type(self).__name__} {key!r}>"


class Tenant(Record):
    """A team: ``name``, ``guaranteed_gpus``, ``borrow_limit_gpus``, ``current_gpus``,
    ``borrowed_gpus``, ``usage_gpu_h``, ``share``, ``share_rank``, ..."""


@dataclass(frozen=True, slots=True)
class LogTail:
    """The tail of a job's log as its node's agent last sent it (at most 16,384
    characters of each stream); ``at`` is None when no agent has sent one."""

    job_id: int
    node: str | None
    at: str | None
    stdout: str
    stderr: str


class Job(Record):
    """A job. Its fields are attributes (``job.state``, ``job.gpus``, ...); a field only
    the detail has (``job.command``, ``job.estimate``) reads the detail when first asked.
    """

    id: int
    state: str

    def __init__(self, client: Client, data: dict[str, Any], *, detailed: bool = False,
                 replayed: bool = False) -> None:
        super().__init__(data)
        self._client = client
        self._detailed = detailed
        self._replayed = replayed

    def __getattr__(self, name: str) -> Any:
        if name in DETAIL_FIELDS and not name.startswith("_") and not self._detailed:
            self.refresh()
        return super().__getattr__(name)

    @property
    def replayed(self) -> bool:
        """True when the submit was answered as a retry of an earlier one (its key)."""
        return self._replayed

    @property
    def is_final(self) -> bool:
        return self._data.get("state") in FINAL_STATES

    def refresh(self) -> Job:
        """Read the job's detail again; returns the job itself."""
        self._data = self._client._http.get(f"/jobs/{self.id}/")
        self._detailed = True
        return self

    def wait(self, timeout: float | None = None, poll_s: float = 5) -> Job:
        """Poll until the job is final (COMPLETED, FAILED or CANCELLED) and return it,
        refreshed. Raises TimeoutError if it is not final after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.refresh()
        while not self.is_final:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {self.id} is still {self.state} after {timeout} s")
            time.sleep(max(0.05, poll_s if left is None else min(poll_s, left)))
            self.refresh()
        return self

    def cancel(self, why: str | None = None) -> Job:
        """Cancel the job (``why`` is written in the log); returns it, refreshed. A final
        job raises :class:`gpuq.Conflict`, unless it was this call's own earlier try that
        cancelled it (a retry after a lost answer)."""
        body = {} if why is None else {"why": why}
        try:
            response = self._client._http.post(f"/jobs/{self.id}/cancel/", body)
        except Conflict as error:
            if error.attempts > 1 and self.refresh().state == "CANCELLED":
                return self
            raise
        self._data, self._detailed = response.data, True
        return self

    def logs(self) -> LogTail:
        """The tail of the job's stdout and stderr, as its agent last sent it."""
        data = self._client._http.get(f"/jobs/{self.id}/log/")
        return LogTail(job_id=int(data.get("job_id", self.id)), node=data.get("node"),
                       at=data.get("at"), stdout=data.get("stdout") or "",
                       stderr=data.get("stderr") or "")

    def history(self) -> list[dict[str, Any]]:
        """Every log row of the job, oldest first (``seq``, ``at``, ``from_state``,
        ``to_state``, ``reason``, ``actor``, ``actor_name``, ``detail``): read afresh."""
        self.refresh()
        return list(self._data.get("history") or [])


class Client:
    """The scheduler's REST API. ``url`` and ``token`` left None come from ``GPUQ_URL``
    and ``GPUQ_TOKEN``, else from ``~/.config/gpuq/config.toml`` (``gpuq login`` writes
    it). Connection errors, 5xx and 429 are retried ``retries`` times with exponential
    backoff from ``backoff_s``."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout_s: float = 30.0, retries: int = 4, backoff_s: float = 0.5) -> None:
        settings = config.resolve(url, token)
        self.url = settings.url
        self._http = Transport(settings.url, settings.token, timeout_s=timeout_s,
                               retries=retries, backoff_s=backoff_s)
        self._me: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<gpuq.Client {self._http.base}>"

    # ------------------------------------------------------------------ who
    def me(self) -> dict[str, Any]:
        """``{"username", "operator", "memberships": [{"tenant", "role"}]}``."""
        if self._me is None:
            self._me = self._http.get("/me/")
        return self._me

    def default_tenant(self) -> str | None:
        """Your tenant when you are a member of exactly one, else None."""
        tenants = [m["tenant"] for m in self.me().get("memberships", [])]
        return tenants[0] if len(tenants) == 1 else None

    # ------------------------------------------------------------------ submit
    def submit(self, *, idempotency_key: str | None = None, **fields: Any) -> Job:
        """Submit one job; ``fields`` are the API's (``tenant``, ``name``, ``gpus``,
        ``max_runtime_s``, ...). Without ``idempotency_key`` a new key is generated, so
        the retries after a lost answer never make two jobs. ``tenant`` defaults to your
        only tenant. Raises :class:`gpuq.InvalidRequest` with the field messages."""
        body = {k: v for k, v in fields.items() if v is not None}
        if "tenant" not in body and (tenant := self.default_tenant()):
            body["tenant"] = tenant
        key = new_idempotency_key() if idempotency_key is None else idempotency_key
        headers = {"Idempotency-Key": key} if key else {}
        response = self._http.post("/jobs/", body, headers=headers)
        return Job(self, response.data, replayed=response.status == 200)

    def submit_batch(self, jobs: Iterable[dict[str, Any]], *, tenant: str | None = None,
                     idempotency_key: str | None = None) -> list[Job]:
        """Submit up to 1,000 jobs of one tenant, all or none (one transaction). A spec's
        own ``tenant`` key, if any, must be the batch's. Errors name ``jobs[i].field``."""
        specs = [dict(spec) for spec in jobs]
        if not 1 <= len(specs) <= MAX_BATCH:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH} jobs, not {len(specs)}: it is "
                             "one transaction; submit larger sweeps as several batches")
        named = {spec.pop("tenant") for spec in specs if "tenant" in spec}
        if tenant is None and len(named) == 1:
            tenant = named.pop()
        elif named - {tenant}:
            raise ValueError(f"a batch is for one tenant; the specs name {sorted(named)}")
        tenant = tenant or self.default_tenant()
        body: dict[str, Any] = {"jobs": [{k: v for k, v in s.items() if v is not None}
                                         for s in specs]}
        if tenant:
            body["tenant"] = tenant
        key = new_idempotency_key() if idempotency_key is None else idempotency_key
        response = self._http.post("/jobs/batch/", body,
                                   headers={"Idempotency-Key": key} if key else {})
        replayed = response.status == 200
        return [Job(self, data, replayed=replayed) for data in response.data["jobs"]]

    def cancel(self, job_id: int, why: str | None = None) -> Job:
        """Cancel a job by id (one request): ``client.job(id).cancel()`` without the
        read first."""
        return Job(self, {"id": int(job_id)}).cancel(why)

    # ------------------------------------------------------------------ read
    def job(self, job_id: int) -> Job:
        """A job's detail (state, pending reason, position, estimate, history, ...)."""
        return Job(self, self._http.get(f"/jobs/{int(job_id)}/"), detailed=True)

    def jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job you may see that matches, newest first, over every page. Filters:
        ``tenant``, ``state`` (one or a list), ``owner``, ``size_class`` (one or a list),
        ``submitted_after``, ``submitted_before`` (datetime or ISO text), ``mine=True``
        (your own), ``page_size`` (1 to 1,000)."""
        unknown = set(filters) - JOB_FILTERS
        if unknown:
            raise TypeError(f"unknown job filter(s) {sorted(unknown)}; known: "
                            f"{sorted(JOB_FILTERS)}")
        params: list[tuple[str, str]] = []
        if filters.pop("mine", False):
            params.append(("owner", self.me()["username"]))
        for name, value in filters.items():
            if value is None:
                continue
            values = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
            for one in values:
                params.append((name, one.isoformat() if isinstance(one, datetime) else str(one)))
        for data in self._http.pages("/jobs/", params):
            yield Job(self, data)

    def tenants(self) -> list[Tenant]:
        """Every tenant: guarantee, borrow limit, GPUs held and borrowed, decayed usage,
        fair share and its rank, queue depth."""
        return [Tenant(data) for data in self._http.pages("/tenants/")]

    def tenant(self, name: str) -> Tenant:
        return Tenant(self._http.get(f"/tenants/{name}/"))
