"""gpuq's pieces that need no server: the YAML emitter (read back by PyYAML), the table
that fits its width, durations, job files, the submit flags' table, following a log's
sliding tail, and the explanation of a wait."""

from __future__ import annotations

import math
import sys

import pytest
import yaml
from gpuq import explain, jobfile, output
from gpuq.cli import _name_from, build_parser, new_text
from gpuq.fields import BY_API, FIELDS, duration, flag_for, spec_from_file
from gpuq.timefmt import format_duration, parse_duration
from hypothesis import given, settings
from hypothesis import strategies as st

# ---------------------------------------------------------------------------- yaml
json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_data)
def test_yaml_output_reads_back_as_the_same_data(data) -> None:
    assert yaml.safe_load(output.to_yaml(data)) == data


@pytest.mark.parametrize("text", ["yes", "No", "on", "null", "~", "", " lead", "trail ",
                                  "1.5", "0x1f", "2026-12-01", "a: b", "a #b", "- x", "=",
                                  "@x", "line\nbreak", "\u2028", "\ufeffbom", "'q'", "%x", "A\n"])
def test_yaml_quotes_the_strings_a_reader_would_take_for_something_else(text: str) -> None:
    assert yaml.safe_load(output.to_yaml({"k": text})) == {"k": text}
    assert output.yaml_scalar(text).startswith('"')


def test_yaml_writes_plain_what_is_plainly_text() -> None:
    assert output.to_yaml({"state": "QUEUED", "name": "llm-1b run", "none": None,
                           "count": 3, "ok": True, "tags": [], "m": {}, "n": 1}) == (
        "state: QUEUED\nname: llm-1b run\nnone: null\ncount: 3\nok: true\ntags: []\nm: {}\n"
        '"n": 1\n')  # n is YAML 1.1's "no"
    assert output.to_yaml([{"a": 1, "b": [1, {"c": 2}]}]) == (
        "- a: 1\n  b:\n    - 1\n    - c: 2\n")
    assert output.yaml_scalar(math.inf) == ".inf" and output.yaml_scalar(1e16) == "1.0e+16"


# ---------------------------------------------------------------------------- table
@pytest.mark.parametrize("columns", ["QUEUE_COLUMNS", "CANCEL_COLUMNS"])
def test_a_state_is_never_cut_at_80_columns(columns: str) -> None:
    # "CANCELL…" in gpuq queue --all at 80 columns (a pipeline author's session, 2026-12-07)
    import gpuq.cli as cli

    rows = [{"id": 10_000 + i, "name": "n" * 40, "tenant": "team-" + "t" * 20,
             "owner": "owner-" + "o" * 20, "gpus": 512, "state": state,
             "pending_reason": "QuotaReserved", "started_at": "2026-12-07T16:02:10Z"}
            for i, state in enumerate(["CANCELLED", "PREEMPT_REQUESTED", "CHECKPOINTING"])]
    lines = output.table(rows, getattr(cli, columns), width=80)
    for row, line in zip(rows, lines[1:], strict=True):
        assert f" {row['state']} " in f"{line} ", line
        assert output.cell_width(line) <= 80


COLUMNS = (output.field("ID", "id", right=True), output.field("NAME", "name", min_width=8),
           output.field("STATE", "state", min_width=7))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({"id": st.integers(0, 10**6), "name": st.text(),
                                       "state": st.text(max_size=20)}), max_size=6),
       st.integers(20, 120))
def test_a_table_never_exceeds_its_width(rows, width) -> None:
    for line in output.table(rows, COLUMNS, width=width):
        assert output.cell_width(line) <= width


def test_a_table_cuts_the_longest_column_first_and_marks_the_cut() -> None:
    rows = [{"id": 7, "name": "n" * 100, "state": "QUEUED"}]
    header, row = output.table(rows, COLUMNS, width=40)
    assert row.startswith(" 7  nnnn") and "…" in row and row.endswith("QUEUED")
    assert len(row) <= 40 and header.split() == ["ID", "NAME", "STATE"]
    assert output.cut("漢字漢字", 5) == "漢字…" and output.cell_width("漢字…") == 5


