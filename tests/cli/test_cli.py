"""The ``gpuq`` command against a live API server over real HTTP (``conftest.Live``): every
command, its exit status, the API's messages at their flags, the output formats, 80
columns, ``--watch`` and an interactive ``gpuq login`` on a terminal.

No scheduler runs here, so jobs stay QUEUED ("not looked at yet"); the running, failing
and waiting jobs are in ``test_cli_e2e.py``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import stat
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

from .conftest import GPUQ, PASSWORD, Live, lines_fit

pytestmark = pytest.mark.slow


def submit(live: Live, *args: str, who: str = "vision-r1") -> int:
    done = live.gpuq("submit", "--parsable", *args, who=who)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


# ---------------------------------------------------------------------------- login
def test_login_asks_for_the_username_and_password_and_stores_a_token_mode_0600(
        live: Live, terminal) -> None:
    env = live.env(None)
    term = terminal([str(GPUQ), "login", "--url", live.url], env)
    term.read_until("Username: ")
    term.type("vision-r2\n")
    term.read_until("Password: ")
    term.type(PASSWORD + "\n")
    assert term.wait() == 0, term.text
    assert PASSWORD not in term.text  # getpass: the password is not echoed
    path = Path(env["HOME"]) / ".config" / "gpuq" / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stored = tomllib.loads(path.read_text())
    assert stored["url"] == live.url and stored["username"] == "vision-r2"
    assert stored["token"].startswith("gsu_")
    # the file alone is enough now: no GPUQ_URL or GPUQ_TOKEN
    env.pop("GPUQ_URL")
    done = live.gpuq("queue", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ID")


def test_login_with_a_wrong_password_is_refused_and_writes_nothing(live: Live) -> None:
    env = live.env(None)
    done = live.gpuq("login", "--url", live.url, "--username", "vision-r1",
                     "--password-stdin", stdin="not-the-password\n", env=env)
    assert done.returncode == 1
    assert "username or password was refused" in done.stderr
    assert not (Path(env["HOME"]) / ".config" / "gpuq" / "config.toml").exists()


def test_login_with_a_token_from_standard_input(live: Live) -> None:
    env = live.env(None)
    done = live.gpuq("login", "--url", live.url, "--with-token",
                     stdin=live.keys["nlp-r1"] + "\n", env=env)
    assert done.returncode == 0, done.stderr
    assert "as nlp-r1" in done.stdout
    assert live.keys["nlp-r1"] in (Path(env["HOME"]) / ".config/gpuq/config.toml").read_text()


# ---------------------------------------------------------------------------- tokens
def test_a_bad_token_is_refused_with_a_hint_to_log_in(live: Live) -> None:
    done = live.gpuq("queue", env=live.env("vision-r1", GPUQ_TOKEN="gsu_not-a-real-token"))
    assert done.returncode == 1
    assert "Unknown or revoked token" in done.stderr and "gpuq login" in done.stderr


def test_a_revoked_token_is_refused(live: Live) -> None:
    client = live.client("vision-r1")
    key = client._http.post("/tokens/", {"name": "to-revoke"}).data["key"]
    mine = [t for t in client._http.get("/tokens/") if t["prefix"] == key[:12]]
    env = live.env("vision-r1", GPUQ_TOKEN=key)
    assert live.gpuq("queue", env=env).returncode == 0
    request = urllib.request.Request(f"{live.url}/api/v1/tokens/{mine[0]['id']}/",
                                     method="DELETE",
                                     headers={"Authorization": f"Bearer {key}"})
    urllib.request.urlopen(request, timeout=10).close()
    done = live.gpuq("queue", env=env)
    assert done.returncode == 1
    assert "Unknown or revoked token" in done.stderr


def test_no_configuration_says_what_to_set(live: Live) -> None:
    env = live.env(None)
    env.pop("GPUQ_URL")
    done = live.gpuq("queue", env=env)
    assert done.returncode == 1
    assert "GPUQ_URL" in done.stderr and "gpuq login" in done.stderr


# ---------------------------------------------------------------------------- submit
def test_submit_sends_every_field_of_its_flags(live: Live) -> None:
    job_id = submit(live, "--tenant", "vision", "--name", "every-flag", "--gpus", "8",
                    "--gpus-per-node", "4", "--gpu-type", "H100", "--time", "2h",
                    "--priority", "5", "--checkpointable", "--checkpoint-interval", "30m",
                    "--checkpoint-time", "2m", "--restart-time", "1:30", "--min-gpus", "4",
                    "--preemptible", "--interactive", "--command", "python train.py")
    job = live.client().job(job_id)
    assert (job.tenant, job.name, job.gpus, job.gpus_per_node, job.gpu_type) == (
        "vision", "every-flag", 8, 4, "H100")
    assert (job.max_runtime_s, job.priority, job.checkpoint_interval_s,
            job.checkpoint_time_s, job.restart_s, job.min_gpus) == (7200, 5, 1800, 120, 90, 4)
    assert job.checkpointable and job.preemptible and job.interactive
    assert job.command == "python train.py"
    assert job.idempotency_key.startswith("gpuq-")  # a generated key, by default


def test_submit_prints_the_job_and_names_it_after_the_command(live: Live) -> None:
    done = live.gpuq("submit", "--gpus", "1", "--time", "10m", "--",
                     "python", "sweep.py", "--lr", "3e-4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Submitted job ") and "to vision (QUEUED)" in done.stdout
    job_id = int(done.stdout.split()[2])
    job = live.client().job(job_id)
    assert job.name == "sweep.py" and job.command == "python sweep.py --lr 3e-4"


def test_submit_from_a_yaml_file_with_flags_that_override_it(live: Live, tmp_path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("---\n# a training run\nname: from-yaml\ngpus: 2\ntime: 1h30m\n"
                    "checkpointable: yes\ncommand: |\n  python train.py \\\n"
                    "    --epochs 3\n")
    job_id = submit(live, "-f", str(path), "--gpus", "4")
    job = live.client().job(job_id)
    assert (job.name, job.gpus, job.max_runtime_s, job.checkpointable) == (
        "from-yaml", 4, 5400, True)
    assert job.command == "python train.py \\\n  --epochs 3"  # the API trims the end


def test_submit_a_json_batch_file_all_at_once(live: Live, tmp_path) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"tenant": "vision", "jobs": [
        {"name": f"lr-{i}", "gpus": 1, "max_runtime_s": 600} for i in range(3)]}))
    done = live.gpuq("submit", "-f", str(path), "--parsable")
    assert done.returncode == 0, done.stderr
    ids = [int(line) for line in done.stdout.split()]
    assert [live.client().job(i).name for i in ids] == ["lr-0", "lr-1", "lr-2"]


@pytest.mark.parametrize("count", [0, 1001])
def test_a_batch_file_of_no_jobs_or_too_many_is_a_usage_error(live: Live, tmp_path,
                                                             count: int) -> None:
    # a traceback (the SDK's ValueError) with exit 1 until 2026-12-07
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"tenant": "vision", "jobs": [
        {"name": f"lr-{i}", "gpus": 1} for i in range(count)]}))
    done = live.gpuq("submit", "-f", str(path))
    assert done.returncode == 2, done.stderr
    assert f"--file: a batch holds 1 to 1000 jobs, not {count}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_url_that_is_not_the_schedulers_is_one_line_not_a_traceback_or_a_page(
        live: Live) -> None:
    bad = live.gpuq("queue", "--url", "notaurl")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "not an http(s) URL: 'notaurl' (give http://host:port)" in bad.stderr
    wrong = live.gpuq("queue", "--url", live.url + "/foo")
    assert wrong.returncode == 1 and "<!DOCTYPE" not in wrong.stderr, wrong.stderr
    assert "HTTP 404" in wrong.stderr and "no such endpoint here" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


def test_a_list_filter_naming_nobody_is_refused_at_its_flag(live: Live) -> None:
    # `gpuq queue --user pretrain-r3` (no such user) printed an empty table and exited 0
    # (an operator's session, 2026-12-07)
    nobody = live.gpuq("queue", "--user", "nope", who="vision-lead")
    assert nobody.returncode == 2, nobody.stderr
    assert "gpuq queue: error: --user: No user named 'nope'" in nobody.stderr
    team = live.gpuq("queue", "--tenant", "nope")
    assert team.returncode == 2 and "gpuq queue: error: --tenant: No tenant named" in team.stderr


def test_submit_refusals_print_the_apis_message_at_the_flag_and_exit_2(live: Live) -> None:
    unknown = live.gpuq("submit", "--tenant", "nope", "--gpus", "1", "--name", "x")
    assert unknown.returncode == 2
    assert "gpuq submit: error: --tenant: No tenant named 'nope'" in unknown.stderr
    huge = live.gpuq("submit", "--gpus", "64", "--name", "huge")
    assert huge.returncode == 2
    assert "--gpus: This job can never run" in huge.stderr
    shape = live.gpuq("submit", "--gpus", "6", "--gpus-per-node", "4", "--name", "odd")
    assert shape.returncode == 2 and "--gpus-per-node: " in shape.stderr
    bare = live.gpuq("submit", "--gpus", "1", "--time", "90")
    assert bare.returncode == 2 and "has no unit" in bare.stderr
    two_teams = live.gpuq("submit", "--gpus", "1", "--name", "x", who="both-r1")
    assert two_teams.returncode == 2
    assert "--tenant is required: you are a member of nlp, vision" in two_teams.stderr \
        or "--tenant is required: you are a member of vision, nlp" in two_teams.stderr
    not_mine = live.gpuq("submit", "--tenant", "nlp", "--gpus", "1", "--name", "x")
    assert not_mine.returncode == 1 and "not a member of tenant 'nlp'" in not_mine.stderr


def test_submit_with_the_same_idempotency_key_returns_the_same_job(live: Live) -> None:
    first = submit(live, "--gpus", "1", "--name", "keyed", "--idempotency-key", "run-77")
    again = live.gpuq("submit", "--gpus", "1", "--name", "keyed", "--idempotency-key",
                      "run-77")
    assert again.returncode == 0 and f"Submitted job {first} " in again.stdout
    assert "a retry" in again.stdout
    other = live.gpuq("submit", "--gpus", "2", "--name", "keyed", "--idempotency-key",
                      "run-77")
    assert other.returncode == 1 and "with a different spec" in other.stderr


def test_a_key_with_other_than_ascii_characters_is_one_job_too(live: Live) -> None:
    # a header is ASCII: the command line (the SDK) sends such a key in the body; it
    # raised UnicodeEncodeError (found by trying the product, 2026-12-07)
    first = submit(live, "--gpus", "1", "--name", "keyed", "--idempotency-key", "ключ-🔑")
    again = live.gpuq("submit", "--gpus", "1", "--name", "keyed", "--idempotency-key",
                      "ключ-🔑")
    assert again.returncode == 0 and f"Submitted job {first} " in again.stdout, again.stderr
    assert "a retry" in again.stdout


# ---------------------------------------------------------------------------- queue
def test_queue_filters_mine_tenant_and_state(live: Live) -> None:
    mine = submit(live, "--gpus", "1", "--name", "q-mine", who="vision-r2")
    theirs = submit(live, "--gpus", "1", "--name", "q-theirs", who="vision-r1")
    nlp = submit(live, "--gpus", "1", "--name", "q-nlp", who="nlp-r1")

    def ids(*args: str, who: str) -> set[int]:
        done = live.gpuq("queue", "-o", "json", *args, who=who)
        assert done.returncode == 0, done.stderr
        return {r["id"] for r in json.loads(done.stdout)}

    assert mine in ids(who="vision-lead") and theirs in ids(who="vision-lead")
    assert ids("--mine", who="vision-lead").isdisjoint({mine, theirs})
    assert mine in ids("--mine", who="vision-r2") and theirs not in ids("--mine",
                                                                          who="vision-r2")
    assert nlp in ids("--tenant", "nlp", who="op") and theirs not in ids("--tenant", "nlp",
                                                                         who="op")
    assert ids("--state", "RUNNING", who="op") == set()
    live.gpuq("cancel", str(theirs))
    assert theirs not in ids(who="vision-r1")  # like squeue: live jobs by default
    assert theirs in ids("--state", "cancelled", who="vision-r1")
    assert theirs in ids("--all", who="vision-r1")
    refused = live.gpuq("queue", "--tenant", "nlp", who="vision-lead")
    assert refused.returncode == 1 and "not a member of tenant 'nlp'" in refused.stderr


def test_queue_follows_every_page_and_shows_positions(live: Live) -> None:
    client = live.client("nlp-r1")
    made = client.submit_batch([{"name": f"page-{i}", "gpus": 1} for i in range(230)])
    done = live.gpuq("queue", "-o", "json", "--mine", "--positions", "300", who="nlp-r1")
    rows = json.loads(done.stdout)
    listed = [r["id"] for r in rows]
    assert set(job.id for job in made) <= set(listed)  # the API's pages are 100 each
    assert len(listed) == len(set(listed))
    positions = sorted(r["queue_position"]["tenant"] for r in rows)
    assert positions == list(range(1, len(rows) + 1))
    table = live.gpuq("queue", "--mine", "--positions", "5", who="nlp-r1")
    assert "(positions of the first 5 queued jobs only" in table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header == ["ID", "NAME", "TEAM", "OWNER", "GPUS", "STATE", "POSITION", "REASON",
                      "START"]
    live.gpuq("cancel", "--mine", "--yes", who="nlp-r1")


def test_queue_json_yaml_and_csv_say_the_same(live: Live) -> None:
    submit(live, "--gpus", "2", "--name", 'quote"and:colon #yes', who="vision-r1")
    as_json = json.loads(live.gpuq("queue", "-o", "json").stdout)
    as_yaml = yaml.safe_load(live.gpuq("queue", "-o", "yaml").stdout)
    as_csv = list(csv.DictReader(io.StringIO(live.gpuq("queue", "-o", "csv").stdout)))
    assert as_json == as_yaml
    assert [int(r["id"]) for r in as_csv] == [r["id"] for r in as_json]
    assert {r["name"] for r in as_csv} == {r["name"] for r in as_json}
    assert list(as_csv[0]) == ["id", "name", "tenant", "owner", "gpus", "state", "position",
                               "reason", "start"]


def test_every_table_fits_an_80_column_terminal(live: Live) -> None:
    long = "a-very-long-job-name-that-goes-on-and-on-for-sixty-characters-x"
    job_id = submit(live, "--gpus", "2", "--name", long, "--time", "3h",
                    "--command", "python " + "x" * 300, who="vision-r1")
    for args in (["queue"], ["queue", "--all"], ["share"], ["show", str(job_id)],
                 ["why", str(job_id)]):
        done = live.gpuq(*args, who="vision-lead")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip()
        assert lines_fit(done.stdout) == [], args
    queue = live.gpuq("queue", who="vision-lead").stdout
    assert "a-very-long" in queue and long not in queue  # cut, with an ellipsis
    assert "…" in queue
    wide = live.gpuq("queue", who="vision-lead", columns=200).stdout
    assert long in wide


def test_watch_redraws_in_place_until_ctrl_c_and_exits_cleanly(live: Live, terminal) -> None:
    submit(live, "--gpus", "1", "--name", "watched")
    term = terminal([str(GPUQ), "queue", "--watch", "--interval", "0.3"], live.env())
    term.read_until("watched")
    first = len(term.text)
    term.read_until("\x1b[H", after=first)  # a second frame, drawn over the first
    term.type("\x03")  # Ctrl-C
    assert term.wait() == 0, term.text
    assert "Traceback" not in term.text and "KeyboardInterrupt" not in term.text
    # the cursor is shown again after the last frame (the terminal's own echo of the
    # Ctrl-C, "^C", may come before or after it: the two race)
    last_frame = term.text.rindex("\x1b[H")
    assert "\x1b[?25h" in term.text[last_frame:].replace("^C", ""), term.text[last_frame:]
    refused = live.gpuq("queue", "--watch", "-o", "json")
    assert refused.returncode == 2


@pytest.mark.parametrize("columns", ["100", None])
def test_watch_on_a_terminal_that_reports_0x0_draws_the_table(live: Live, terminal,
                                                              columns) -> None:
    """A terminal that reports 0x0 (stty rows 0 cols 0) drew only the clock, even with
    COLUMNS=100 set: the frame was cut to one line (2026-12-07). Where the terminal says
    0, $COLUMNS and $LINES stand in, else 80x24."""
    submit(live, "--gpus", "1", "--name", "watched-0x0")
    env = live.env()
    env.pop("COLUMNS")
    if columns:
        env["COLUMNS"] = columns
    term = terminal([str(GPUQ), "queue", "--watch", "--interval", "0.3"], env,
                    columns=0, rows=0)
    term.read_until("watched-0x0")
    term.read_until("\x1b[H", after=len(term.text))  # and again in the next frame
    term.type("\x03")
    assert term.wait() == 0, term.text
    head = next(line for line in term.text.split("\x1b[H")[-1].splitlines() if line)
    assert len(head.split("\x1b[K")[0]) == int(columns or 80), head


# ---------------------------------------------------------------------------- show, why
def test_show_prints_every_field_and_the_history(live: Live) -> None:
    job_id = submit(live, "--gpus", "2", "--name", "shown", "--time", "45m")
    done = live.gpuq("show", str(job_id))
    assert done.returncode == 0, done.stderr
    detail = live.client()._http.get(f"/jobs/{job_id}/")
    for key in detail:
        if key not in ("history", "preemptions", "why_pending"):
            assert f"  {key}" in done.stdout, key
    # why_pending is a section in words, as gpuq why prints it
    words = " ".join(done.stdout.split())
    assert "Why pending" in done.stdout and detail["why_pending"]["headline"] in words
    assert "2700 (45m)" in done.stdout
    assert "History" in done.stdout and "Submitted" in done.stdout and "Admitted" in done.stdout
    as_json = json.loads(live.gpuq("show", str(job_id), "-o", "json").stdout)
    assert as_json["id"] == job_id and as_json["history"]
    history = list(csv.DictReader(io.StringIO(live.gpuq("show", str(job_id), "-o",
                                                        "csv").stdout)))
    assert [r["to_state"] for r in history] == ["SUBMITTED", "QUEUED"]
    missing = live.gpuq("show", "999999")
    assert missing.returncode == 1 and "gpuq show: error:" in missing.stderr
    someone_elses = live.gpuq("show", str(job_id), who="nlp-r1")
    assert someone_elses.returncode == 1 and "is not yours" in someone_elses.stderr


def test_why_of_a_job_the_scheduler_has_not_looked_at(live: Live) -> None:
    job_id = submit(live, "--gpus", "2", "--name", "why-me")
    done = live.gpuq("why", str(job_id))
    assert done.returncode == 0, done.stderr
    assert f"Job {job_id} (why-me, team vision) is waiting: None." in done.stdout
    assert "Not looked at by the scheduler yet." in done.stdout
    assert "Position: " in done.stdout and "in team vision's queue" in done.stdout
    assert "To start sooner:" in done.stdout
    data = json.loads(live.gpuq("why", str(job_id), "-o", "json").stdout)
    assert data["pending_reason"] == "None" and data["queue_position"]["tenant"] >= 1
    assert data["hints"]


# ---------------------------------------------------------------------------- cancel
def test_cancel_by_id_and_the_refusal_of_a_final_job(live: Live) -> None:
    job_id = submit(live, "--gpus", "1", "--name", "to-cancel")
    done = live.gpuq("cancel", str(job_id), "--why", "wrong data")
    assert done.returncode == 0 and f"Cancelled job {job_id} (to-cancel)" in done.stdout
    detail = live.client().job(job_id)
    assert detail.state == "CANCELLED"
    assert detail.history()[-1]["detail"].get("why") == "wrong data"
    again = live.gpuq("cancel", str(job_id))
    assert again.returncode == 1 and "CANCELLED is final" in again.stderr
    # the job named once ("job 65: job 65: illegal transition ..." until 2026-12-07)
    assert f"gpuq cancel: job {job_id}: illegal transition" in again.stderr
    assert f"job {job_id}: job {job_id}" not in again.stderr
    both = live.gpuq("cancel", str(job_id), "--mine")
    assert both.returncode == 2


def test_cancel_by_filter_asks_first_unless_yes(live: Live) -> None:
    a = submit(live, "--gpus", "1", "--name", "f-a", who="vision-r2")
    b = submit(live, "--gpus", "1", "--name", "f-b", who="vision-r2")
    client = live.client("vision-r2")
    no = live.gpuq("cancel", "--mine", "--state", "QUEUED", who="vision-r2", stdin="n\n")
    assert no.returncode == 1 and "Nothing cancelled" in no.stderr
    assert "Cancel these" in no.stderr and "f-a" in no.stderr
    assert client.job(a).state == "QUEUED"
    yes = live.gpuq("cancel", "--mine", "--state", "QUEUED", who="vision-r2", stdin="y\n")
    assert yes.returncode == 0, yes.stderr
    assert {client.job(a).state, client.job(b).state} == {"CANCELLED"}
    c = submit(live, "--gpus", "1", "--name", "f-c", who="vision-r2")
    quiet = live.gpuq("cancel", "--mine", "--yes", who="vision-r2")
    assert quiet.returncode == 0 and f"Cancelled job {c}" in quiet.stdout
    none = live.gpuq("cancel", "--mine", "--yes", who="vision-r2")
    assert none.returncode == 0 and "nothing to cancel" in none.stdout
    ended = live.gpuq("cancel", "--mine", "--state", "cancelled", "--yes", who="vision-r2")
    # (how many: the live server's other tests' jobs of vision-r2 count too)
    assert ended.returncode == 0 and re.fullmatch(
        r"Nothing to cancel: the \d+ matching jobs have ended \(COMPLETED, FAILED or "
        r"CANCELLED\)\.", ended.stdout.strip()), ended.stdout
    assert live.gpuq("cancel").returncode == 2


# ---------------------------------------------------------------------------- share, logs
def test_share_lists_every_team_in_fair_share_order(live: Live) -> None:
    done = live.gpuq("share")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["TEAM", "GUARANTEE", "HELD", "BORROWED", "BORROW_LIMIT",
                              "USAGE_H", "SHARE_H", "RANK"]
    assert sorted(r.split()[0] for r in rows) == ["nlp", "vision"]
    vision = next(r.split() for r in rows if r.startswith("vision"))
    assert vision[1:3] == ["8", "0"] and vision[4] == "8"
    data = json.loads(live.gpuq("share", "-o", "json").stdout)
    assert {t["name"] for t in data} == {"nlp", "vision"}
    assert {"guaranteed_gpus", "current_gpus", "borrowed_gpus", "borrow_limit_gpus",
            "usage_gpu_s", "share", "ranked_share", "share_rank"} <= set(data[0])


def test_logs_of_a_job_that_has_not_run_says_so(live: Live) -> None:
    job_id = submit(live, "--gpus", "1", "--name", "no-log")
    done = live.gpuq("logs", str(job_id))
    assert done.returncode == 0 and done.stdout == ""
    assert "no log yet" in done.stderr


# ---------------------------------------------------------------------------- wait
def test_wait_exit_status_cancelled_and_timeout(live: Live) -> None:
    job_id = submit(live, "--gpus", "1", "--name", "waited")
    late = live.gpuq("wait", str(job_id), "--timeout", "1", "--interval", "0.2")
    assert late.returncode == 5 and "still QUEUED" in late.stderr
    live.gpuq("cancel", str(job_id))
    done = live.gpuq("wait", str(job_id), "--interval", "0.2")
    assert done.returncode == 4 and f"Job {job_id} CANCELLED" in done.stdout


def test_wait_names_an_arrays_task_as_it_was_asked_for(live: Live) -> None:
    """gpuq wait 31_0 printed "Job 31 CANCELLED", the array's id (noticed 2026-12-07)."""
    done = live.gpuq("submit", "--parsable", "--gpus", "1", "--name", "sweep",
                     "--array", "0-1")
    array_id = int(done.stdout)
    task = f"{array_id}_1"
    assert live.gpuq("cancel", task).returncode == 0
    waited = live.gpuq("wait", task, "--interval", "0.2")
    assert waited.returncode == 4 and waited.stdout.strip() == f"Job {task} CANCELLED"


