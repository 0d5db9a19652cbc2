"""The dashboard's forms. They parse what people type; the rules are the services'.

``JobForm`` turns the fields into the services' spec and asks
``services.jobs.validate_job_spec`` and ``never_fits`` (the same calls the API makes), so
the dashboard and the API refuse the same jobs with the same words. The form adds only
what a text box needs: parsing ("4h" is 14,400 seconds) and the storage bounds.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import format_html

from scheduler_app.core.types import MAX_ARRAY_TASKS, TENANT_LIMITS
from scheduler_app.models import Job, Tenant
from scheduler_app.scheduler_config import scheduler_config
from scheduler_app.services.cluster import NODE_WHY_MAX, QUOTA_GPUS_WORDS, limit_words
from scheduler_app.services.jobs import (
    awaited_errors,
    never_fits,
    never_fits_field,
    over_team_max_runtime,
    parse_dependencies,
    team_default,
    validate_job_spec,
)
from scheduler_app.sim.whatif import DEFAULT_HOURS, MAX_HOURS, WhatIfError, check_hours

from .whatif_runs import FLAGS, problems

#: Any duration past this is a typo (seconds typed as milliseconds): the API's bound too.
MAX_DURATION_S = 366 * 86400
#: Storage bounds (a PositiveIntegerField / PositiveSmallIntegerField).
MAX_INT = 2_147_483_647
MAX_SMALL = 32_767

# [0-9], not \d: Python's \d (and int) read other scripts' digits too (١ is one).
# gpuq.timefmt's grammar, no more: no decimals ("1.5h"), no spaces inside ("1h 30m"), the
# units d, h, m and s only (the form read "1.5h" and "1h 30m" as 5400 s, gpuq refused both)
_COMPOUND = re.compile(r"^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")
_SLURM = re.compile(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?$")


class SecondsField(forms.CharField):
    """A duration with a unit ("90m", "4h", "2d", "1h30m") or in Slurm's colon forms
    ("1:30:00", "2-00:00:00"), as gpuq reads them (``gpuq.timefmt.parse_duration``): what
    it refuses ("1.5h", "1h 30m", "90min") is refused here too. A bare number ("3600") is
    seconds where ``bare_seconds``; the time limit refuses it, as gpuq does: Slurm reads
    ``--time 90`` as minutes, the API as seconds (a Slurm user's "90" made a job that
    failed after 90 s: found by trying the product, 2026-12-07)."""

    default_error_messages = {
        "invalid": "%(value)s is not a duration. Type a number with a unit (90m, 4h, 1h30m, "
                   "2d; whole numbers, no spaces) or Slurm's 1:30:00.",
        "bare": ("%(value)s has no unit: Slurm reads a bare number as minutes, the API as "
                 "seconds. Type %(value)sm, %(value)ss or 1:30:00."),
        "too_long": "At most 366 days.",
    }

    def __init__(self, *, bare_seconds: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        self.bare_seconds = bare_seconds
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> int | None:
        text = super().to_python(value)
        if text in ("", None):
            return None
        raw = str(text).strip().lower()
        if _LONG_NUMBER.search(raw):
            # past any duration, and int() of more than 4,300 digits raised (a 500; found
            # by a researcher's session, 2026-12-07): a negative one is any negative
            # number to the service, which says why; any other is too long
            if raw.startswith("-"):
                return -1
            raise ValidationError(self.error_messages["too_long"], code="too_long")
        if re.fullmatch(r"-[0-9]+", raw):  # a minus sign is not a unit: the service says
            return int(raw)
        if raw.isascii() and raw.isdigit() and not self.bare_seconds:
            raise ValidationError(self.error_messages["bare"], code="bare",
                                  params={"value": raw})
        try:
            seconds = _seconds(raw)
        except ValueError as error:  # out of Slurm's bounds: the message says which
            raise ValidationError(str(error), code="invalid") from None
        if seconds is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid",
                                  params={"value": str(text).strip()})
        if seconds > MAX_DURATION_S:
            raise ValidationError(self.error_messages["too_long"], code="too_long")
        return seconds


#: a run of digits longer than any duration's (366 days is 8 digits of seconds)
_LONG_NUMBER = re.compile(r"[0-9]{16}")


def _seconds(raw: str) -> int | None:
    if raw.isascii() and raw.isdigit():  # a bare number (where it is seconds)
        return int(raw)
    found = _COMPOUND.match(raw)
    if raw and found and any(found.groups()):
        d, h, mi, sec = (int(g or 0) for g in found.groups())
        return d * 86400 + h * 3600 + mi * 60 + sec
    found = _SLURM.match(raw)
    if found and (found.group(1) is not None or found.group(3) is not None):
        days, first, second, third = found.groups()
        # Slurm's bounds, as gpuq.timefmt keeps them (1-25 was read as 176,400 s)
        if days is not None:  # D-HH[:MM[:SS]]
            h, mi, sec = int(first), int(second or 0), int(third or 0)
            _in_range(raw, "hours after the days", h, 23)
            _in_range(raw, "minutes", mi, 59)
            _in_range(raw, "seconds", sec, 59)
            return int(days) * 86400 + h * 3600 + mi * 60 + sec
        if third is not None:  # HH:MM:SS
            _in_range(raw, "minutes", int(second), 59)
            _in_range(raw, "seconds", int(third), 59)
            return int(first) * 3600 + int(second) * 60 + int(third)
        _in_range(raw, "seconds", int(second), 59)
        return int(first) * 60 + int(second)  # MM:SS
    return None


def _in_range(raw: str, what: str, value: int, top: int) -> None:
    if value > top:
        raise ValueError(f"{raw}: {what} go from 0 to {top} in Slurm's forms, not {value} "
                         "(or write 90m, 25h)")


#: sbatch's dependency kinds (``--dependency afterok:12``) and the services' ``when``.
DEPENDENCY_KINDS = {"afterok": "ok", "afterany": "any", "afternotok": "notok"}
# [0-9], not \d: "afterok:١٥٢" (Arabic-Indic digits) was read as job 152; gpuq refuses it
_DEPENDENCY_ITEM = re.compile(r"^(?:(after(?:ok|any|notok)):)?#?([0-9]+(?::#?[0-9]+)*)$")


class DependenciesField(forms.CharField):
    """The jobs a job waits for, as sbatch writes them: ``afterok:12`` (after #12
    completes), ``afterany:13`` (ends), ``afternotok:14`` (fails or is cancelled), several
    ids after one kind (``afterok:12:13``), commas or spaces between; a bare ``12`` is
    ``afterok:12``. The value is the services' ``depends_on``: ``[{"job", "when"}]``.
    (``gpuq``'s parser reads the same text; it lives in the client's own package.)"""

    default_error_messages = {
        "invalid": "Write the jobs it waits for as afterok:12 (after #12 completes), "
                   "afterany:13 (ends) or afternotok:14 (fails or is cancelled), commas "
                   "between: {part!r} is none of these.",
        "twice": "Job #{job} is named twice: name each job once.",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 2000)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[dict[str, Any]]:
        text = super().to_python(value) or ""
        out: list[dict[str, Any]] = []
        seen: set[int] = set()
        for part in re.split(r"[,\s]+", text.strip().lower()):
            if not part:
                continue
            found = _DEPENDENCY_ITEM.match(part)
            if found is None:
                raise ValidationError(self.error_messages["invalid"].format(part=part),
                                      code="invalid")
            when = DEPENDENCY_KINDS[found.group(1) or "afterok"]
            for job in (int(x.lstrip("#")) for x in found.group(2).split(":")):
                if job in seen:
                    raise ValidationError(self.error_messages["twice"].format(job=job),
                                          code="twice")
                seen.add(job)
                out.append({"job": job, "when": when})
        return out


class WholeNumberField(forms.IntegerField):
    """A whole number in ASCII digits, as gpuq's ``fields.integer`` reads one: Django's
    IntegerField reads "٨" (Arabic-Indic eight) as 8 and "8.0" as 8, which gpuq refuses."""

    def to_python(self, value: Any) -> int | None:
        text = "" if value is None else str(value).strip()
        if text and not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(text)


def _int(label: str, *, initial: Any = None, help_text: str = "", max_value: int = MAX_INT,
         required: bool = False) -> forms.IntegerField:
    return WholeNumberField(
        label=label, initial=initial, help_text=help_text, required=required,
        max_value=max_value, min_value=-MAX_INT,
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )


#: The spec fields, in the order of job_submit's keyword arguments.
SPEC_FIELDS = (
    "name", "command", "gpus", "gpus_per_node", "gpu_type", "priority", "checkpointable",
    "checkpoint_interval_s", "checkpoint_time_s", "restart_s", "max_runtime_s", "min_gpus",
    "preemptible", "interactive", "idempotency_key",
)
#: What a field left empty or unparsable stands for when the services check the others.
_NEUTRAL: dict[str, Any] = {
    "name": "", "command": "", "gpus": None, "gpus_per_node": None, "gpu_type": "",
    "priority": 0, "checkpointable": False, "checkpoint_interval_s": None,
    "checkpoint_time_s": None, "restart_s": 0, "max_runtime_s": None, "min_gpus": None,
    "preemptible": False, "interactive": False, "idempotency_key": "",
}


class RestoredKeyInput(forms.TextInput):
    """The form's key once more, where the browser's Back can bring it back. Back fetches
    /jobs/new/ again, with a new key in the hidden ``idempotency_key``, and Chromium
    restores what was typed into the form's text fields but never a hidden input, nor a
    field still at its default: Submit sent the restored values with the new key and made
    a second job, silently (found 2026-12-07). This text input (never shown) is rendered
    empty and the page's script (static/js/app.js) copies the key into it, so it differs
    from its default and is restored with the typed values; the form then submits with
    the key it was first submitted with, and the services see that form again: the same
    values are the job already made, other values are refused ("already submitted as job
    N"). No ``autocomplete="off"``: it would stop the restoring. Without the script it
    stays empty and the hidden key is used alone."""

    is_hidden = True  # for the page: no label, no error slot

    def __init__(self) -> None:
        super().__init__(attrs={"hidden": True, "tabindex": "-1", "aria-hidden": "true",
                                "spellcheck": "false", "data-restored-key": ""})

    def format_value(self, value: Any) -> None:
        return None  # always empty as rendered: only the script or the browser fills it


def interactive_help(slice_gpus: int) -> str:
    """What the Interactive box does on this cluster (design.md, the interactive tier):
    only a job inside the interactive slice is never preempted, and with no slice the flag
    protects nothing (the help said "Never preempted" on a cluster with no slice)."""
    if slice_gpus <= 0:
        return ("This cluster keeps no interactive slice (interactive_reserved_gpus is 0): "
                "the job is scheduled, and may be preempted, like any other.")
    return ("Runs in the interactive slice when it fits there, and is "
            "never preempted there; too large for it, or with the slice full, it runs "
            "outside it and may be preempted like any job.")


class SlottedBoundField(forms.BoundField):
    """A field whose input is described by its help and by its error slot as the
    template writes them (``partials/field.html``: ``err-<name>``). Django's own
    ``aria-describedby`` named ``id_<name>_error``, which no element has, so a screen
    reader never read the error (a team lead's session, 2026-12-07). The slot is named
    whether or not it holds an error now: the live check fills it in place."""

    @property
    def aria_describedby(self) -> str | None:
        if self.field.widget.attrs.get("aria-describedby") or self.is_hidden:
            return None
        ids = [f"{self.auto_id}_helptext"] if self.help_text and self.auto_id else []
        return " ".join([*ids, f"err-{self.name}"])


class JobForm(forms.Form):
    bound_field_class = SlottedBoundField
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), label="Team",
                                    empty_label=None)
    name = forms.CharField(label="Name", required=False, max_length=200,
                           help_text="What you will look for in the list, e.g. llama-7b-lr3e-4.")
    # required here: a job submitted from the form with no command ran nothing on its
    # GPUs (the API still accepts one, for pipelines that set the command elsewhere);
    # spaces alone are stripped to nothing and refused too
    command = forms.CharField(
        label="Command", required=True,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text="Run by the node agent on every node of the job.",
        error_messages={"required": "Type the command the node agent runs, e.g. "
                                    "python train.py --config base.yaml."},
    )
    gpus = _int("GPUs", initial=8, help_text="The whole gang starts at once, or not at all.")
    gpus_per_node = _int(
        "GPUs per node", max_value=MAX_SMALL,
        help_text="The gang's shape, e.g. 8 for whole nodes. Empty: any split.",
    )
    gpu_type = forms.ChoiceField(label="GPU type", required=False, choices=[("", "Any")])
    priority = _int("Priority", initial=0,
                    help_text="Orders your team's own queue: higher goes first.")
    max_runtime_s = SecondsField(
        label="Time limit", initial="4h", bare_seconds=False,
        help_text="The run stops (FAILED, TimeLimit) at this limit. With a limit the job can "
                  "backfill and others get start estimates; empty: no limit.",
    )
    checkpointable = forms.BooleanField(
        label="Can checkpoint and resume", required=False, initial=True,
        help_text="It is asked to checkpoint before it is preempted, and resumes later.",
    )
    checkpoint_interval_s = SecondsField(
        label="Checkpoint every", initial="30m",
        help_text="How often it writes a checkpoint on its own.",
    )
    checkpoint_time_s = SecondsField(
        label="Time to write a checkpoint", initial="60s",
        help_text="Its grace window when asked to stop. Empty: the default (120 s).",
    )
    restart_s = SecondsField(label="Restart time", initial="0",
                             help_text="Time to load a checkpoint and warm up again.")
    min_gpus = _int("Elastic minimum GPUs",
                    help_text="An elastic job may run (and shrink) down to this. Empty: "
                              "not elastic.")
    preemptible = forms.BooleanField(
        label="Preemptible pricing", required=False,
        help_text="May be preempted even without a checkpoint.",
    )
    interactive = forms.BooleanField(label="Interactive (notebook)", required=False)
    dependencies = DependenciesField(
        label="Waits for",
        widget=forms.TextInput(attrs={"placeholder": "afterok:12, afterany:13",
                                      "spellcheck": "false", "autocomplete": "off"}),
        help_text="Jobs to wait for, as sbatch writes them: afterok:12 (starts after #12 "
                  "completes), afterany:13 (after it ends), afternotok:14 (after it fails or "
                  "is cancelled). Empty: starts as soon as it fits.",
    )
    array_count = _int("Tasks", max_value=MAX_INT,
                       help_text=f"An array: this many copies of the job (1 to "
                                 f"{MAX_ARRAY_TASKS:,}), numbered 0, 1, ... in ARRAY_INDEX. "
                                 "Empty: one job.")
    array_max_running = _int("At most at once", max_value=MAX_INT,
                             help_text="How many of the tasks may run at the same time. "
                                       "Empty: no cap.")
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=128)
    form_key = forms.CharField(widget=RestoredKeyInput, required=False, max_length=128)

    def __init__(self, *args: Any, tenants: Any, gpu_types: list[str],
                 sees: Any = None, owner_id: int | None = None, **kwargs: Any):
        """``sees(tenant_id, owner_id)``: whether the submitter may see a job (the jobs
        it waits for must be theirs to see); None: not checked here. ``owner_id``: who
        submits (the team's per-user cap applies to them)."""
        super().__init__(*args, **kwargs)
        self.sees = sees
        self.owner_id = owner_id
        self.fields["tenant"].queryset = tenants
        self.fields["gpu_type"].choices = [("", "Any")] + [(t, t) for t in gpu_types]
        self.fields["interactive"].help_text = interactive_help(
            scheduler_config().interactive_reserved_gpus)
        if not self.is_bound:
            # one key per rendered form: a double click or a resend submits the job once
            self.initial["idempotency_key"] = _new_key()

    @property
    def field_error_count(self) -> int:
        """How many fields have an error (the form's own errors, above it, are not one)."""
        return sum(1 for name in self.errors if name != forms.forms.NON_FIELD_ERRORS)

    def submitted_before(self, what: str, url: str) -> None:
        """This form's key made ``what`` (e.g. "job #96 w1", at ``url``) from other values
        (the browser's Back, an edit, Submit again): say so, and give the form a fresh key
        so that submitting it again makes these values a new job, as asked."""
        self.add_error(None, format_html(
            'This form was already submitted as <a href="{}">{}</a>, with other values: '
            "nothing new was submitted. Submit again to submit these values as a new job.",
            url, what))
        self.data = self.data.copy()
        self.data[self.add_prefix("idempotency_key")] = _new_key()

    def spec(self) -> dict[str, Any]:
        """The cleaned fields as job_submit's keyword arguments (after is_valid)."""
        return _spec_of(self.cleaned_data)

    def depends_on(self) -> list[dict[str, Any]]:
        """The services' ``depends_on`` (after is_valid)."""
        return list(self.cleaned_data.get("dependencies") or [])

    def array(self) -> tuple[int, int | None] | None:
        """(count, max_running) for an array, None for one job (after is_valid)."""
        count = self.cleaned_data.get("array_count")
        return None if count is None else (count, self.cleaned_data.get("array_max_running"))

    #: The services' field paths and the form's fields that hold them.
    SERVICE_FIELDS = {"array.count": "array_count", "array.max_running": "array_max_running"}

    def add_service_errors(self, errors: dict[str, Any]) -> None:
        """The services' errors ({field path: message(s)}) at the form's fields:
        ``depends_on[0].job`` at Waits for, ``array.count`` at Tasks."""
        for name, messages in errors.items():
            name = str(name)
            target = self.SERVICE_FIELDS.get(name) or (
                "dependencies" if name.startswith("depends_on") else name)
            if target in self.errors:
                continue  # its own parse error says it already
            self.add_error(target if target in self.fields else None, messages)

    def _clean_array_and_dependencies(self, data: dict[str, Any]) -> None:
        count, cap = data.get("array_count"), data.get("array_max_running")
        if count is not None and not 1 <= count <= MAX_ARRAY_TASKS:
            self.add_error("array_count", f"An array has 1 to {MAX_ARRAY_TASKS:,} tasks.")
        if cap is not None:
            if count is None and "array_count" not in self.errors:
                self.add_error("array_max_running", "This caps the tasks of an array: give "
                                                     "the number of tasks too, or leave it "
                                                     "empty.")
            elif cap < 1:
                self.add_error("array_max_running", "At least 1 task must be allowed to run "
                                                    "at once (or leave it empty for no cap).")
        if data.get("dependencies"):
            deps, errors = parse_dependencies(data["dependencies"])
            if not errors:
                errors = awaited_errors({"depends_on": deps}, owner=None, sees=self.sees)
            self.add_service_errors(errors)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("form_key"):  # the key the browser restored with the values (Back)
            data["idempotency_key"] = data["form_key"]
        self._clean_array_and_dependencies(data)
        spec = _spec_of(data)
        try:
            validate_job_spec(spec)
        except ValidationError as error:
            for name, messages in error.message_dict.items():
                if name not in self.errors:  # a parse error already says what is wrong
                    self.add_error(name if name in self.fields else None, messages)
            return data
        tenant = data.get("tenant")
        # only the shape's own errors stop the fit check: an empty command must not hide
        # "it needs 64 GPUs; the cluster has 16"
        shape = {"tenant", "gpus", "gpus_per_node", "min_gpus", "gpu_type"}
        if tenant is None or shape & set(self.errors):
            return data
        # the job as the services admit it (_new_jobs): whether it may borrow depends on
        # its checkpointing, preemptible flag and limit (the team's default filling in a
        # missing one), and the per-user cap on its owner. With the shape alone, every job
        # larger than its team's guarantee was refused here, checkpointable or not, while
        # the API admitted it (2026-12-07).
        job = Job(tenant=tenant, owner_id=self.owner_id, gpus=spec["gpus"],
                  min_gpus=spec["min_gpus"], gpus_per_node=spec["gpus_per_node"],
                  gpu_type=spec["gpu_type"], checkpointable=spec["checkpointable"],
                  preemptible=spec["preemptible"], max_runtime_s=spec["max_runtime_s"],
                  **team_default(spec, tenant))
        why = never_fits(job, tenant)
        if why:
            self.add_error(never_fits_field(why, spec), f"This job can never run: it {why}.")
        too_long = over_team_max_runtime(spec, tenant)
        if too_long and "max_runtime_s" not in self.errors:
            self.add_error("max_runtime_s", too_long)
        return data


def _new_key() -> str:
    return f"web-{uuid.uuid4().hex}"


def _spec_of(data: dict[str, Any]) -> dict[str, Any]:
    """The services' spec from the cleaned fields; a field that did not parse stands in
    neutral (its own error is shown, the services judge the others)."""
    spec = {name: data.get(name, _NEUTRAL[name]) for name in SPEC_FIELDS}
    for name in ("restart_s", "priority"):
        if spec[name] is None:
            spec[name] = 0
    spec["name"] = (spec["name"] or "").strip()
    spec["command"] = spec["command"] or ""
    spec["gpu_type"] = spec["gpu_type"] or ""
    spec["idempotency_key"] = spec["idempotency_key"] or ""
    return spec


def _bounds_words(words: str) -> dict[str, str]:
    return {"min_value": words, "max_value": words}


class QuotaForm(forms.Form):
    """A team's guarantee and borrow limit; the service checks the values."""

    # storage's bounds, in the services' words (it said "Ensure this value is less than
    # or equal to 2147483647." for 10**30: found 2026-12-07); the service checks the rest
    guaranteed_gpus = forms.IntegerField(
        label="Guaranteed GPUs", min_value=-MAX_INT, max_value=MAX_INT,
        error_messages=_bounds_words(QUOTA_GPUS_WORDS))
    borrow_limit_gpus = forms.IntegerField(
        label="Borrow limit (GPUs)", min_value=-MAX_INT, max_value=MAX_INT,
        error_messages=_bounds_words(QUOTA_GPUS_WORDS))
    # team limits, empty: none (the service checks the values and names the field)
    max_gpus_per_user = forms.IntegerField(
        label="GPUs per user", required=False, min_value=-MAX_INT, max_value=MAX_INT,
        error_messages=_bounds_words(limit_words("max_gpus_per_user")))
    default_runtime_s = forms.IntegerField(
        label="Default time limit (s)", required=False, min_value=-MAX_INT, max_value=MAX_INT,
        error_messages=_bounds_words(limit_words("default_runtime_s")))
    max_runtime_s = forms.IntegerField(
        label="Longest time limit (s)", required=False, min_value=-MAX_INT, max_value=MAX_INT,
        error_messages=_bounds_words(limit_words("max_runtime_s")))

    @staticmethod
    def initial_of(tenant: Any) -> dict[str, Any]:
        return {name: getattr(tenant, name) for name in (
            "guaranteed_gpus", "borrow_limit_gpus", *TENANT_LIMITS)}

    def service_kwargs(self) -> dict[str, Any]:
        """The cleaned data as tenant_set_quota takes it: a limit sent empty clears it, one
        not sent at all (an older page) keeps its value."""
        data = dict(self.cleaned_data)
        limits = {name: data.pop(name) for name in TENANT_LIMITS}
        data["limits"] = {name: value for name, value in limits.items()
                          if self.add_prefix(name) in self.data}
        return data


class DrainForm(forms.Form):
    """Why a node is drained: asked every time, kept in the log row beside the operator's
    name (a drained node with no reason is a question for whoever finds it)."""

    why = forms.CharField(label="Reason", max_length=NODE_WHY_MAX, error_messages={
        "required": "Say why the node is drained: the reason goes in the log."})


def _lines(text: str) -> list[str]:
    """One change a line (commas or spaces too: no change holds a space, and "pod-a-n01
    pod-a-n02" was read as one unknown node): the command line's repeated flags; a
    change given twice counts once, as the command's (``sim.whatif.parse_changes``).
    Spaces around ``=`` and ``:`` belong to the change (``rl = 96`` is ``rl=96``, as the
    command reads ``--set-quota "rl = 96"``), not between changes."""
    text = _AROUND_SIGN.sub(r"\1", text or "")
    return list(dict.fromkeys(part for part in text.replace(",", " ").split()))


_AROUND_SIGN = re.compile(r"[ \t]*([=:])[ \t]*")


class WhatIfForm(forms.Form):
    """The changes of a what-if, as ``manage.py whatif`` takes them, one a line. Their
    names and values are checked on the live state before the run starts, in the run's
    own words (``whatif_runs.problems``: ``sim.whatif.apply_changes``), each at its box
    and every bad one at once, so the page and the command refuse the same things and a
    typo never becomes a failed run."""

    bound_field_class = SlottedBoundField

    set_quota = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                label="Set quota",
                                help_text="TEAM=GUARANTEE[:BORROW], one a line")
    add_nodes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                label="Add nodes",
                                help_text="POD=N: N more nodes like the pod's last")
    drain = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                            label="Drain nodes", help_text="node names")
    undrain = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                              label="Undrain nodes",
                              help_text="nodes draining now, back in service")
    up = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                         label="Mark nodes up", help_text="nodes down now, back in service")
    cancel = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                             label="Cancel jobs",
                             help_text="job ids; an array's task as 8_3, all its tasks 8_*")
    setting = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                              label="Settings", help_text="NAME=VALUE (any SCHEDULER_ setting)")
    hours = forms.FloatField(initial=24, label="Horizon (hours)",
                             help_text=f"one second (1/3600) to {MAX_HOURS:g} hours")

    def clean_hours(self) -> float:
        hours = self.cleaned_data["hours"]
        try:
            check_hours(hours)  # the command's own range and words
        except WhatIfError:
            raise forms.ValidationError(
                f"The horizon must be from one second (1/3600) to {MAX_HOURS:g} hours, as "
                "manage.py whatif takes it.") from None
        return hours

    def changes(self) -> dict[str, list[str]]:
        return {name: _lines(self.cleaned_data.get(name, "")) for name in FLAGS}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not set(self.errors) - {"hours"}:
            # a bad horizon does not hide the changes' errors (every bad box said at once,
            # as the quota form does: an operator's session, 2026-12-07); they are checked
            # over the default horizon then
            hours = cleaned["hours"] if "hours" not in self.errors else DEFAULT_HOURS
            found = problems(self.changes(), hours=hours)
            for flag, messages in found.items():
                for message in messages:
                    self.add_error(flag, message)
        return cleaned