def test_csv_gives_raw_values_and_json_for_nested_ones() -> None:
    cols = (output.field("A", "a"), output.field("B", "b"), output.field("C", "c"))
    text = output.to_csv([{"a": None, "b": True, "c": {"x": [1]}}], cols)
    assert text == 'a,b,c\n,true,"{""x"":[1]}"\n'


# ---------------------------------------------------------------------------- durations
@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d12h", 129600), ("1h30m", 5400),
    ("1:30", 90), ("1:30:00", 5400), ("2-00", 172800), ("1-02:03", 93780),
    ("1-02:03:04", 93784), (" 2H ", 7200),
])
def test_durations_in_units_and_slurms_colons(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_is_refused_as_a_time_limit_but_is_seconds_for_a_timeout() -> None:
    with pytest.raises(ValueError, match="Slurm reads a bare number as minutes"):
        parse_duration("90")
    assert parse_duration("90", bare_seconds=True) == 90
    for bad in ("", "2x", "h", "1:2:3:4", "-5m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


@pytest.mark.parametrize("text", ["9" * 4301 + "h", "1:" + "9" * 4301, "9" * 4301])
def test_a_number_of_thousands_of_digits_is_no_duration_in_words_of_ours(text: str) -> None:
    # int() of more than 4,300 digits raised Python's "Exceeds the limit ... use
    # sys.set_int_max_str_digits()", printed at the flag (a researcher's session)
    for bare in (False, True):
        with pytest.raises(ValueError, match="not a duration: a number of 4301 digits"):
            parse_duration(text, bare_seconds=bare)


@pytest.mark.parametrize(("text", "says"), [
    ("400d", "at most 366 days, not 400d"),
    ("9000h", "at most 366 days, not 9000h (375.0 days)"),
])
def test_a_job_duration_past_366_days_is_refused_in_the_units_it_was_written_in(
        text: str, says: str) -> None:
    # the API's "At most 31622400 seconds (366 days): durations are in seconds." answered
    # --time 400d (a pipeline author's session, 2026-12-07)
    with pytest.raises(ValueError) as refused:
        duration(text)
    assert str(refused.value) == says
    assert duration("366d") == 366 * 86400


@pytest.mark.parametrize(("text", "says"), [
    # Slurm's days-hours: the hours are 0-23 (1-25 was read as 176,400 s, 2026-12-07)
    ("1-25", "hours after the days go from 0 to 23"),
    ("1-24:00", "hours after the days go from 0 to 23"),
    ("1-02:60", "minutes go from 0 to 59"),
    ("1-02:03:60", "seconds go from 0 to 59"),
    ("1:60:00", "minutes go from 0 to 59"),
    ("1:30:75", "seconds go from 0 to 59"),
    ("90:60", "seconds go from 0 to 59"),
    # ASCII digits only: Python's int() reads Arabic-Indic ones (١ is 1)
    ("١h", "not a duration"), ("١:٣٠:٠٠", "not a duration"), ("١", "not a duration"),
])
def test_slurms_forms_keep_slurms_bounds_and_ascii_digits(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_duration(text)
    with pytest.raises(ValueError):
        parse_duration(text, bare_seconds=True)
    # the hours of HH:MM:SS and the minutes of MM:SS have no upper bound in Slurm
    assert parse_duration("48:00:00") == 172800 and parse_duration("90:00") == 5400
    assert parse_duration("1-23:59:59") == 172799


def test_durations_print_their_two_largest_units() -> None:
    assert [format_duration(s) for s in (0, 59, 61, 3600, 5400, 90061, -120)] == [
        "0s", "59s", "1m1s", "1h", "1h30m", "1d1h", "-2m"]


# ---------------------------------------------------------------------------- job files
def test_the_flat_yaml_subset() -> None:
    text = ("---\n# comment\nname: 'it''s'\ngpus: 8   # all of a node\ngpu_type: \"H\\u0031\"\n"
            "time: 2h\nmin_gpus: ~\ncommand: |\n  python a.py \\\n    --x 1\n\n  echo done\n"
            "priority: -3\n")
    assert jobfile.parse_flat_yaml(text) == {
        "name": "it's", "gpus": "8", "gpu_type": "H1", "time": "2h", "min_gpus": None,
        "command": "python a.py \\\n  --x 1\n\necho done\n", "priority": "-3"}
    assert spec_from_file(jobfile.parse_flat_yaml(text), "f") == {
        "name": "it's", "gpus": 8, "gpu_type": "H1", "max_runtime_s": 7200,
        "command": "python a.py \\\n  --x 1\n\necho done\n", "priority": -3}


def test_a_job_file_beyond_the_subset_names_its_line_without_pyyaml(monkeypatch) -> None:
    nested = "name: x\nresources:\n  gpus: 8\n"
    assert jobfile.loads(nested) == {"name": "x", "resources": {"gpus": 8}}  # PyYAML's
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if PyYAML were not installed
    with pytest.raises(jobfile.JobFileError, match=r"job.yaml:3: indented line"):
        jobfile.loads(nested, name="job.yaml")
    with pytest.raises(jobfile.JobFileError, match=r":1: .*beyond the flat subset"):
        jobfile.loads("gpus: [1, 2]\n")
    assert jobfile.loads('{"name": "j", "gpus": 1}') == {"name": "j", "gpus": 1}
    assert jobfile.loads('[{"name": "j"}]') == [{"name": "j"}]


@pytest.mark.parametrize(("text", "line"), [
    ("name: x\ngpus: 8\ngpus: 1\n", 3),  # the flat subset
    ("name: x\nresources:\n  a: 1\ngpus: 8\n\ngpus: 1\n", 6),  # PyYAML's
    ('{"name": "x",\n "gpus": 8,\n "gpus": 1}', 3),
    ('[{"name": "a", "gpus": 1},\n {"name": "b",\n  "gpus": 8, "gpus": 1}]', 3),
])
def test_a_key_given_twice_in_a_job_file_is_refused_naming_it_and_its_line(
        text: str, line: int) -> None:
    """gpus: 8 then gpus: 1 submitted 1 GPU without a word: the subset's refusal fell
    back to PyYAML, which keeps the last value, as JSON's reader does (2026-12-07)."""
    with pytest.raises(jobfile.DuplicateKeyError, match=rf"^job.f:{line}: 'gpus' is given "
                                                        "twice"):
        jobfile.loads(text, name="job.f")
    # a key of one object is not a key of another, and a value may look like a key
    assert jobfile.loads('[{"gpus": 1}, {"gpus": 2, "name": "gpus"}]') == [
        {"gpus": 1}, {"gpus": 2, "name": "gpus"}]


def test_a_job_files_numbers_are_ascii_digits() -> None:
    with pytest.raises(ValueError, match="gpus: expected a whole number, got '١'"):
        spec_from_file({"gpus": "١"}, "f")
    assert spec_from_file({"gpus": "+8", "priority": "-3"}, "f") == {"gpus": 8,
                                                                     "priority": -3}


def test_a_job_files_keys_are_the_apis_or_the_flags_names() -> None:
    assert spec_from_file({"max_runtime_s": 600, "gpus-per-node": "4", "checkpoint_time": "2m",
                           "checkpointable": "yes", "restart_s": "1m"}, "f") == {
        "max_runtime_s": 600, "gpus_per_node": 4, "checkpoint_time_s": 120,
        "checkpointable": True, "restart_s": 60}
    with pytest.raises(ValueError, match="unknown field 'gpu' \\(did you mean 'gpus'\\?"):
        spec_from_file({"gpu": 1}, "f")
    # the nearest key of any spelling, named as the API names it
    with pytest.raises(ValueError, match="did you mean 'checkpoint_interval_s'"):
        spec_from_file({"checkpoint_intervall": "5m"}, "f")
    with pytest.raises(ValueError, match=r"unknown field 'zzz' \(fields: "):
        spec_from_file({"zzz": 1}, "f")
    with pytest.raises(ValueError, match="time: 90 has no unit"):
        spec_from_file({"time": 90}, "f")
    with pytest.raises(ValueError, match="given twice"):
        spec_from_file({"time": "1h", "max_runtime_s": 60}, "f")


# ---------------------------------------------------------------------------- flags
def test_every_job_field_is_a_submit_flag_from_one_table() -> None:
    parser = build_parser()
    options = {o for a in parser._subparsers._group_actions[0].choices["submit"]._actions
               for o in a.option_strings}
    assert {f.flag for f in FIELDS} <= options
    assert {"--tenant", "--name", "--gpus", "--gpus-per-node", "--gpu-type", "--time",
            "--priority", "--checkpointable", "--checkpoint-interval", "--checkpoint-time",
            "--restart-time", "--min-gpus", "--preemptible", "--interactive",
            "--command", "--dependency", "--array"} == {f.flag for f in FIELDS}
    assert flag_for("max_runtime_s") == "--time" and flag_for("jobs[3].gpus") == "jobs[3] --gpus"
    assert flag_for("idempotency_key") == "idempotency_key" and flag_for(None) is None
    assert BY_API["restart_s"].flag == "--restart-time"


def test_a_job_is_named_after_its_script() -> None:
    assert _name_from("python train.py --lr 3") == "train.py"
    assert _name_from("torchrun --nproc 8 /opt/run/pretrain.py") == "pretrain.py"
    assert _name_from("") == "job"


# ---------------------------------------------------------------------------- logs -f
def test_following_a_sliding_tail_prints_each_line_once() -> None:
    log = "".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(3000))
    window, printed, old = 4096, "", ""
    for end in range(0, len(log) + 1, 997):  # reads at arbitrary moments
        new = log[:end][-window:]
        printed += new_text(old, new)
        old = new
    printed += new_text(old, log[-window:])
    assert printed == log


def test_a_tail_that_starts_over_is_printed_whole() -> None:
    assert new_text("a\nb\n", "a\nb\nc\n") == "c\n"
    assert new_text("a\nb\n", "a\nb\n") == ""
    assert new_text("", "x\n") == "x\n"
    assert new_text("old run\n", "new run\n") == "new run\n"


# ---------------------------------------------------------------------------- why
def test_why_shows_any_explanation_field_the_api_adds() -> None:
    job = {"id": 1, "state": "QUEUED", "pending_reason": "Resources", "gpus": 8,
           "pending_sentence": "s", "queue_position": {"tenant": 1, "cluster": 2},
           "estimate": None, "why_pending": {"blocked_by": [3]}, "depends_on": [3],
           "name": "x"}
    fields = explain.explanation_fields(job)
    assert list(fields) == ["state", "pending_reason", "pending_sentence", "queue_position",
                            "estimate", "why_pending"]


@pytest.mark.parametrize("reason", ["None", "Priority", "Resources", "QuotaLimit",
                                    "Reservation", "Topology", "NodeDown", "GpuType",
                                    "Preempting", "InteractiveTierFull"])
def test_every_pending_reason_has_advice(reason: str) -> None:
    job = {"pending_reason": reason, "gpus": 8, "gpus_per_node": 8, "max_runtime_s": None}
    hints = explain.hints(job, {"name": "t", "current_gpus": 16, "quota_limit_gpus": 16})
    assert hints and all(isinstance(h, str) and h for h in hints)


@pytest.mark.parametrize(("held", "limit", "priority_helps"), [
    (16, 16, False),   # at its quota: 8 more do not fit whatever the order
    (12, 16, False),   # 12 + 8 > 16
    (8, 16, True),     # 8 + 8 fit: the team's order is what holds it
    (None, None, True),  # the team's figures not readable: the general advice
])
def test_a_priority_job_whose_quota_holds_it_too_is_not_told_to_raise_its_priority(
        held, limit, priority_helps) -> None:
    """gpuq why told a Priority job at its team's quota that a higher --priority moves it
    ahead, while the server's why said a higher priority would not start it sooner
    (2026-12-07): the two agree now."""
    job = {"pending_reason": "Priority", "gpus": 8}
    tenant = {"name": "vision", "current_gpus": held, "quota_limit_gpus": limit}
    first = explain.hints(job, tenant)[0]
    assert ("moves it ahead" in first) is priority_helps
    if not priority_helps:
        assert f"holds {held} of the {limit} GPUs" in first and "not start it sooner" in first


def test_a_job_over_its_owners_cap_is_told_the_teams_cap() -> None:
    job = {"pending_reason": "UserLimit", "gpus": 8, "max_runtime_s": 600}
    hints = explain.hints(job, {"name": "vision", "max_gpus_per_user": 16})
    assert "at most 16 GPUs at once" in hints[0]
    assert explain.hints(job, None)  # the advice stands without the team's figures


@pytest.mark.parametrize(("preemption", "said"), [
    ({"for_job": 12, "detail": {"for": 12}}, "job 12"),
    # not the reader's to see: the API's words, not "job -" (found 2026-12-07)
    ({"for_job": None, "detail": {"for": "a job of team pretrain"}}, "a job of team pretrain"),
    ({"for_job": None, "detail": {}}, "another job"),
])
def test_a_preemption_names_the_job_it_made_room_for_as_the_reader_may_see_it(
        preemption, said) -> None:
    from gpuq.cli import made_room_for

    assert made_room_for(preemption) == said


def test_a_server_error_page_is_told_in_one_line_not_printed_whole() -> None:
    # a 500's Django debug page (80 KB of HTML) was printed as the error (2026-12-07)
    from gpuq.http import _not_json

    page = (b"<!DOCTYPE html><html><head><title>TypeError at /api/v1/jobs/69/cancel/"
            b"</title></head><body>" + b"x" * 80_000 + b"</body></html>")
    said = _not_json(page, 500)
    assert said == ("the server failed (HTTP 500: TypeError at /api/v1/jobs/69/cancel/); "
                    "its log says why")
    assert _not_json(b"<html><title>Bad Gateway</title></html>", 502).startswith(
        "the server failed (HTTP 502: Bad Gateway)")
    assert _not_json(b"Service Unavailable", 403) == "Service Unavailable"


def test_the_schedulers_instants_read_as_clock_times() -> None:
    # "reserved ... from t=1796606519" was printed raw by gpuq why (2026-12-07)
    from gpuq.timefmt import plain_instants

    assert plain_instants("reserved 2 nodes from t=1796606519, when 33 ends") == (
        "reserved 2 nodes from 01:21 UTC, when 33 ends")
    assert plain_instants("t=12 and at=1796606519x stay") == "t=12 and at=1796606519x stay"


def test_share_shows_the_share_the_rank_was_made_from_in_hours() -> None:
    # the share "now", in GPU-seconds, beside a rank made up to a minute earlier read as
    # a broken order (rank 1 at 106.4 above rank 2 at 86.5: found 2026-12-07)
    from gpuq.cli import SHARE_COLUMNS

    cols = {c.header: c for c in SHARE_COLUMNS}
    row = {"share": 383_040.0, "ranked_share": 9000.0, "share_rank": 1}
    assert cols["SHARE_H"].text(row) == "2.50" and cols["RANK"].text(row) == "1"
    assert cols["SHARE_H"].text({"ranked_share": None}) == "-"


def test_ctrl_c_before_a_watchs_first_frame_stops_it_with_status_0_too(monkeypatch) -> None:
    """--watch runs until Ctrl-C, so Ctrl-C is its way out however early it comes (the
    first request under way, say); any other command stopped by it exits 130."""
    from gpuq import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "client_for", interrupted)
    assert cli.main(["queue", "--watch"]) == cli.EXIT_OK
    assert cli.main(["logs", "-f", "12"]) == cli.EXIT_OK
    assert cli.main(["queue"]) == cli.EXIT_INTERRUPTED
    assert cli.main(["logs", "12"]) == cli.EXIT_INTERRUPTED


@pytest.mark.parametrize(("gpus", "min_gpus", "never"), [
    (96, None, True),   # more than the team may hold at all: no end frees enough
    (96, 8, False),     # elastic: it may start at 8
    (16, None, False),  # within the limit: running jobs' ends make room
])
def test_a_quota_job_past_its_teams_limit_is_not_told_running_jobs_will_free_enough(
        gpus, min_gpus, never) -> None:
    """After a quota cut, gpuq why's Why said the job "cannot start while the team's limits
    stay as they are" and its advice that "it starts when the team's running jobs free
    enough" (an operator's session, 2026-12-07)."""
    job = {"pending_reason": "QuotaLimit", "gpus": gpus, "min_gpus": min_gpus}
    tenant = {"name": "multimodal", "current_gpus": 24, "quota_limit_gpus": 80}
    first = explain.hints(job, tenant)[0]
    assert ("no running job's end makes room" in first) is never
    assert ("free enough" in first) is not never


#: The server's why_pending for a job that may not borrow (scheduler_app/selectors/why.py,
#: _within_guarantee with the default protected_borrow_max_s of 7,200 s), word for word.
BARRED_WHY = {
    "reason": "QuotaLimit",
    "headline": "Team vision holds 8 GPUs of its 8 guaranteed; this job's 8 would take it "
                "to 16, and it cannot be preempted (neither checkpointable nor preemptible) "
                "and declares no time limit: such a job borrows past its team's guarantee "
                "only with a time limit of at most 2 h, so that the team it borrows from can "
                "take its GPUs back.",
    "evidence": [],
    "next_step": "Mark it checkpointable (or preemptible), or give it a time limit of at "
                 "most 2 h, and it may borrow idle GPUs; otherwise it starts when the team's "
                 "running jobs free 8 GPUs.",
}


@pytest.mark.parametrize("runtime", [None, 4 * 3600])
def test_a_quota_job_that_may_not_borrow_is_told_what_would_let_it_as_the_server_says(
        runtime) -> None:
    """gpuq why advised "Fewer GPUs" and "the 16 GPUs it may hold (guarantee plus borrow
    limit)" to a job that may hold only its team's guarantee, where the server's own
    answer said a time limit of at most 2 h, or being checkpointable or preemptible, lets
    it borrow (a researcher's session). Read from the API's may_borrow and
    borrow_max_runtime_s, not from its words."""
    job = {"pending_reason": "QuotaLimit", "gpus": 8, "min_gpus": None, "tenant": "vision",
           "checkpointable": False, "preemptible": False, "max_runtime_s": runtime,
           "why_pending": BARRED_WHY, "may_borrow": False, "borrow_max_runtime_s": 7200}
    tenant = {"name": "vision", "current_gpus": 8, "guaranteed_gpus": 8,
              "borrow_limit_gpus": 8, "quota_limit_gpus": 16}
    hints = explain.hints(job, tenant)
    text = " ".join(hints)
    assert "Fewer GPUs" not in text and "16 GPUs it may hold" not in text
    assert "--checkpointable" in text and "--preemptible" in text
    assert "--time of at most 2h" in text  # the server's window, not a guess
    assert "guarantee of 8 GPUs" in text
    # a job that may borrow (checkpointable) keeps the advice about the team's limit
    may = explain.hints({**job, "checkpointable": True, "may_borrow": True,
                         "why_pending": {**BARRED_WHY, "headline": "Team vision holds ..."}},
                        tenant)
    assert "guarantee plus borrow limit" in may[0]


def test_a_job_behind_its_teams_quota_holder_is_told_what_could_start_it_beside_it() -> None:
    """QuotaReserved had no advice at all. The core lets such a job start only if the
    team's quota holds it and the job holding the quota both, or if it ends (by its time
    limit) before that job's planned start (scheduler_app/core/tick.py _quota_allows)."""
    job = {"pending_reason": "QuotaReserved", "gpus": 8, "tenant": "vision",
           "max_runtime_s": None}
    hints = explain.hints(job, None)
    text = " ".join(hints)
    assert hints and "--time" in text and "planned start" in text
    assert "quota" in text and "--gpus" in text
    assert "cancel" in text  # the flags are fixed at submit


def test_why_wraps_a_wide_name_by_its_width_and_loses_no_word() -> None:
    """textwrap counts characters and the lines were then cut to the terminal's columns:
    a CJK name (two columns a character) lost its end and the words after it."""
    from gpuq.cli import why_lines
    from gpuq.output import cell_width

    name = "日本語の長いジョブ名で実験を続ける" * 3
    data = {"id": 5, "name": name, "tenant": "vision", "state": "QUEUED",
            "pending_reason": "Resources", "pending_sentence": "Not enough free GPUs.",
            "hints": [f"About {name} and the words after it."]}
    lines = why_lines(data, {}, 80)
    assert all(cell_width(line) <= 80 for line in lines)
    text = "".join("".join(lines).split())
    assert "…" not in text
    assert f"Job5({name},teamvision)iswaiting:Resources." in text
    assert f"About{name}andthewordsafterit." in text


def test_wrapping_by_width_keeps_every_character_and_fits() -> None:
    from gpuq.output import cell_width, wrap

    text = "a " + "漢" * 50 + " b c ascii-words and more"
    lines = wrap(text, 30, initial_indent="  ", subsequent_indent="    ")
    assert all(cell_width(line) <= 30 for line in lines)
    assert "".join("".join(lines).split()) == "".join(text.split())
    assert lines[0].startswith("  a") and all(line.startswith("    ") for line in lines[1:])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab 漢字ｶ\n-é"), max_size=200),
       st.integers(min_value=20, max_value=90))