# ---------------------------------------------------------------------------- pipelines
def test_submit_dependency_sends_depends_on_and_show_says_it_in_words(live: Live) -> None:
    train = submit(live, "--gpus", "1", "--name", "train")
    evals = submit(live, "--gpus", "1", "--name", "eval", "--dependency", f"afterok:{train}")
    report = submit(live, "--gpus", "1", "--name", "report", "--dependency",
                    f"afterany:{evals},afternotok:{train}")
    assert live.client().job(report).depends_on == [{"job": evals, "when": "any"},
                                                   {"job": train, "when": "notok"}]
    shown = " ".join(live.gpuq("show", str(report), columns=200).stdout.split())
    assert (f"waits for job {evals} to end, job {train} to fail or be cancelled "
            f"(afterany:{evals},afternotok:{train})") in shown
    refused = live.gpuq("submit", "--gpus", "1", "--name", "x", "--dependency",
                        "afterok:999999")
    assert refused.returncode == 2
    assert "--dependency (depends_on[0].job): No job 999999" in refused.stderr
    theirs = submit(live, "--gpus", "1", "--name", "nlp-job", who="nlp-r1")
    hidden = live.gpuq("submit", "--gpus", "1", "--name", "x", "--dependency",
                       f"afterok:{theirs}")
    assert hidden.returncode == 2 and f"Job {theirs} is not yours to see" in hidden.stderr
    bad = live.gpuq("submit", "--gpus", "1", "--name", "x", "--dependency", "after:12")
    assert bad.returncode == 2 and "argument --dependency" in bad.stderr


