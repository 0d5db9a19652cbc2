"""How large a request body may be: the largest body the input serializers accept.

A limit below that would refuse a valid request; one far above it lets a client make a
web process hold (and parse) a body no endpoint can use. So each limit is computed from
the serializer's own bounds, as the JSON a client writes plainly (``json.dumps``'s
separators, text as ASCII: an escaped or multi-byte character takes more bytes, and a
batch of a thousand 100,000-character commands in another script is refused as too
large: send it in two). ``scheduler_app.guard`` enforces them before the body is read.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

#: json.dumps's separators between items and between a key and its value
_ITEM, _KEY = len(", "), len(": ")


def largest_json(field: Any) -> int:
    """Bytes of the longest JSON value ``field`` accepts (a serializer: its object)."""
    if isinstance(field, serializers.ListSerializer):
        most = field.max_length
        if most is None:
            raise ValueError(f"{field!r}: a list without max_length has no largest body")
        item = largest_json(field.child)
        return 2 + most * item + (most - 1) * _ITEM
    if isinstance(field, serializers.Serializer):
        values = [(name, largest_json(f)) for name, f in field.fields.items()
                  if not f.read_only]
        inner = sum(len(name) + 2 + _KEY + size for name, size in values)
        return 2 + inner + max(len(values) - 1, 0) * _ITEM
    null = 4 if getattr(field, "allow_null", False) else 0
    if isinstance(field, serializers.BooleanField):
        return max(5, null)  # false
    if isinstance(field, serializers.IntegerField):
        bounds = [b for b in (field.min_value, field.max_value) if b is not None]
        if len(bounds) < 2:
            raise ValueError(f"{field!r}: an unbounded integer has no largest body")
        return max(max(len(str(b)) for b in bounds), null)
    if isinstance(field, serializers.ChoiceField):
        return max(max((len(str(c)) + 2 for c in field.choices), default=2), null)
    if isinstance(field, serializers.CharField):
        if field.max_length is None:
            raise ValueError(f"{field!r}: text without max_length has no largest body")
        return max(field.max_length + 2, null)  # the quotes
    raise ValueError(f"{field!r}: no largest body known for this field kind")


def body_limit(serializer_class: type[serializers.Serializer], *, slack: int = 64 * 1024) -> int:
    """The largest body ``serializer_class`` accepts, plus ``slack`` (whitespace, a
    client's own formatting), rounded up to a whole KiB."""
    size = largest_json(serializer_class()) + slack
    return -(-size // 1024) * 1024
