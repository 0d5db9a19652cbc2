"""gpuq's Slurm syntax for dependencies and job arrays, without a server: sbatch's
``--dependency`` and ``--array`` specs (good ones and the refusals, each saying what is
supported), job references (``412``, ``412_7``, ``'412_*'``), the flags the API's nested
field paths map back to, and the words ``gpuq show`` and ``gpuq why`` print for a
dependent job, an array's task and a job cancelled because its dependency can never be
met."""

from __future__ import annotations

import pytest
from gpuq import explain
from gpuq.cli import build_parser, cancel_target, detail_lines, main, why_lines
from gpuq.client import parse_ref
from gpuq.fields import array, dependency, flag_for, spec_from_file


# ---------------------------------------------------------------------------- --dependency
@pytest.mark.parametrize(("spec", "want"), [
    ("afterok:12", [{"job": 12, "when": "ok"}]),
    ("afterany:13", [{"job": 13, "when": "any"}]),
    ("afternotok:14", [{"job": 14, "when": "notok"}]),
    ("afterok:12,afterany:13", [{"job": 12, "when": "ok"}, {"job": 13, "when": "any"}]),
    ("afterok:12:13", [{"job": 12, "when": "ok"}, {"job": 13, "when": "ok"}]),
    (" AfterOK:7 , afternotok:8 ", [{"job": 7, "when": "ok"}, {"job": 8, "when": "notok"}]),
    ("afterok:412_7", [{"job": "412_7", "when": "ok"}]),  # a task: looked up by the command
    ("afterok:012", [{"job": 12, "when": "ok"}]),
])
def test_sbatch_dependency_specs_become_depends_on(spec: str, want: list) -> None:
    assert dependency(spec) == want


@pytest.mark.parametrize(("spec", "says"), [
    ("", "empty"),
    ("afterok", "no job id after afterok"),
    ("afterok:", "no job id after afterok"),
    ("after:12", "unknown kind 'after' (it starts when the job starts"),
    ("singleton", "unknown kind 'singleton'"),
    ("aftercorr:12", "unknown kind 'aftercorr'"),
    ("ok:12", "supported: afterok, afterany, afternotok"),
    ("afterok:12?afterany:13", "'?' (any one of them is enough) is not supported"),
    ("afterok:twelve", "'twelve' is not a job id"),
    ("afterok:-3", "'-3' is not a job id"),
    ("afterok:12+5", "a delay after a job's start (+MINUTES) is not supported"),
    ("afterok:12,afterany:12", "job 12 is named twice"),
    ("afterok:412_*", "is not a job id"),
    ("afterok:١٢", "is not a job id"),  # ASCII digits only: int() reads these
    ("afterok:12_٣", "is not a job id"),
])
def test_a_bad_dependency_spec_is_refused_saying_what_is_supported(spec: str, says: str
                                                                   ) -> None:
    with pytest.raises(ValueError, match=None) as error:
        dependency(spec)
    assert says in str(error.value)


def test_a_job_file_may_give_the_apis_depends_on_list_or_sbatchs_text() -> None:
    assert spec_from_file({"dependency": "afterany:5"}, "f") == {
        "depends_on": [{"job": 5, "when": "any"}]}
    listed = [{"job": 5}, {"index": 0, "when": "notok"}]
    assert spec_from_file({"depends_on": listed}, "f") == {"depends_on": listed}
    with pytest.raises(ValueError, match="f: depends_on: a list of"):
        spec_from_file({"depends_on": [5]}, "f")


# ---------------------------------------------------------------------------- --array
@pytest.mark.parametrize(("spec", "want"), [
    ("0-99%8", {"count": 100, "max_running": 8}),
    ("0-99", {"count": 100}),
    ("0-0", {"count": 1}),
    ("0", {"count": 1}),  # sbatch's --array=0: the single task 0
    ("0-9999%1", {"count": 10000, "max_running": 1}),
    ("0-20000", {"count": 20001}),  # the API refuses it, at --array (array.count)
])
def test_sbatch_array_specs_become_count_and_max_running(spec: str, want: dict) -> None:
    assert array(spec) == want