def test_submit_an_array_prints_its_id_and_the_tasks_like_sbatch(live: Live) -> None:
    done = live.gpuq("submit", "--gpus", "1", "--name", "sweep", "--array", "0-4%2",
                     "--", "python", "sweep.py")
    assert done.returncode == 0, done.stderr
    array_id = int(done.stdout.split()[2].rstrip(":"))
    assert done.stdout.strip() == (f"Submitted array {array_id} to vision: 5 tasks "
                                   f"{array_id}_0 to {array_id}_4, at most 2 running at once")
    tasks = live.client().array(array_id).tasks()
    assert [t.array_task for t in tasks] == [f"{array_id}_{i}" for i in range(5)]
    assert {(t.array_count, t.array_max_running, t.name) for t in tasks} == {(5, 2, "sweep")}
    parsable = live.gpuq("submit", "--parsable", "--gpus", "1", "--name", "one",
                         "--array", "0")
    assert parsable.returncode == 0 and parsable.stdout.strip().isdigit()
    assert live.client().array(int(parsable.stdout)).count == 1
    for spec, says in (("1-10", "arrays here are numbered from 0: write 0-9"),
                       ("0-9:2", "a step is not supported"), ("1,3,5", "a list of indices")):
        bad = live.gpuq("submit", "--gpus", "1", "--name", "x", "--array", spec)
        assert bad.returncode == 2 and "argument --array" in bad.stderr and says in bad.stderr
    huge = live.gpuq("submit", "--gpus", "1", "--name", "x", "--array", "0-10000")
    assert huge.returncode == 2
    assert "--array (array.count): An array has 1 to 10,000 tasks." in huge.stderr


