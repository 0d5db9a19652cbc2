"""The Python SDK: a :class:`Client` for the scheduler's public REST API and the
:class:`Job` it hands back.

    import gpuq

    client = gpuq.Client()                      # GPUQ_URL/GPUQ_TOKEN or the config file
    job = client.submit(tenant="vision", name="llm-1b", gpus=16, gpus_per_node=8,
                        max_runtime_s=7200)
    job.wait()                                  # the refreshed job, once it is final
    print(job.state, job.logs().stdout)

    report = client.submit(tenant="vision", name="report", gpus=1,
                           depends_on=[job])      # waits for it to complete (afterok)
    sweep = client.submit_array(tenant="vision", name="sweep", gpus=1, count=100,
                                max_running=8)    # tasks sweep.id_0 .. sweep.id_99
    client.job(f"{sweep.id}_7").state           # a task by its name

Fields keep the API's names (``max_runtime_s``, not ``--time``): what the SDK sends is
what ``docs/api.md`` documents, and a field the API gains later passes through unchanged.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import config
from .errors import (
    ApiError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
)
from .http import Transport

#: States a job never leaves.
FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
#: The most jobs one batch may hold (the API's limit): a larger batch would not be one
#: transaction, so the SDK refuses it rather than split it silently.
MAX_BATCH = 1000
#: The job list's filters (``GET /api/v1/jobs/``), plus ``mine``. An unknown name is a
#: TypeError: the API ignores parameters it does not know, and a misspelt filter would
#: silently list everything.
JOB_FILTERS = frozenset({"tenant", "state", "owner", "size_class", "array",
                         "submitted_after", "submitted_before", "page_size", "mine"})
#: The most tasks one array may have (the API's limit).
MAX_ARRAY_TASKS = 10_000
#: What ``depends_on``'s ``when`` may be: sbatch's afterok, afterany, afternotok.
WHEN = ("ok", "any", "notok")
#: A job's reference: its id (``412``), or an array task's name (``412_7``).
_REF = re.compile(r"^\s*([0-9]+)(?:_([0-9]+))?\s*$")  # ASCII digits: int() reads "١"
#: The largest job id the API takes: 18 digits (a longer number matched none of its
#: routes, and gpuq printed "No endpoint /api/v1/jobs/.../": a researcher's session).
MAX_JOB_ID = 10**18 - 1
#: Fields only the job's detail has (a listed or submitted job reads its detail the first
#: time one is asked for).
DETAIL_FIELDS = frozenset({
    "command", "checkpointable", "checkpoint_interval_s", "checkpoint_time_s", "restart_s",
    "max_runtime_s", "max_runtime_from", "min_gpus", "preemptible", "interactive",
    "last_checkpoint_at", "resume_pointer", "retry_count", "pending_sentence",
    "queue_position", "estimate", "allocation", "preemptions",
})


def parse_ref(ref: int | str) -> tuple[int, int | None]:
    """``412`` -> ``(412, None)``; ``"412_7"`` (an array task's name) -> ``(412, 7)``.
    ValueError for anything else."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        if ref > MAX_JOB_ID:
            raise ValueError(f"{ref!r} is not a job: a job's id has at most 18 digits")
        return ref, None
    found = _REF.match(str(ref))
    if found is None:
        raise ValueError(f"{ref!r} is not a job: a job's id (412) or an array task's name "
                         "(412_7)")
    job_id, index = int(found.group(1)), None if found.group(2) is None else int(found.group(2))
    if max(job_id, index or 0) > MAX_JOB_ID:
        raise ValueError(f"{ref!r} is not a job: a job's id has at most 18 digits")
    return job_id, index


def _keyed(body: dict[str, Any], idempotency_key: str | None) -> dict[str, str]:
    """The headers that carry a submit's key (a new one if None). An HTTP header is
    ASCII: a key with other characters goes in the body's ``idempotency_key``, which the
    API takes the same way."""
    key = new_idempotency_key() if idempotency_key is None else idempotency_key
    if not key:
        return {}
    if key.isascii() and key.isprintable():
        return {"Idempotency-Key": key}
    body["idempotency_key"] = key
    return {}


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


#: How long a wait polls on through an unreachable server, at a stretch (seconds): a
#: restart of the server is well within it. ``Job.wait`` gave up on the first
#: ConnectionFailed, 11 s into a 15 s restart (a pipeline author's session, 2026-12-07).
OUTAGE_S = 600.0


def _poll(refresh: Any, done: Any, timeout: float | None, poll_s: float,
          outage_s: float | None, late: Any) -> None:
    """``refresh()`` every ``poll_s`` until ``done()``; TimeoutError (``late()`` its words)
    after ``timeout``. A refresh that cannot reach the server, or gets a 5xx, is tried
    again at the next poll, until the outage has lasted ``outage_s`` (then it is raised)."""
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    down_since: float | None = None
    first = True
    while True:
        if not first:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(late())
            time.sleep(max(0.05, poll_s if left is None else min(poll_s, left)))
        first = False
        try:
            refresh()
        except (ConnectionFailed, ServerError):
            now = time.monotonic()
            down_since = now if down_since is None else down_since
            if outage_s is not None and now - down_since >= outage_s:
                raise
            continue
        down_since = None
        if done():
            return


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

    def wait(self, timeout: float | None = None, poll_s: float = 5,
             outage_s: float | None = OUTAGE_S) -> Job:
        """Poll until the job is final (COMPLETED, FAILED or CANCELLED) and return it,
        refreshed. Raises TimeoutError if it is not final after ``timeout`` seconds. A
        server that cannot be reached (or answers 5xx) is polled on for up to
        ``outage_s`` seconds at a time (None: as long as the timeout allows), so that a
        long wait outlives a restart of the server; past that, its ConnectionFailed or
        ServerError is raised."""
        _poll(self.refresh, lambda: self.is_final, timeout, poll_s, outage_s,
              lambda: f"job {self.id} is still {self.get('state')} after {timeout} s")
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

    @property
    def ref(self) -> str:
        """How the job is named: an array task's name (``412_7``), else its id."""
        return self._data.get("array_task") or str(self.id)

    def history(self) -> list[dict[str, Any]]:
        """Every log row of the job, oldest first (``seq``, ``at``, ``from_state``,
        ``to_state``, ``reason``, ``actor``, ``actor_name``, ``detail``): read afresh."""
        self.refresh()
        return list(self._data.get("history") or [])


class JobArray(Record):
    """A job array: ``id`` (its task 0's id), ``tenant``, ``name``, ``count``,
    ``max_running`` (None: no cap), ``states`` (tasks per state), ``depends_on``, as
    ``GET /api/v1/arrays/{id}/`` gives them. ``jobs`` are the tasks, by index, when the
    array was just submitted (else read them with :meth:`tasks`)."""

    def __init__(self, client: Client, data: dict[str, Any], *,
                 jobs: list[Job] | None = None, replayed: bool = False) -> None:
        super().__init__(data)
        self._client = client
        self._jobs = jobs
        self._replayed = replayed

    @property
    def id(self) -> int:
        return int(self._data["array_id"])

    @property
    def jobs(self) -> list[Job]:
        """The tasks, by index: those the submit answered with, else read (every page)."""
        if self._jobs is None:
            self._jobs = self.tasks()
        return self._jobs

    @property
    def replayed(self) -> bool:
        """True when the submit was answered as a retry of an earlier one (its key)."""
        return self._replayed

    @property
    def is_final(self) -> bool:
        """Every task has ended (from the counts last read: :meth:`refresh`)."""
        states = self._data.get("states")
        if states is None:
            self.refresh()
            states = self._data.get("states") or {}
        return all(state in FINAL_STATES for state, n in states.items() if n)

    def task(self, index: int) -> Job:
        """Task ``index`` (0 to count - 1), read afresh."""
        return self._client.job(f"{self.id}_{int(index)}")

    def tasks(self, **filters: Any) -> list[Job]:
        """The tasks as listed now (``GET /jobs/?array=ID``), by index; ``filters`` as
        :meth:`Client.jobs` (``state=...``)."""
        found = list(self._client.jobs(array=self.id, **filters))
        return sorted(found, key=lambda job: job.get("array_index") or 0)

    def refresh(self) -> JobArray:
        """Read the array again (its counts by state); returns it."""
        self._data = self._client._http.get(f"/arrays/{self.id}/")
        return self

    def cancel(self, why: str | None = None) -> list[Job]:
        """Cancel every task that has not ended, in one transaction; returns those it
        cancelled. :class:`gpuq.Conflict` if every task has ended already (unless this
        call's own earlier try cancelled them: a retry after a lost answer gives [])."""
        return self._client.cancel_array(self.id, why=why)

    def wait(self, timeout: float | None = None, poll_s: float = 5,
             outage_s: float | None = OUTAGE_S) -> JobArray:
        """Poll until every task has ended; returns the array, refreshed. TimeoutError
        after ``timeout`` seconds; an unreachable server as in :meth:`Job.wait`."""
        _poll(self.refresh, lambda: self.is_final, timeout, poll_s, outage_s,
              lambda: f"array {self.id} still has tasks running or waiting after {timeout} "
                      f"s: {self.states}")
        return self

    def __repr__(self) -> str:
        return f"<JobArray {self._data.get('array_id')!r} of {self._data.get('count')}>"


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
        only tenant. ``depends_on``: the jobs it waits for, each a :class:`Job`, an id,
        a task's name (``"412_7"``), an ``(id, when)`` pair or the API's ``{"job": id,
        "when": ...}``; ``when`` is ``ok`` (completed: the default), ``any`` (ended) or
        ``notok`` (failed or cancelled). Raises :class:`gpuq.InvalidRequest` with the
        field messages."""
        body = self._body(fields)
        headers = _keyed(body, idempotency_key)
        response = self._http.post("/jobs/", body, headers=headers)
        return Job(self, response.data, replayed=response.status == 200)

    def submit_array(self, *, count: int, max_running: int | None = None,
                     idempotency_key: str | None = None, **fields: Any) -> JobArray:
        """Submit a job array: ``count`` tasks (1 to 10,000) of one spec (``fields`` as
        :meth:`submit`'s, ``depends_on`` too: every task waits for them), at most
        ``max_running`` running at once (None: no cap), all or none. The tasks are
        numbered 0 to count - 1 (each reads ``ARRAY_INDEX``) and named
        ``<array id>_<index>``; the array's id is its task 0's. The API judges the
        count (:data:`MAX_ARRAY_TASKS` at most): errors name ``array.count``,
        ``array.max_running`` or the job's field."""
        body = self._body(fields)
        body["array"] = {"count": count}
        if max_running is not None:
            body["array"]["max_running"] = max_running
        response = self._http.post("/arrays/", body, headers=_keyed(body, idempotency_key))
        data = response.data
        replayed = response.status == 200
        jobs = [Job(self, job, replayed=replayed) for job in data.get("jobs") or []]
        first = jobs[0] if jobs else None
        summary = {"array_id": data["array_id"], "tenant": data.get("tenant"),
                   "count": data.get("count"),
                   "name": first.get("name") if first else fields.get("name"),
                   "owner": first.get("owner") if first else None,
                   "max_running": first.get("array_max_running") if first else max_running,
                   "depends_on": first.get("depends_on") if first else []}
        return JobArray(self, summary, jobs=jobs, replayed=replayed)

    def _body(self, fields: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in fields.items() if v is not None}
        if "tenant" not in body and (tenant := self.default_tenant()):
            body["tenant"] = tenant
        if "depends_on" in body:
            body["depends_on"] = self.dependencies(body["depends_on"])
        return body

    def dependencies(self, depends_on: Iterable[Any]) -> list[dict[str, Any]]:
        """``depends_on`` as the API takes it: ``[{"job": id, "when": ...}]``. Takes
        :class:`Job` objects, ids, task names (``"412_7"``, looked up), ``(job, when)``
        pairs and the API's own objects (a batch's ``{"index": i}`` ones pass unchanged).
        """
        out: list[dict[str, Any]] = []
        for k, item in enumerate(depends_on):
            when: str | None = None
            if isinstance(item, tuple):
                item, when = item
            if isinstance(item, dict):
                one = dict(item)
                if isinstance(one.get("job"), str):
                    one["job"] = self._awaited_id(one["job"], k)
                out.append(one)
                continue
            job = item.id if isinstance(item, Job) else self._awaited_id(item, k)
            out.append({"job": job} if when is None else {"job": job, "when": when})
        return out

    def _awaited_id(self, ref: int | str, k: int) -> int:
        """``job_id`` for dependency ``k``: a task name that names no task, or a task of
        an array the caller may not see, is bad input at its field (400
        ``bad_dependency``, as the API answers a dependency on a job that does not exist
        or is not yours), not a missing page or a 403 with no field (``23_1`` of
        another's array raised Forbidden where ``24``, the same task, was a 400 at
        ``depends_on[0].job``: found 2026-12-07)."""
        try:
            return self.job_id(ref)
        except (NotFound, Forbidden) as error:
            raise InvalidRequest(400, [{**e, "field": f"depends_on[{k}].job",
                                        "code": "bad_dependency"}
                                       for e in error.errors]) from error

    def submit_batch(self, jobs: Iterable[dict[str, Any]], *, tenant: str | None = None,
                     idempotency_key: str | None = None) -> list[Job]:
        """Submit up to 1,000 jobs of one tenant, all or none (one transaction). A spec's
        own ``tenant`` key, if any, must be the batch's. Errors name ``jobs[i].field``."""
        specs = [dict(spec) for spec in jobs]
        if not specs:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH} jobs, not 0: nothing to submit")
        if len(specs) > MAX_BATCH:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH} jobs, not {len(specs)}: it is "
                             "one transaction; submit larger sweeps as several batches")
        named = {spec.pop("tenant") for spec in specs if "tenant" in spec}
        if tenant is None and len(named) == 1:
            tenant = named.pop()
        elif named - {tenant}:
            raise ValueError(f"a batch is for one tenant; the specs name {sorted(named)}")
        tenant = tenant or self.default_tenant()
        for spec in specs:
            if spec.get("depends_on") is not None:
                spec["depends_on"] = self.dependencies(spec["depends_on"])
        body: dict[str, Any] = {"jobs": [{k: v for k, v in s.items() if v is not None}
                                         for s in specs]}
        if tenant:
            body["tenant"] = tenant
        response = self._http.post("/jobs/batch/", body,
                                   headers=_keyed(body, idempotency_key))
        replayed = response.status == 200
        return [Job(self, data, replayed=replayed) for data in response.data["jobs"]]

    def cancel(self, job_id: int | str, why: str | None = None) -> Job:
        """Cancel a job by id, or a task by its name (``"412_7"``): one request for an
        id (``client.job(id).cancel()`` without the read first). A task alone: the
        array's other tasks go on (:meth:`cancel_array` cancels them all)."""
        return Job(self, {"id": self.job_id(job_id)}).cancel(why)

    def cancel_array(self, array_id: int, why: str | None = None) -> list[Job]:
        """Cancel every task of array ``array_id`` that has not ended, all in one
        transaction; returns the tasks it cancelled. :class:`gpuq.Conflict` if every task
        has ended already, unless this call's own earlier try did it (then [])."""
        body = {} if why is None else {"why": why}
        try:
            response = self._http.post(f"/arrays/{int(array_id)}/cancel/", body)
        except Conflict as error:
            if error.attempts > 1 and self.array(array_id).is_final:
                return []
            raise
        return [Job(self, data) for data in response.data.get("jobs") or []]

    # ------------------------------------------------------------------ read
    def job(self, job_id: int | str) -> Job:
        """A job's detail (state, pending reason, position, estimate, history, ...), by
        its id or, for an array's task, its name (``"412_7"``)."""
        array_id, index = parse_ref(job_id)
        if index is not None:
            return self._task(array_id, index)
        return Job(self, self._http.get(f"/jobs/{array_id}/"), detailed=True)

    def job_id(self, ref: int | str) -> int:
        """The id of a job given by its id or an array task's name (``"412_7"``, read)."""
        array_id, index = parse_ref(ref)
        return array_id if index is None else self._task(array_id, index).id

    def _task(self, array_id: int, index: int) -> Job:
        """Task ``index`` of array ``array_id``. An array's tasks are inserted together,
        so task i is usually job ``array_id + i``: that one is read first; the array's
        list is searched only when it is not (ids taken by another insert meanwhile)."""
        try:
            guess = self._http.get(f"/jobs/{array_id + index}/")
        except ApiError:
            guess = None
        if guess and guess.get("array_id") == array_id and guess.get("array_index") == index:
            return Job(self, guess, detailed=True)
        missing = NotFound(404, [{"field": None, "code": "not_found",
                                  "message": f"No task {array_id}_{index}: no job array "
                                             f"{array_id} of yours has a task {index}."}])
        try:
            for job in self.jobs(array=array_id, page_size=1000):
                if job.get("array_index") == index:
                    return self.job(job.id)
        except InvalidRequest as error:
            # no array of that id: the listing's 400 names its ?array= parameter, which
            # the command line read as its own --array flag (a --dependency afterok:80_0
            # was refused as "--array: No job array 80")
            if [e.get("field") for e in error.errors] == ["array"]:
                raise missing from error
            raise
        raise missing

    def array(self, array_id: int) -> JobArray:
        """A job array (``GET /arrays/{id}/``): its size, ``max_running``, ``states`` (tasks
        per state) and ``depends_on``. Its tasks: ``.tasks()``."""
        return JobArray(self, self._http.get(f"/arrays/{int(array_id)}/"))

    def jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job you may see that matches, newest first, over every page. Filters:
        ``tenant``, ``state`` (one or a list, any case), ``owner``, ``size_class`` (one or a list),
        ``array`` (an array's tasks), ``submitted_after``, ``submitted_before`` (datetime
        or ISO text), ``mine=True`` (your own), ``page_size`` (1 to 1,000)."""
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
                text = one.isoformat() if isinstance(one, datetime) else str(one)
                # states in any case, as gpuq queue --state takes them (the API's are
                # upper case: state="queued" was a 400)
                params.append((name, text.upper() if name == "state" else text))
        for data in self._http.pages("/jobs/", params):
            yield Job(self, data)

    def tenants(self) -> list[Tenant]:
        """Every tenant: guarantee, borrow limit, GPUs held and borrowed, decayed usage,
        fair share and its rank, queue depth."""
        return [Tenant(data) for data in self._http.pages("/tenants/")]

    def tenant(self, name: str) -> Tenant:
        return Tenant(self._http.get(f"/tenants/{name}/"))
