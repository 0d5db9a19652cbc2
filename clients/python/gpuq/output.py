"""Output formats of every listing: ``-o table|json|yaml|csv``.

- **table** (the default) is for people: columns sized to their contents and shrunk to
  the terminal's width (``$COLUMNS``, else the terminal, else 80), long cells cut with an
  ellipsis; its text may change between versions;
- **json**, **yaml** and **csv** are for scripts and stay stable: json and yaml give the
  API's own records (an array, or one object), with the fields the command adds
  (``queue_position`` in ``gpuq queue``), in the API's field names and values (ISO 8601
  UTC times, seconds, the states' names); csv gives the table's columns under
  snake_case headers, with raw values (nested values as JSON, null as empty).

YAML is written by :func:`to_yaml`, a small emitter of the JSON data model (mappings,
sequences, strings, numbers, booleans, null) in block style, so that the output is the
same whether or not PyYAML is installed:

- a string is written plain when it cannot be read as anything else: it starts with a
  letter, ``_`` or ``/``, holds only letters, digits, spaces and ``_ . / @ + = , ( ) -``,
  does not end with a space and is not one of YAML 1.1's special words (``yes``, ``no``,
  ``on``, ``off``, ``true``, ``null``, ``~`` ...); any other string is double-quoted with
  ``\\\\``, ``\\"``, ``\\n``, ``\\t`` and ``\\xNN``/``\\uNNNN`` escapes for control,
  line-separator and byte-order characters;
- empty mappings and sequences are ``{}`` and ``[]``; floats that are not finite are
  ``.inf``, ``-.inf`` and ``.nan``.

Any YAML 1.1 or 1.2 reader gives back the same data (the tests read it with PyYAML).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

FORMATS = ("table", "json", "yaml", "csv")
GAP = "  "


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True, slots=True)
class Column:
    """One column: ``header`` for the table, ``key`` for csv; ``raw`` gives the value a
    script gets, ``text`` the cell a person reads (default: ``raw`` as text)."""

    header: str
    key: str
    raw: Callable[[dict[str, Any]], Any]
    text: Callable[[dict[str, Any]], str] | None = None
    min_width: int = 0  # how narrow it may get; 0: never narrower than its contents
    right: bool = False  # numbers align right

    def cell(self, record: dict[str, Any]) -> str:
        if self.text is not None:
            return self.text(record)
        value = self.raw(record)
        return "" if value is None else str(value)


def field(header: str, key: str, *, min_width: int = 0, right: bool = False,
          text: Callable[[dict[str, Any]], str] | None = None) -> Column:
    """A column showing ``record[key]``."""
    return Column(header, key, lambda r: r.get(key), text, min_width, right)


def terminal_width() -> int:
    return max(20, shutil.get_terminal_size((80, 24)).columns)


def live_size(stream: TextIO) -> os.terminal_size:
    """The size of the terminal ``stream`` writes to, now (``--watch`` follows a resize).
    Where it reports 0 (``stty rows 0 cols 0``, some serial consoles and containers):
    ``$COLUMNS`` and ``$LINES``, else 80x24. ``--watch`` used the 0x0 as it was and drew
    only its clock, even with COLUMNS=100 set."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):
        size = os.terminal_size((0, 0))
    fallback = shutil.get_terminal_size((80, 24))  # $COLUMNS / $LINES first
    return os.terminal_size((max(20, size.columns or fallback.columns),
                             size.lines or fallback.lines))