def test_an_array_from_a_job_file_and_a_dependency_on_a_task_by_its_name(
        live: Live, tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text("name: filed\ngpus: 1\narray: 0-2\ncommand: python sweep.py\n")
    array_id = submit(live, "-f", str(path))
    after = submit(live, "--gpus", "1", "--name", "after-task", "--dependency",
                   f"afterok:{array_id}_2")
    task = live.client().job(f"{array_id}_2")
    assert task.array_index == 2
    assert live.client().job(after).depends_on == [{"job": task.id, "when": "ok"}]
    # a task that does not exist is bad input at the flag, as a job that does not (2)
    missing = live.gpuq("submit", "--gpus", "1", "--name", "x", "--dependency",
                        f"afterok:{array_id},afterok:{array_id}_9")
    assert missing.returncode == 2, missing.stderr
    assert (f"--dependency (depends_on[1].job): No task {array_id}_9" in missing.stderr)
    # a job that is not an array: the lookup's 400 on its ?array= read as gpuq's own
    # --array ("--array: No job array 80", 2026-12-07)
    plain = live.gpuq("submit", "--gpus", "1", "--name", "x", "--dependency",
                      f"afterok:{after}_0")
    assert plain.returncode == 2, plain.stderr
    assert f"--dependency (depends_on[0].job): No task {after}_0" in plain.stderr
    assert "--array" not in plain.stderr
    batch = tmp_path / "batch.json"
    batch.write_text('[{"name": "b", "gpus": 1}]')
    refused = live.gpuq("submit", "-f", str(batch), "--array", "0-1")
    assert refused.returncode == 2 and "cannot be arrays" in refused.stderr


def test_queue_names_tasks_and_lists_one_array(live: Live) -> None:
    array_id = submit(live, "--gpus", "1", "--name", "listed", "--array", "0-2",
                      who="vision-r2")
    plain = submit(live, "--gpus", "1", "--name", "plain", who="vision-r2")
    table = live.gpuq("queue", "--mine", columns=120, who="vision-r2").stdout
    ids = [line.split()[0] for line in table.splitlines()[1:]]
    assert {f"{array_id}_0", f"{array_id}_1", f"{array_id}_2", str(plain)} <= set(ids)
    only = json.loads(live.gpuq("queue", "--array", str(array_id), "-o", "json",
                                who="vision-r2").stdout)
    assert sorted(r["array_task"] for r in only) == [f"{array_id}_{i}" for i in range(3)]
    rows = list(csv.DictReader(io.StringIO(live.gpuq("queue", "--array", str(array_id), "-o",
                                                     "csv", who="vision-r2").stdout)))
    assert all(r["id"].isdigit() for r in rows)  # csv keeps the ids
    why = " ".join(live.gpuq("why", f"{array_id}_1", who="vision-r2").stdout.split())
    assert why.startswith(f"Task {array_id}_1 (job ")
    live.gpuq("cancel", "--mine", "--yes", who="vision-r2")


def test_cancel_a_task_by_its_name_and_a_whole_array(live: Live) -> None:
    client = live.client()
    array_id = submit(live, "--gpus", "1", "--name", "c-arr", "--array", "0-3")
    one = live.gpuq("cancel", f"{array_id}_1")
    assert one.returncode == 0, one.stderr
    assert f"Cancelled task {array_id}_1 (job " in one.stdout
    first = live.gpuq("cancel", str(array_id))  # scancel 412 would cancel them all
    assert f"Cancelled task {array_id}_0 (job {array_id}, c-arr)" in first.stdout
    assert f"gpuq cancel --array {array_id} cancels every task" in first.stderr
    states = client.array(array_id).states
    assert states == {"CANCELLED": 2, "QUEUED": 2}
    rest = live.gpuq("cancel", "--array", str(array_id), "--why", "bad sweep")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.strip() == (f"Cancelled array {array_id}: 2 tasks (every task that "
                                   "had not ended)")
    assert client.array(array_id).states == {"CANCELLED": 4}
    again = live.gpuq("cancel", f"{array_id}_*")
    assert again.returncode == 1 and "has ended already" in again.stderr
    other = submit(live, "--gpus", "1", "--name", "c-arr2", "--array", "0-1")
    star = live.gpuq("cancel", f"{other}_*")
    assert star.returncode == 0 and f"Cancelled array {other}: 2 tasks" in star.stdout
    missing = live.gpuq("cancel", f"{other}_9")
    assert missing.returncode == 1 and f"No task {other}_9" in missing.stderr
    not_theirs = live.gpuq("cancel", "--array", str(other), who="nlp-r1")
    assert not_theirs.returncode == 1
    mixed = live.gpuq("cancel", "--array", str(other), "--mine")
    assert mixed.returncode == 2


def test_cancelling_an_ended_task_again_names_it_once(live: Live) -> None:
    """A second gpuq cancel of an array's task named the task twice in its message (a
    researcher's session)."""
    array_id = submit(live, "--gpus", "1", "--name", "twice", "--array", "0-1")
    assert live.gpuq("cancel", f"{array_id}_1").returncode == 0
    again = live.gpuq("cancel", f"{array_id}_1")
    assert again.returncode == 1 and "CANCELLED is final" in again.stderr
    said = again.stderr.strip()
    assert said.count(f"{array_id}_1") == 1, said
    assert said.startswith(f"gpuq cancel: task {array_id}_1 (job {array_id + 1}): "), said
    live.gpuq("cancel", "--array", str(array_id))


def test_a_refused_why_or_id_is_a_usage_error_before_any_request(live: Live) -> None:
    """--why with a line break was refused by the API once per job (exit 1, "why: ...");
    a 20-digit id was "No endpoint /api/v1/jobs/.../" (a researcher's session)."""
    a = submit(live, "--gpus", "1", "--name", "why-a")
    b = submit(live, "--gpus", "1", "--name", "why-b")
    done = live.gpuq("cancel", str(a), str(b), "--why", "wrong\ndata")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("error:") == 1, done.stderr  # once, not once per job
    assert "error: argument --why: " in done.stderr and "line breaks" in done.stderr
    client = live.client()
    assert {client.job(a).state, client.job(b).state} == {"QUEUED"}
    for argv in (["show", "12345678901234567890"], ["logs", "12345678901234567890"],
                 ["cancel", "12345678901234567890"]):
        big = live.gpuq(*argv)
        assert big.returncode == 2 and "No endpoint" not in big.stderr, big.stderr
        assert "'12345678901234567890' is not a job" in big.stderr
    assert live.gpuq("cancel", str(a), str(b)).returncode == 0
