"""Input field bounds shared by the serializers: the storage types' ranges, plus the one
sanity bound on durations. Everything semantic (a job needs a GPU, the shape divides the
GPUs, it fits the cluster) is the services' rule, checked there."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, NoReturn

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from scheduler_app.services.jobs import BAD_DEPENDENCY, MAX_DURATION_S, unknown_kind_words

#: PostgreSQL integer / Django PositiveIntegerField.
INT_MAX = 2**31 - 1
#: Django PositiveSmallIntegerField.
SMALL_MAX = 2**15 - 1
#: The longest duration the API takes: the services' rule (a year), also in the schema.
MAX_SECONDS = MAX_DURATION_S


def seconds(*, minimum: int, required: bool = False, allow_null: bool = True,
            help_text: str = "", default: object = serializers.empty) -> serializers.IntegerField:
    kwargs: dict = {"help_text": help_text}
    if default is not serializers.empty:
        kwargs["default"] = default
    else:
        kwargs["required"] = required
    return StrictIntegerField(
        min_value=minimum,
        max_value=MAX_SECONDS,
        allow_null=allow_null,
        error_messages={
            "max_value": f"At most {MAX_SECONDS} seconds (366 days): durations are in seconds.",
            # the services' own words, for -5 as for 0
            "min_value": ("Must be a positive number of seconds, or empty." if minimum == 1
                          else "Must be zero or a positive number of seconds."
                          if minimum == 0 else "Must be at least {min_value} seconds."),
        },
        **kwargs,
    )


# DRF's fields coerce: "12" and 12.0 become 12, 1 and "yes" become True, 12 becomes
# "12". The schema promises JSON types, and a pipeline that sends "12" for a GPU count
# has a bug worth hearing about, so input fields take their own JSON type only.
class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: object) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be a string."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    default_error_messages = {"invalid": "Must be a string of letters, digits, - and _."}

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    """A choice given as a string, refused with the choices named: DRF's message
    ('"queued" is not a valid choice.') says what is wrong, not what is allowed."""

    default_error_messages = {"invalid_choice": '"{input}" is not one of: {allowed}.'}

    def to_internal_value(self, data: object) -> object:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)

    def fail(self, key: str, **kwargs: Any) -> NoReturn:
        if key == "invalid_choice":
            kwargs["allowed"] = ", ".join(str(c) for c in self.choices)
        super().fail(key, **kwargs)
        raise AssertionError("unreachable")  # (Field.fail raises)


class DependencyKindField(StrictChoiceField):
    """A dependency's ``when``, refused as the services refuse a bad dependency (code
    ``bad_dependency``, their words), as docs/api.md says: DRF's choice check answered
    first, 'invalid_choice', '"afterok" is not a valid choice.' (2026-12-07)."""

    def fail(self, key: str, **kwargs: Any) -> NoReturn:
        if key == "invalid_choice":
            raise serializers.ValidationError(unknown_kind_words(kwargs.get("input")),
                                              code=BAD_DEPENDENCY)
        super().fail(key, **kwargs)
        raise AssertionError("unreachable")  # (Field.fail raises)


class KnownFieldsOnly(serializers.Serializer):
    # Refuses a key that is none of its fields, naming it and the field it was probably
    # meant to be: ``{"max_runtime": 60}`` (for ``max_runtime_s``) made a job with no time
    # limit at all, where DRF drops unknown keys silently. Reported with the other errors
    # of the same object (code ``unknown_field``); in a list serializer, as
    # ``jobs[3].max_runtime``. (A comment, not a docstring: the schema describes a request
    # body by the first docstring up its classes, and seven bodies were described by this
    # one until 2026-12-07; it says ``additionalProperties: false`` instead, api.schema.)

    def to_internal_value(self, data: Any) -> Any:
        unknown = self.unknown_fields(data)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if unknown and isinstance(error.detail, dict):
                error.detail.update(unknown)
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def unknown_fields(self, data: Any) -> dict[str, list[ErrorDetail]]:
        if not isinstance(data, Mapping):
            return {}  # DRF's own "Invalid data. Expected a dictionary"
        known = [name for name, field in self.fields.items() if not field.read_only]
        return {key: [ErrorDetail(unknown_field_message(str(key), known), code="unknown_field")]
                for key in data if key not in known}


def unknown_field_message(key: str, known: list[str], what: str = "field") -> str:
    """"Unknown field 'max_runtime': did you mean max_runtime_s?" (or the fields there are);
    ``what``: "parameter" for a query string's."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"Unknown {what} {key!r}: did you mean {close[0]}?"
    return f"Unknown {what} {key!r}: the {what}s are {', '.join(sorted(known))}."