def test_wrapped_text_fits_its_width_and_keeps_every_word(text: str, width: int) -> None:
    from gpuq.output import cell_width, wrap

    lines = wrap(text, width, initial_indent="  ", subsequent_indent="    ")
    assert all(cell_width(line) <= width for line in lines)
    assert "".join("".join(lines).split()) == "".join(text.split())


def test_share_csv_gives_ranked_share_in_the_apis_units() -> None:
    """-o csv's ranked_share was GPU-hours per GPU, -o json's (the API's) GPU-seconds,
    under one name (a researcher's session): a column of the API's name carries its value."""
    import csv
    import io

    from gpuq.cli import SHARE_COLUMNS

    rows = [{"name": "vision", "ranked_share": 9000.0, "share_rank": 1,
             "usage_gpu_h": 20.0}]
    got = next(csv.DictReader(io.StringIO(output.to_csv(rows, SHARE_COLUMNS))))
    assert float(got["ranked_share"]) == 9000.0
    # every column named after an API field carries that field's value
    assert {k: v for k, v in got.items() if k in rows[0]} == {
        k: str(v) for k, v in rows[0].items()}


def test_the_clients_copies_of_the_apis_text_rules_are_the_apis() -> None:
    """gpuq is a package of its own (standard library only): it cannot import the
    server's rules, so it carries copies (``cancel --why``, the duration bound). They must
    not drift: every character of the Basic Multilingual Plane, alone and after a letter,
    is refused by both or by neither (the client also refuses lone surrogates, which JSON
    cannot carry), and the words and the bound are the same."""
    from gpuq import fields as client

    from scheduler_app.services import jobs as server

    for code in range(0x10000):
        ch = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            assert client.unprintable(ch)
            continue
        for text in (ch, "a" + ch):
            assert client.unprintable(text) == server.unprintable(text), hex(code)
    assert client.UNPRINTABLE_WORDS == server.UNPRINTABLE_WORDS
    assert client.MAX_DURATION_S == server.MAX_DURATION_S
