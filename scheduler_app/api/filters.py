"""Job list filters (django-filter): tenant, state, owner, size class, array, submit
time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from scheduler_app.api.fields import unknown_field_message
from scheduler_app.core.states import JobState
from scheduler_app.core.types import SIZE_CLASS_BOUNDS, SIZE_CLASS_LABELS
from scheduler_app.models import Job


def size_class_q(label: str) -> Q:
    """The GPUs range of a size class label ("1", "2-8", "9-64", "65-512", "513+")."""
    i = SIZE_CLASS_LABELS.index(label)
    low = 1 if i == 0 else SIZE_CLASS_BOUNDS[i - 1] + 1
    if i == len(SIZE_CLASS_BOUNDS):
        return Q(gpus__gte=low)
    return Q(gpus__gte=low, gpus__lte=SIZE_CLASS_BOUNDS[i])


class StrictFilterSet(django_filters.FilterSet):
    """A FilterSet that refuses an empty parameter (``?tenant=``) instead of ignoring it:
    the client meant something, and an unfiltered answer would mislead it."""

    def is_valid(self) -> bool:
        # a bad choice names what is allowed: Django's "Select a valid choice. queued is
        # not one of the available choices." did not (2026-12-07)
        for field in self.form.fields.values():
            if isinstance(field, forms.ChoiceField) and not isinstance(
                    field, forms.ModelChoiceField):
                allowed = ", ".join(str(v) for v, _label in field.choices if v != "")
                field.error_messages = {**field.error_messages,
                                        "invalid_choice": f"%(value)s is not one of: {allowed}."}
        valid = super().is_valid()
        for name, flt in self.filters.items():
            if name in self.data and any(v == "" for v in self.data.getlist(name)):
                self.form.add_error(name, "Must not be empty: leave the parameter out.")
                valid = False
            elif (not isinstance(flt, django_filters.MultipleChoiceFilter)
                  and len(self.data.getlist(name)) > 1):
                # the last one won: ?tenant=a&tenant=b listed b's jobs alone (2026-12-07)
                self.form.add_error(name, _literal(
                    f"Given {len(self.data.getlist(name))} times: give it once."))
                valid = False
        known = [*self.filters, *self.paging, "format"]
        for key in self.data:
            if key not in known:
                # a typo must not read as "no filter": ?stat=QUEUED listed every job, and a
                # pipeline that cancels what it lists would cancel them all (2026-12-07)
                self.form.errors[key] = self.form.error_class([
                    _literal(unknown_field_message(key, known, "parameter"))])
                valid = False
        for name, (model, field, what, where) in self.must_exist.items():
            value = self.data.get(name, "")
            if value and not model.objects.filter(**{field: value}).exists():
                # a typo must not read as "nothing matches": a log consumer tailed an empty
                # feed for ?tenant=nope (2026-12-07), as the jobs list refuses one
                self.form.add_error(name, _literal(f"No {what} {value!r}: see {where}."))
                valid = False
        return valid

    #: parameter -> (model, its field, what it names, where the names are listed): a value
    #: that names nothing is a 400 naming the parameter
    must_exist: dict[str, tuple[Any, str, str, str]] = {}
    #: the view's paging parameters: any other parameter that is not a filter is refused
    paging: tuple[str, ...] = ("cursor", "page_size")


def _literal(message: str) -> str:
    """A message that may quote the client's input, as django-filter's 400 reads it: it
    formats each message with its params (``message % ()``), so a '%' in a value (``?owner=
    »%``) raised a TypeError, a 500 (found by the schema's property test, 2026-12-07)."""
    return message.replace("%", "%%")


class IdFilter(django_filters.NumberFilter):
    """An integer id (NumberFilter takes decimals, and huge ones overflow the database)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", 2**62)
        super().__init__(*args, **kwargs)


class UtcIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 time, in UTC: PostgreSQL refuses offsets past +-15:59, which ISO
    allows."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except OverflowError as error:
            raise forms.ValidationError("Out of range.") from error


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class JobFilter(StrictFilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__name", help_text="A tenant's name.")
    owner = django_filters.CharFilter(field_name="owner__username",
                                      help_text="The submitter's username.")
    state = django_filters.MultipleChoiceFilter(
        choices=[(s.value, s.value) for s in JobState],
        help_text="One or more states (repeat the parameter).",
    )
    size_class = django_filters.MultipleChoiceFilter(
        choices=[(label, label) for label in SIZE_CLASS_LABELS],
        method="filter_size_class",
        help_text="GPU size classes: 1, 2-8, 9-64, 65-512, 513+ (repeat the parameter).",
    )
    array = IdFilter(field_name="array_id",
                     help_text="A job array's id: its tasks (GET /api/v1/arrays/<id>/ "
                               "counts them by state).")
    submitted_after = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcIsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    must_exist = {
        # an unknown user was an empty 200: `gpuq queue --user pretrain-r3` printed an
        # empty table and exited 0 (an operator's session, 2026-12-07)
        "owner": (get_user_model(), "username", "user named", "the owner column of GET "
                  "/api/v1/jobs/"),
    }

    class Meta:
        model = Job
        fields = ["tenant", "owner", "state", "size_class"]

    def filter_size_class(self, queryset: QuerySet[Job], name: str, value: list[str]) -> QuerySet:
        if not value:
            return queryset
        q = Q()
        for label in value:
            q |= size_class_q(label)
        return queryset.filter(q)
