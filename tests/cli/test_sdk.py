"""The SDK (``gpuq.Client``, ``gpuq.Job``) against a live API server over real HTTP: every
call, the errors with the API's field messages, bad and revoked tokens, the
configuration, and retries through a proxy that fails on purpose (a retried submit never
makes two jobs)."""

from __future__ import annotations

import http.server
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gpuq
import pytest
from gpuq import config

from .conftest import Live

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------- config
def test_url_and_token_come_from_the_arguments_then_the_environment_then_the_file(
        live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GPUQ_URL", raising=False)
    monkeypatch.delenv("GPUQ_TOKEN", raising=False)
    with pytest.raises(gpuq.ConfigError, match="GPUQ_URL"):
        gpuq.Client()
    path = config.write_file({"url": live.url, "token": live.keys["nlp-r1"]})
    assert path == tmp_path / ".config" / "gpuq" / "config.toml"
    assert gpuq.Client().me()["username"] == "nlp-r1"
    monkeypatch.setenv("GPUQ_TOKEN", live.keys["vision-r1"])
    assert gpuq.Client().me()["username"] == "vision-r1"
    assert gpuq.Client(token=live.keys["vision-lead"]).me()["username"] == "vision-lead"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("GPUQ_TOKEN")
    with pytest.raises(gpuq.ConfigError, match="gpuq login"):
        gpuq.Client(url=live.url)


def test_the_config_file_escapes_what_toml_needs(tmp_path: Path) -> None:
    path = config.write_file({"url": 'http://x/"q"\\', "token": "t\u0001"}, tmp_path / "c.toml")
    assert config.read_file(path) == {"url": 'http://x/"q"\\', "token": "t\u0001"}


# ---------------------------------------------------------------------------- submit
def test_submit_returns_a_job_with_its_fields_as_attributes(live: Live) -> None:
    client = live.client()
    job = client.submit(name="sdk-one", gpus=2, max_runtime_s=600, checkpointable=True)
    assert isinstance(job, gpuq.Job)
    assert (job.tenant, job.name, job.gpus, job.state) == ("vision", "sdk-one", 2, "QUEUED")
    assert job.idempotency_key.startswith("gpuq-") and not job.replayed
    assert job.max_runtime_s == 600  # a detail field: read when first asked for
    assert job.checkpointable is True
    with pytest.raises(AttributeError):
        _ = job.no_such_field
    again = client.submit(name="sdk-one", gpus=2, max_runtime_s=600, checkpointable=True,
                          idempotency_key=job.idempotency_key)
    assert again.id == job.id and again.replayed


def test_submit_batch_is_all_or_nothing_and_names_the_bad_job(live: Live) -> None:
    client = live.client("vision-r2")
    before = {j.id for j in client.jobs(mine=True, state="QUEUED")}
    with pytest.raises(gpuq.InvalidRequest) as refused:
        client.submit_batch([{"name": "ok", "gpus": 1}, {"name": "huge", "gpus": 64}])
    assert refused.value.errors[0]["field"] == "jobs[1].gpus"
    assert refused.value.code == "never_fits"
    assert {j.id for j in client.jobs(mine=True, state="QUEUED")} == before
    jobs = client.submit_batch([{"name": f"b-{i}", "gpus": 1} for i in range(3)],
                               tenant="vision", idempotency_key="sdk-batch-1")
    assert [j.name for j in jobs] == ["b-0", "b-1", "b-2"]
    retried = client.submit_batch([{"name": f"b-{i}", "gpus": 1} for i in range(3)],
                                  tenant="vision", idempotency_key="sdk-batch-1")
    assert [j.id for j in retried] == [j.id for j in jobs] and retried[0].replayed
    # an empty batch is told there is nothing to submit, not to split "larger sweeps"
    with pytest.raises(ValueError, match="1 to 1000 jobs, not 0: nothing to submit$"):
        client.submit_batch([])


def test_errors_carry_the_apis_field_messages(live: Live) -> None:
    client = live.client()
    with pytest.raises(gpuq.InvalidRequest) as unknown:
        client.submit(tenant="nope", name="x", gpus=1)
    assert unknown.value.status == 400
    assert unknown.value.field == "tenant"
    assert "No tenant named 'nope'" in unknown.value.message
    with pytest.raises(gpuq.InvalidRequest) as huge:
        client.submit(name="x", gpus=4096)
    assert huge.value.field_messages()["gpus"][0].startswith("This job can never run")
    assert isinstance(huge.value, gpuq.ApiError)
    with pytest.raises(gpuq.Forbidden):
        client.submit(tenant="nlp", name="x", gpus=1)
    with pytest.raises(gpuq.NotFound):
        client.job(10**9)
    with pytest.raises(TypeError, match="unknown job filter"):
        list(client.jobs(tenat="vision"))


# ---------------------------------------------------------------------------- read
def test_jobs_iterates_over_every_page(live: Live) -> None:
    client = live.client("vision-r2")
    made = {j.id for j in client.submit_batch([{"name": f"p-{i}", "gpus": 1}
                                               for i in range(23)])}
    listed = [j.id for j in client.jobs(mine=True, page_size=5)]
    assert made <= set(listed) and len(listed) == len(set(listed))
    assert listed == sorted(listed, reverse=True)  # newest first, as the API lists them
    assert all(j.owner == "vision-r2" for j in client.jobs(mine=True, state=["QUEUED"]))
    # a state in any case, as gpuq queue --state takes it (a 400 until 2026-12-07)
    assert {j.id for j in client.jobs(mine=True, state="queued")} == {
        j.id for j in client.jobs(mine=True, state="QUEUED")} >= made
    for job_id in made:
        client.cancel(job_id, why="cleanup")


def test_job_refresh_history_logs_and_cancel(live: Live) -> None:
    client = live.client()
    job = client.job(client.submit(name="sdk-life", gpus=1).id)
    assert job.refresh() is job and job.state == "QUEUED"
    assert [h["to_state"] for h in job.history()] == ["SUBMITTED", "QUEUED"]
    tail = job.logs()
    assert (tail.job_id, tail.at, tail.stdout, tail.stderr) == (job.id, None, "", "")
    assert job.cancel(why="done with it") is job and job.state == "CANCELLED"
    assert job.history()[-1]["reason"] == "Cancelled"
    assert job.is_final
    with pytest.raises(gpuq.Conflict):
        job.cancel()
    with pytest.raises(gpuq.Forbidden):
        live.client("nlp-r1").job(job.id)


def test_wait_returns_the_final_job_or_raises_timeout(live: Live) -> None:
    client = live.client()
    job = client.submit(name="sdk-wait", gpus=1)
    with pytest.raises(TimeoutError, match="still QUEUED"):
        job.wait(timeout=0.5, poll_s=0.1)
    threading.Timer(0.5, lambda: client.cancel(job.id)).start()
    assert job.wait(timeout=30, poll_s=0.1).state == "CANCELLED"


class _FlakyHttp:
    """A transport that cannot reach the server for its first ``down`` reads."""

    def __init__(self, down: int, error: Exception, final: bool = True) -> None:
        self.down, self.error, self.final, self.reads = down, error, final, 0

    def get(self, path: str) -> dict:
        self.reads += 1
        if self.reads <= self.down:
            raise self.error
        return {"id": 7, "state": "COMPLETED" if self.final else "RUNNING"}


@pytest.mark.parametrize("error", [gpuq.ConnectionFailed("cannot reach"),
                                   gpuq.ServerError(502, [])])
def test_wait_polls_on_through_a_server_restart(error) -> None:
    """Job.wait raised ConnectionFailed 11 s into a 15 s restart of the server, ending a
    pipeline's long wait (a pipeline author's session, 2026-12-07)."""
    from types import SimpleNamespace

    from gpuq.client import Job

    http = _FlakyHttp(down=3, error=error)
    job = Job(SimpleNamespace(_http=http), {"id": 7, "state": "RUNNING"})
    assert job.wait(timeout=10, poll_s=0.01).state == "COMPLETED" and http.reads == 4
    # an outage longer than outage_s is the server gone: raised
    gone = Job(SimpleNamespace(_http=_FlakyHttp(down=10**6, error=error)), {"id": 7})
    with pytest.raises(type(error)):
        gone.wait(timeout=10, poll_s=0.01, outage_s=0.05)
    # the timeout still holds while the server is away
    away = Job(SimpleNamespace(_http=_FlakyHttp(down=10**6, error=error)), {"id": 7})
    with pytest.raises(TimeoutError):
        away.wait(timeout=0.1, poll_s=0.01)
    # a 4xx is not an outage: raised at once
    refused = _FlakyHttp(down=1, error=gpuq.NotFound(404, []))
    with pytest.raises(gpuq.NotFound):
        Job(SimpleNamespace(_http=refused), {"id": 7}).wait(timeout=10, poll_s=0.01)
    assert refused.reads == 1


def test_tenants_give_the_fair_share_figures(live: Live) -> None:
    tenants = {t.name: t for t in live.client().tenants()}
    assert set(tenants) == {"nlp", "vision"}
    vision = tenants["vision"]
    assert (vision.guaranteed_gpus, vision.borrow_limit_gpus, vision.your_role) == (
        8, 8, "researcher")
    assert vision["quota_limit_gpus"] == 16
    assert live.client().tenant("nlp").guaranteed_gpus == 8


# ---------------------------------------------------------------------------- tokens
def test_a_bad_or_revoked_token_raises_unauthorized(live: Live) -> None:
    with pytest.raises(gpuq.Unauthorized, match="Unknown or revoked token"):
        gpuq.Client(url=live.url, token="gsu_nope").me()
    client = live.client("vision-r2")
    key = client._http.post("/tokens/", {"name": "sdk-revoke"}).data["key"]
    fresh = gpuq.Client(url=live.url, token=key)
    token_id = next(t["id"] for t in fresh._http.get("/tokens/") if t["prefix"] == key[:12])
    fresh._http.request("DELETE", f"/tokens/{token_id}/")
    with pytest.raises(gpuq.Unauthorized):
        fresh.jobs().__next__()


# ---------------------------------------------------------------------------- retries
class FlakyProxy:
    """A proxy in front of the live server that misbehaves as told, request by request:
    ``"503"`` answers 503 itself, ``"drop"`` closes the connection without an answer,
    ``"lose"`` forwards the request and then answers 502 (the server did it; the client
    never hears), ``"pass"`` forwards. Once the plan is spent, everything passes."""

    def __init__(self, upstream: str) -> None:
        self.plan: list[str] = []
        self.seen: list[tuple[str, str, str | None]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
                what = proxy.plan.pop(0) if proxy.plan else "pass"
                if what == "503":
                    self._answer(503, b'{"errors": []}', {"Retry-After": "0"})
                    return
                if what == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                request = urllib.request.Request(upstream + self.path, data=body or None,
                                                 method=self.command)
                for name in ("Authorization", "Content-Type", "Idempotency-Key", "Accept"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, data = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, data = error.code, error.read()
                if what == "lose":
                    self._answer(502, b"<html>bad gateway</html>", {})
                    return
                self._answer(status, data, {"Content-Type": "application/json"})

            def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(live: Live) -> Iterator[FlakyProxy]:
    started = FlakyProxy(live.url)
    yield started
    started.close()


def test_a_submit_whose_answer_is_lost_is_retried_and_makes_one_job(
        live: Live, proxy: FlakyProxy) -> None:
    client = gpuq.Client(url=proxy.url, token=live.keys["vision-r1"], backoff_s=0.01)
    client.me()
    proxy.plan = ["lose", "drop", "503"]
    job = client.submit(name="lost-answer", gpus=1)
    posts = [s for s in proxy.seen if s[0] == "POST"]
    assert len(posts) == 4 and len({key for _m, _p, key in posts}) == 1  # one key, 4 tries
    assert job.replayed  # the server had made it at the first try
    named = [j.id for j in live.client().jobs(mine=True) if j.name == "lost-answer"]
    assert named == [job.id]


def test_a_retried_cancel_whose_first_try_worked_is_not_an_error(
        live: Live, proxy: FlakyProxy) -> None:
    job_id = live.client().submit(name="cancel-lost", gpus=1).id
    client = gpuq.Client(url=proxy.url, token=live.keys["vision-r1"], backoff_s=0.01)
    proxy.plan = ["lose"]
    assert client.cancel(job_id).state == "CANCELLED"


def test_retries_give_up_after_their_count(live: Live, proxy: FlakyProxy) -> None:
    client = gpuq.Client(url=proxy.url, token=live.keys["vision-r1"], retries=2,
                         backoff_s=0.01)
    proxy.plan = ["503"] * 3
    with pytest.raises(gpuq.ServerError):
        client.me()
    assert len(proxy.seen) == 3
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = gpuq.Client(url=f"http://127.0.0.1:{port}", token="x", retries=1, backoff_s=0.01)
    with pytest.raises(gpuq.ConnectionFailed, match="cannot reach"):
        gone.tenants()


# ---------------------------------------------------------------------------- pipelines
def test_submit_array_gets_and_cancels_an_array_and_its_tasks(live: Live) -> None:
    client = live.client("vision-r1")
    sweep = client.submit_array(name="sdk-sweep", gpus=1, count=4, max_running=2,
                                command="python sweep.py")
    assert (sweep.count, sweep.max_running, sweep.tenant, sweep.name) == (
        4, 2, "vision", "sdk-sweep")
    assert [job.ref for job in sweep.jobs] == [f"{sweep.id}_{i}" for i in range(4)]
    assert sweep.jobs[0].id == sweep.id  # the array's id is its task 0's
    read = client.array(sweep.id)
    assert (read.count, read.max_running, read.states, read.owner) == (
        4, 2, {"QUEUED": 4}, "vision-r1")
    assert [t.id for t in read.tasks()] == [j.id for j in sweep.jobs]
    assert [j.id for j in client.jobs(array=sweep.id)] == sorted(
        (j.id for j in sweep.jobs), reverse=True)  # newest first, as every list
    third = client.job(f"{sweep.id}_2")
    assert (third.id, third.array_index) == (sweep.jobs[2].id, 2)
    assert read.task(3).id == sweep.jobs[3].id
    # a task of an array another may not see: bad input at its field, as its id is (a
    # Forbidden with no field until 2026-12-07)
    other = live.client("vision-r2")
    for ref in (f"{sweep.id}_2", sweep.jobs[2].id):
        with pytest.raises(gpuq.InvalidRequest, match="not yours to see") as hidden:
            other.submit(name="after-theirs", gpus=1, depends_on=[ref])
        assert (hidden.value.field, hidden.value.code) == ("depends_on[0].job",
                                                           "bad_dependency"), ref
    assert client.cancel(f"{sweep.id}_1").state == "CANCELLED"
    cancelled = read.cancel(why="wrong grid")
    assert sorted(j.array_index for j in cancelled) == [0, 2, 3]
    assert read.wait(timeout=5, poll_s=0.1).states == {"CANCELLED": 4} and read.is_final
    with pytest.raises(gpuq.Conflict, match="has ended already"):
        client.cancel_array(sweep.id)
    with pytest.raises(gpuq.NotFound, match=f"No task {sweep.id}_9"):
        client.job(f"{sweep.id}_9")
    with pytest.raises(gpuq.InvalidRequest, match=f"No task {sweep.id}_9") as awaits:
        client.submit(name="after", gpus=1, depends_on=[f"{sweep.id}_9"])
    assert awaits.value.field == "depends_on[0].job"
    with pytest.raises(gpuq.InvalidRequest) as refused:
        client.submit_array(name="too-many", gpus=1, count=10_001)
    assert refused.value.field == "array.count"
    with pytest.raises(gpuq.Forbidden):
        live.client("nlp-r1").array(sweep.id)


def test_an_array_submitted_again_with_its_key_is_the_same_array(live: Live) -> None:
    client = live.client("vision-r1")
    first = client.submit_array(name="keyed-sweep", gpus=1, count=3,
                                idempotency_key="sweep-77")
    again = client.submit_array(name="keyed-sweep", gpus=1, count=3,
                                idempotency_key="sweep-77")
    assert again.replayed and not first.replayed and again.id == first.id
    with pytest.raises(gpuq.Conflict):
        client.submit_array(name="keyed-sweep", gpus=1, count=4, idempotency_key="sweep-77")
    client.cancel_array(first.id)


def test_depends_on_takes_jobs_ids_task_names_and_pairs(live: Live) -> None:
    client = live.client("vision-r1")
    train = client.submit(name="sdk-train", gpus=1)
    sweep = client.submit_array(name="sdk-deps", gpus=1, count=2, depends_on=[train])
    assert client.array(sweep.id).depends_on == [{"job": train.id, "when": "ok"}]
    report = client.submit(name="sdk-report", gpus=1,
                           depends_on=[(train, "notok"), f"{sweep.id}_1",
                                       {"job": sweep.id, "when": "any"}])
    assert report.depends_on == [{"job": train.id, "when": "notok"},
                                 {"job": sweep.jobs[1].id, "when": "ok"},
                                 {"job": sweep.id, "when": "any"}]
    batch = client.submit_batch([{"name": "b0", "gpus": 1},
                                 {"name": "b1", "gpus": 1,
                                  "depends_on": [{"index": 0}, (train.id, "any")]}])
    assert batch[1].depends_on == [{"job": batch[0].id, "when": "ok"},
                                   {"job": train.id, "when": "any"}]
    with pytest.raises(gpuq.InvalidRequest) as refused:
        client.submit(name="x", gpus=1, depends_on=[(train, "afterok")])
    assert refused.value.field == "depends_on[0].when"


def test_a_retried_array_cancel_whose_first_try_worked_is_not_an_error(
        live: Live, proxy: FlakyProxy) -> None:
    array_id = live.client().submit_array(name="cancel-lost-array", gpus=1, count=2).id
    client = gpuq.Client(url=proxy.url, token=live.keys["vision-r1"], backoff_s=0.01)
    proxy.plan = ["lose"]
    assert client.cancel_array(array_id) == []
    assert live.client().array(array_id).states == {"CANCELLED": 2}