def cell_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (East Asian wide characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def cut(text: str, width: int, ellipsis: str = "…") -> str:
    """``text`` cut to ``width`` terminal columns, ending in ``ellipsis`` when cut."""
    if cell_width(text) <= width:
        return text
    if width <= 0:
        return ""
    room = width - cell_width(ellipsis)
    out, used = [], 0
    for ch in text:
        w = cell_width(ch)
        if used + w > room:
            break
        out.append(ch)
        used += w
    return "".join(out) + ellipsis if room >= 0 else text[:width]


def wrap(text: str, width: int, *, initial_indent: str = "",
         subsequent_indent: str = "") -> list[str]:
    """``text``'s words in lines of at most ``width`` terminal columns (East Asian wide
    characters take two), a word longer than a line broken where it must. textwrap counts
    characters: a line of wide ones came out twice as wide, and :func:`cut` then dropped
    its end (a CJK job name lost words in gpuq why). No words: no lines."""
    lines: list[str] = []
    line, indent = initial_indent, initial_indent
    for word in text.split():
        sep = "" if line == indent else " "
        if cell_width(line + sep + word) <= width:
            line += sep + word
            continue
        if line != indent:
            lines.append(line)
            line = indent = subsequent_indent
        while cell_width(line + word) > width and word:
            room = max(1, width - cell_width(line))  # at least a character a line
            head = _fit(word, room)
            lines.append(line + head)
            word = word[len(head):]
            line = indent = subsequent_indent
        line += word
    if line != indent:
        lines.append(line)
    return lines


def _fit(word: str, width: int) -> str:
    """The longest start of ``word`` that takes at most ``width`` columns (at least its
    first character, so that a line narrower than one wide character still moves on)."""
    used = 0
    for i, ch in enumerate(word):
        used += cell_width(ch)
        if used > width:
            return word[:max(1, i)]
    return word


def pad(text: str, width: int, right: bool = False) -> str:
    room = " " * max(0, width - cell_width(text))
    return room + text if right else text + room


def fit_widths(natural: list[int], minimum: list[int], width: int) -> list[int]:
    """Column widths that fit ``width`` with the gaps: shrink the column with the most
    room above its minimum, one character at a time, so every column keeps as much as
    the others allow."""
    widths = list(natural)
    over = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while over > 0:
        room = [w - m for w, m in zip(widths, minimum, strict=True)]
        i = max(range(len(widths)), key=lambda k: room[k])
        if room[i] <= 0:
            break
        widths[i] -= 1
        over -= 1
    return widths


def table(records: Sequence[dict[str, Any]], columns: Sequence[Column], *,
          width: int | None = None, ellipsis: str = "…") -> list[str]:
    """The table's lines, header first, none wider than ``width``."""
    width = width or terminal_width()
    cells = [[c.cell(r).replace("\n", " ") for c in columns] for r in records]
    natural = [max([cell_width(c.header)] + [cell_width(row[i]) for row in cells])
               for i, c in enumerate(columns)]
    minimum = [min(n, max(c.min_width, cell_width(c.header))) if c.min_width else n
               for n, c in zip(natural, columns, strict=True)]
    widths = fit_widths(natural, minimum, width)
    lines = []
    for row in [[c.header for c in columns], *cells]:
        parts = [pad(cut(text, w, ellipsis), w, c.right)
                 for text, w, c in zip(row, widths, columns, strict=True)]
        # still too wide (a terminal narrower than every minimum): cut the line itself
        lines.append(cut(GAP.join(parts).rstrip(), width, ellipsis))
    return lines


def ellipsis_for(stream: TextIO) -> str:
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    return "…" if encoding.startswith("utf") else "~"


# ---------------------------------------------------------------------------- csv, json
def to_csv(records: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c.key for c in columns])
    for record in records:
        writer.writerow([_csv_value(c.raw(record)) for c in columns])
    return out.getvalue()


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------- yaml
_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_ ./@+=,()-]*$")
#: Words YAML 1.1 readers (PyYAML) turn into booleans or null.
_SPECIAL = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        # YAML 1.1 (PyYAML) reads 1e+16 as text: a float needs its dot, 1.0e+16
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    text = str(value)
    # fullmatch: "$" would also match before a final newline, and "A\n" is not plain
    if _PLAIN.fullmatch(text) and not text.endswith(" ") and text.lower() not in _SPECIAL:
        return text
    return '"' + "".join(_escape(ch) for ch in text) + '"'


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    code = ord(ch)
    # control characters, and what YAML would read as a line break or drop (NEL, the
    # line and paragraph separators, the byte-order mark)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    if code in (0x2028, 0x2029, 0xFEFF) or 0xD800 <= code <= 0xDFFF or code in (0xFFFE,
                                                                                 0xFFFF):
        return f"\\u{code:04x}"
    return ch


def to_yaml(data: Any) -> str:
    """``data`` (JSON's data model) as a YAML document in block style."""
    return "\n".join(_yaml_lines(data, 0)) + "\n"


def _yaml_lines(value: Any, indent: int) -> list[str]:
    space = " " * indent
    if isinstance(value, dict):
        if not value:
            return [space + "{}"]
        lines = []
        for key, item in value.items():
            head = f"{space}{yaml_scalar(str(key))}:"
            if isinstance(item, (dict, list)) and item:
                # a sequence under a key is indented too: the common style, and clear
                lines.append(head)
                lines.extend(_yaml_lines(item, indent + 2))
            else:
                lines.append(f"{head} {_yaml_inline(item)}")
        return lines
    if isinstance(value, list):
        if not value:
            return [space + "[]"]
        lines = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = _yaml_lines(item, indent + 2)
                # the item's first line goes on the dash's line
                lines.append(f"{space}- {inner[0][indent + 2:]}")
                lines.extend(inner[1:])
            else:
                lines.append(f"{space}- {_yaml_inline(item)}")
        return lines
    return [space + yaml_scalar(value)]


def _yaml_inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return yaml_scalar(value)


# ---------------------------------------------------------------------------- one call
def render(fmt: str, data: Any, records: Sequence[dict[str, Any]], columns: Sequence[Column],
           *, stream: TextIO) -> str:
    """The text of a listing in ``fmt``: ``data`` is what json and yaml give (the API's
    records), ``records`` and ``columns`` what the table and csv show."""
    if fmt == "json":
        return to_json(data)
    if fmt == "yaml":
        return to_yaml(data)
    if fmt == "csv":
        return to_csv(records, columns)
    lines = table(records, columns, ellipsis=ellipsis_for(stream))
    return "\n".join(lines) + "\n"