@pytest.mark.parametrize(("spec", "says"), [
    ("1-10", "arrays here are numbered from 0: write 0-9 for 10 tasks"),
    ("5", "the single task 5 in sbatch's reading"),
    ("0-9:2", "a step is not supported"),
    ("1,3,5", "a list of indices is not supported"),
    ("0-3,7", "a list of indices is not supported"),
    ("0-9%0", "a whole number of at least 1"),
    ("0-9%", "a whole number of at least 1"),
    ("0-9%x", "a whole number of at least 1"),
    ("9-0", "arrays here are numbered from 0"),
    ("ten", "is not an array range; supported: 0-N"),
    ("-5", "is not an array range"),
    ("0-٩", "is not an array range"),  # ASCII digits only (int() reads "٩" as 9)
    ("0-9%٣", "a whole number of at least 1"),
])
def test_a_bad_array_spec_is_refused_saying_what_is_supported(spec: str, says: str) -> None:
    with pytest.raises(ValueError) as error:
        array(spec)
    assert says in str(error.value)


def test_a_job_file_may_give_the_array_as_text_or_as_the_apis_mapping() -> None:
    assert spec_from_file({"array": "0-3%2"}, "f") == {"array": {"count": 4, "max_running": 2}}
    assert spec_from_file({"array": {"count": 4}}, "f") == {"array": {"count": 4}}
    with pytest.raises(ValueError, match="unknown key 'size'"):
        spec_from_file({"array": {"size": 4}}, "f")


@pytest.mark.parametrize(("argv", "says"), [
    (["submit", "--dependency", "after:3", "--gpus", "1"], "argument --dependency: "),
    (["submit", "--array", "1-10", "--gpus", "1"], "argument --array: '1-10'"),
    # ASCII digits only: Python's int() reads Arabic-Indic ones (found 2026-12-07)
    (["submit", "--gpus", "١"], "argument --gpus: expected a whole number, got '١'"),
    (["submit", "--gpus", "1", "--time", "١h"], "argument --time: not a duration: '١h'"),
    (["submit", "--gpus", "1", "--time", "1-25"], "argument --time: '1-25': hours after"),
    (["cancel", "--array", "٤١٢"], "argument --array: invalid integer value: '٤١٢'"),
    # polling flags (a researcher's session, 2026-12-07): -1 crashed in time.sleep, 0 polled
    # with no pause (34 requests in 2 s), nan never timed out, ٣ was read as 3
    (["queue", "--watch", "--interval", "-1"], "argument --interval: '-1': seconds from 0"),
    (["logs", "7", "-f", "--interval", "0"], "argument --interval: '0': at least 0.1 s"),
    (["wait", "7", "--interval", "0.01"], "argument --interval: '0.01': at least 0.1 s"),
    (["wait", "7", "--timeout", "nan"], "argument --timeout: 'nan': seconds from 0"),
    (["wait", "7", "--timeout", "inf"], "argument --timeout: 'inf': seconds from 0"),
    (["wait", "7", "--timeout", "٣"], "argument --timeout: '٣': write the number in ASCII"),
    (["wait", "7", "--interval", "٢"], "argument --interval: '٢': write the number in ASCII"),
    # a why the API refuses (a line break, a tab, a text-direction control): once, naming
    # the flag, before any request (it was refused by the API once per job, exit 1, with
    # "why:"; a researcher's session)
    (["cancel", "12", "13", "--why", "wrong\ndata"], "argument --why: 'wrong\\ndata': "),
    (["cancel", "--array", "12", "--why", "a\tb"], "argument --why: 'a\\tb': printable"),
    (["cancel", "12", "--why", "x" * 501], "argument --why: at most 500 characters"),
    # how many queued jobs' positions to read: -1 was taken (as 0)
    (["queue", "--positions", "-1"], "argument --positions: '-1': 0 or more"),
    # a job id past the API's 18 digits: "No endpoint /api/v1/jobs/.../" (exit 1)
    (["show", "12345678901234567890"], "argument ID: '12345678901234567890' is not a job: "
                                       "a job's id has at most 18 digits"),
    (["cancel", "12345678901234567890_1"], "has at most 18 digits"),
    (["cancel", "12345678901234567890_*"], "has at most 18 digits"),
    (["queue", "--array", "12345678901234567890"], "argument --array: "),
])
def test_a_bad_spec_on_the_command_line_is_a_usage_error_naming_the_flag(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err


def test_a_checkpoint_time_for_a_job_never_asked_to_stop_is_a_usage_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--checkpoint-time without --checkpointable (nor --preemptible) was sent and kept:
    the scheduler never asks such a job to stop, so the time meant nothing (a researcher's
    session). Refused before any request, naming both flags, for a job file's key too."""
    import gpuq.cli

    def no_request(args: object) -> None:
        raise AssertionError("a request was made")

    monkeypatch.setattr(gpuq.cli, "client_for", no_request)
    for argv in (["submit", "--gpus", "1", "--checkpoint-time", "2m", "--", "true"],
                 ["submit", "--gpus", "1", "--no-checkpointable", "--checkpoint-time", "2m"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--checkpoint-time" in err and "--checkpointable" in err, err


def test_a_checkpoint_time_of_a_preemptible_job_is_its_grace_window_with_a_warning(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A preemptible job that does not checkpoint is still asked to stop, and the API's
    grace window before the kill is its checkpoint time: sent, with a warning."""
    import gpuq.cli
    from gpuq.client import Job

    sent: list[dict] = []

    class Client:
        def submit(self, idempotency_key: str | None = None, **spec: object) -> Job:
            sent.append(spec)
            return Job(self, {"id": 7, "tenant": "vision", "state": "SUBMITTED"})

    monkeypatch.setattr(gpuq.cli, "client_for", lambda args: Client())
    assert main(["submit", "--tenant", "vision", "--gpus", "1", "--preemptible",
                 "--checkpoint-time", "2m", "--", "true"]) == 0
    assert sent[0]["checkpoint_time_s"] == 120
    err = capsys.readouterr().err
    assert "warning" in err and "--checkpoint-time" in err and "grace" in err


# ---------------------------------------------------------------------------- references
@pytest.mark.parametrize(("ref", "want"), [
    ("412", (412, None)), ("412_7", (412, 7)), (" 412_0 ", (412, 0)), (12, (12, None)),
])
def test_a_job_is_named_by_its_id_or_its_task_name(ref, want) -> None:
    assert parse_ref(ref) == want


@pytest.mark.parametrize("ref", ["412_", "_7", "412-7", "412_7_1", "x", "412_*", "",
                                 "٤١٢", "412_٧"])
def test_anything_else_is_not_a_job(ref: str) -> None:
    with pytest.raises(ValueError, match="412_7"):
        parse_ref(ref)


def test_cancel_takes_a_whole_array_as_412_star_and_refuses_other_globs() -> None:
    assert cancel_target("412_*") == "412_*"
    assert cancel_target("412_7") == "412_7"
    with pytest.raises(ValueError, match="--array 412"):
        cancel_target("41*")
    with pytest.raises(ValueError, match="--array 412"):
        cancel_target("٤١٢_*")
    args = build_parser().parse_args(["cancel", "412_3", "412_*", "--array", "9"])
    assert args.ids == ["412_3", "412_*"] and args.arrays == [9]


@pytest.mark.parametrize(("path", "flag"), [
    ("depends_on", "--dependency"),
    ("depends_on[0].job", "--dependency (depends_on[0].job)"),
    ("depends_on[1]", "--dependency (depends_on[1])"),
    ("jobs[2].depends_on[0].index", "jobs[2] --dependency (depends_on[0].index)"),
    ("jobs[1].depends_on", "jobs[1] --dependency"),
    ("array.count", "--array (array.count)"),
    ("array.max_running", "--array (array.max_running)"),
])
def test_the_apis_nested_fields_map_back_to_their_flag(path: str, flag: str) -> None:
    assert flag_for(path) == flag


# ---------------------------------------------------------------------------- words
TASK = {"id": 419, "name": "sweep", "tenant": "vision", "state": "QUEUED",
        "pending_reason": "ArrayLimit", "array_id": 412, "array_index": 7,
        "array_count": 100, "array_max_running": 8, "array_task": "412_7",
        "depends_on": [{"job": 12, "when": "ok"}, {"job": 13, "when": "notok"}],
        "history": []}


def test_show_names_the_task_its_array_and_its_dependencies_in_words() -> None:
    text = " ".join(" ".join(detail_lines(TASK, 100, "~")).split())
    assert "Task 412_7: task 8 of 100 of array 412, at most 8 at once" in text
    assert ("waits for job 12 to complete, job 13 to fail or be cancelled "
            "(afterok:12,afternotok:13)") in text


HISTORY = [
    {"seq": 150, "at": "2026-12-07T06:31:02Z", "from_state": "QUEUED", "to_state": "PLACING",
     "reason": "Placed", "actor": "scheduler", "detail": {"nodes": ["pod-a-n01"]}},
    {"seq": 302, "at": "2026-12-07T06:37:12Z", "from_state": "RUNNING",
     "to_state": "PREEMPT_REQUESTED", "reason": "PreemptRequested", "actor": "scheduler",
     "detail": {"for": 99, "why": "team evals holds 80 of its 32 (2.50 times its guarantee)"}},
    {"seq": 310, "at": "2026-12-07T06:37:40Z", "from_state": "PREEMPT_REQUESTED",
     "to_state": "CHECKPOINTING", "reason": "Checkpointing", "actor": "agent", "detail": {}},
]


def test_show_at_80_columns_keeps_the_history_times_and_states_whole() -> None:
    """At 80 columns the history cut its time to "12-07 06:37…" and its states to
    "PREEMPT_R…" while the detail kept as much room (2026-12-07): the time and the states
    are whole, and the detail goes under its row, wrapped, whole too."""
    job = {"id": 27, "name": "x", "state": "QUEUED", "history": HISTORY}
    lines = detail_lines(job, 80, "…")
    assert all(len(line) <= 80 for line in lines)
    table = lines[lines.index("History") + 1:]
    assert "PREEMPT_R…" not in "".join(table) and "CHECKPOIN…" not in "".join(table)
    row = next(line for line in table if line.lstrip().startswith("302 "))
    assert "12-07 06:37:12" in row and "RUNNING" in row and "PREEMPT_REQUESTED" in row
    assert "12-07 06:37:40  PREEMPT_REQUESTED  CHECKPOINTING" in "".join(table)
    words = " ".join(" ".join(table).split())
    assert '{"for": 99, "why": "team evals holds 80 of its 32 (2.50 times its guarantee)"}' \
        in words
    # where the terminal has room, the detail stays in its column
    wide = detail_lines(job, 200, "…")
    assert any(line.lstrip().startswith("302 ") and '"for": 99' in line for line in wide)


PREEMPTION = {"seq": 302, "at": "2026-12-07T06:37:12Z", "for_job": 99,
              "why": "team evals holds 80 of its 32", "cost_s": 1860.0,
              "est_gpu_s_lost": 14880.0, "detail": {}}


@pytest.mark.parametrize("realized, want, not_want", [
    ({"stopped_at": None, "checkpoint_at": None, "work_lost_s": None},
     "estimated when chosen: 31m of work, 14880 GPU-s", "work lost"),
    ({"stopped_at": "2026-12-07T06:37:40Z", "checkpoint_at": "2026-12-07T06:37:35Z",
      "work_lost_s": 5}, "work lost 5s, since its last checkpoint", "estimated"),
    ({"stopped_at": "2026-12-07T06:39:12Z", "checkpoint_at": None, "work_lost_s": 420},
     "work lost 7m, since its run's start", "estimated"),
])
def test_show_says_what_a_preemption_really_cost_once_the_job_stopped(realized, want,
                                                                       not_want) -> None:
    """gpuq show printed the estimate the scheduler weighed when it chose the job (31m
    since the checkpoint then, plus the restart) as "work lost", for a victim that
    checkpointed in its grace window and lost 5 s (2026-12-07)."""
    job = {"id": 27, "name": "x", "state": "QUEUED", "history": [],
           "preemptions": [PREEMPTION | realized]}
    words = " ".join(" ".join(detail_lines(job, 200, "…")).split())
    assert want in words and not_want not in words


def test_show_and_why_say_why_a_job_was_cancelled_for_a_dependency() -> None:
    job = {"id": 20, "name": "eval", "tenant": "vision", "state": "CANCELLED",
           "depends_on": [{"job": 12, "when": "ok"}],
           "history": [{"seq": 9, "reason": "DependencyNeverSatisfied", "to_state":
                        "CANCELLED", "detail": {"job": 12, "when": "ok", "ended": "FAILED"}}]}
    want = ("Cancelled: job 12 ended FAILED, so the dependency afterok:12 (waits for it to "
            "complete) can never be met.")
    assert want in " ".join(" ".join(detail_lines(job, 100, "~")).split())
    data = {"id": 20, "name": "eval", "tenant": "vision", "state": "CANCELLED"}
    assert want in " ".join(" ".join(why_lines(data, job, 100)).split())


def test_why_names_an_arrays_task_and_says_a_cap_is_fixed_at_submit() -> None:
    data = {"id": 419, "name": "sweep", "tenant": "vision", "state": "QUEUED",
            "pending_reason": "ArrayLimit", "hints": explain.hints(TASK)}
    text = " ".join(" ".join(why_lines(data, TASK, 100)).split())
    assert text.startswith("Task 412_7 (job 419, sweep, team vision) is waiting: ArrayLimit.")
    assert "array 412 runs at most 8 of its 100 tasks at once (max_running, fixed at " \
           "submit)" in text
    assert "gpuq queue --array 412" in text


def test_the_advice_for_a_dependency_names_each_job_and_its_state() -> None:
    job = {**TASK, "pending_reason": "Dependency"}
    awaited = [({"job": 12, "when": "ok"}, {"id": 12, "state": "RUNNING"}),
               ({"job": 13, "when": "notok"}, {"id": 13, "state": "FAILED"})]
    hints = explain.hints(job, None, awaited)
    assert "It starts once job 12 completes: it is RUNNING now (gpuq why 12)." in hints
    assert "If job 12 fails or is cancelled instead, this job is cancelled " \
           "(DependencyNeverSatisfied)." in hints
    assert "Job 13 has ended (FAILED): this part is met, the scheduler releases it at its " \
           "next tick." in hints
    assert hints[-1].startswith("It holds and reserves no GPUs meanwhile")
    unreadable = explain.hints(job, None, [({"job": 12, "when": "any"}, None)])
    assert unreadable[0] == "It starts once job 12 ends (you may not read that job now)."


def test_show_prints_why_pending_as_prose_like_why() -> None:
    """gpuq show printed why_pending as one line of JSON among the fields (noticed
    2026-12-07): it is a section of its own, in the words gpuq why uses."""
    why = {"reason": "Resources",
           "headline": "It needs 64 GPUs (8 per node); 40 GPUs are free on healthy nodes.",
           "evidence": ["pod-a: 24 free", "pod-b: 16 free"],
           "next_step": "Asking for 40 GPUs (8 per node) would fit now."}
    job = {"id": 27, "name": "x", "state": "QUEUED", "why_pending": why, "history": []}
    lines = detail_lines(job, 100, "…")
    assert not any('"headline"' in line for line in lines)
    section = lines[lines.index("Why pending") + 1:lines.index("History")]
    assert section[0].strip() == f"Why: {why['headline']}"
    assert [line.strip() for line in section[1:3]] == ["- pod-a: 24 free", "- pod-b: 16 free"]
    assert section[3].strip() == f"Next step: {why['next_step']}"
    data = {"id": 27, "name": "x", "tenant": "vision", "state": "QUEUED",
            "pending_reason": "Resources", "why_pending": why}
    assert all(line in why_lines(data, job, 100) for line in section if line)
    # a job that is not waiting has no such section
    assert "Why pending" not in detail_lines(job | {"why_pending": None}, 100, "…")


def test_polling_flags_take_seconds_or_a_duration() -> None:
    args = build_parser().parse_args(["wait", "7", "--timeout", "0", "--interval", "0.5"])
    assert (args.timeout, args.interval) == (0.0, 0.5)
    args = build_parser().parse_args(["wait", "7", "--timeout", "2m", "--interval", "1m"])
    assert (args.timeout, args.interval) == (120.0, 60.0)


def test_a_token_that_cannot_be_one_is_a_clear_error_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A non-ASCII token went into the HTTP header and crashed with UnicodeEncodeError
    (a researcher's session, 2026-12-07)."""
    monkeypatch.setenv("GPUQ_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GPUQ_TOKEN", "gsu_日本")
    code = main(["queue"])
    err = capsys.readouterr().err
    assert code == 1 and "is not a token" in err and "gpuq login" in err
    assert "Traceback" not in err


def test_wait_reads_the_job_through_an_outage_at_its_start() -> None:
    """gpuq wait started while the server restarted gave up after 8 s, while a wait
    already running polled on (a researcher's session, 2026-12-07)."""
    import argparse

    from gpuq.cli import first_read
    from gpuq.errors import ConnectionFailed

    tries = []

    def read() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionFailed("cannot reach")
        return "job"

    args = argparse.Namespace(timeout=None, interval=0.01)
    assert first_read(read, args) == "job" and len(tries) == 3
    tries.clear()
    with pytest.raises(ConnectionFailed):  # within --timeout only
        first_read(read, argparse.Namespace(timeout=0.015, interval=0.01))
