"""``gpuq submit -f FILE``: a job (or a batch) written in a file.

Two forms are read with the standard library alone:

- **JSON**: an object (one job), or an array of objects, or ``{"tenant": ..., "jobs":
  [...]}`` (a batch, all or nothing);
- **a flat YAML subset**, one job: ``key: value`` lines, ``#`` comments, blank lines, an
  optional ``---`` first. A value is plain text (``gpus: 8``, ``time: 2h``), a
  double-quoted string with JSON's escapes, a single-quoted string (``''`` is a quote),
  ``null`` or ``~``, or a block ``|`` (or ``|-``) whose more-indented lines that follow
  are the text, for a multi-line command. Nesting, lists and anchors are not part of it.

What is not in the subset is read by PyYAML's ``safe_load`` when PyYAML is installed,
and refused, naming the line, when it is not. The values are text here; the job's fields
(``fields.FIELDS``) give them their types, so ``gpus: "8"`` and ``gpus: 8`` mean the same.

A key given twice in one mapping (``gpus: 8`` then ``gpus: 1``), in either form, is
refused naming the key and its second line, as the API refuses a JSON body that names a
key twice: JSON's and PyYAML's readers keep the last value without a word.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*))?$")


class JobFileError(ValueError):
    """The file cannot be read as a job: the message names the line."""


class DuplicateKeyError(JobFileError):
    """A mapping names a key twice: refused whatever reads the file (no fallback)."""

    def __init__(self, name: str, line: int, key: str) -> None:
        super().__init__(f"{name}:{line}: {key!r} is given twice: give each key once")


def load(path: str | Path) -> dict[str, Any] | list[dict[str, Any]]:
    """A job (a mapping) or a batch (a list of mappings, or a mapping with ``jobs``)."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise JobFileError(f"cannot read {path}: {error}") from error
    return loads(text, name=str(path))


def loads(text: str, name: str = "<job file>") -> dict[str, Any] | list[dict[str, Any]]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except ValueError as error:
            raise JobFileError(f"{name}: not valid JSON: {error}") from error
        _refuse_json_duplicates(text, name)
    else:
        try:
            data = parse_flat_yaml(text, name)
        except DuplicateKeyError:
            raise
        except JobFileError as error:
            data = _pyyaml(text, name, error)
    if isinstance(data, list):
        if not all(isinstance(item, dict) for item in data):
            raise JobFileError(f"{name}: a batch is a list of job mappings")
        return data
    if not isinstance(data, dict):
        raise JobFileError(f"{name}: a job file holds a mapping of fields (key: value)")
    return data


def _refuse_json_duplicates(text: str, name: str) -> None:
    """``DuplicateKeyError`` for the first key an object of the (valid) JSON ``text``
    names twice. Only a string followed by ``:`` inside an object is a key."""
    scopes: list[set[str] | None] = []  # the keys of each open object (None: an array)
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            value, end = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            after = end
            while after < len(text) and text[after] in " \t\r\n":
                after += 1
            keys = scopes[-1] if scopes else None
            if keys is not None and after < len(text) and text[after] == ":":
                if value in keys:
                    raise DuplicateKeyError(name, text.count("\n", 0, i) + 1, value)
                keys.add(value)
            i = end
            continue
        if ch == "{":
            scopes.append(set())
        elif ch == "[":
            scopes.append(None)
        elif ch in "]}" and scopes:
            scopes.pop()
        i += 1


def _pyyaml(text: str, name: str, subset_error: JobFileError) -> Any:
    """PyYAML's reading of what the subset does not cover, if PyYAML is installed;
    without it, the subset's own error (it names the line). A mapping that names a key
    twice is refused (PyYAML keeps the last)."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise subset_error from None

    class UniqueKeys(yaml.SafeLoader):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _value in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, str | int | float | bool) or key is None:
                    if key in seen:
                        raise DuplicateKeyError(name, key_node.start_mark.line + 1, str(key))
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=UniqueKeys)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as error:
        raise JobFileError(f"{name}: not valid YAML: {error}") from error


def parse_flat_yaml(text: str, name: str = "<job file>") -> dict[str, Any]:
    """The flat subset described above: ``{key: text or None}``."""
    out: dict[str, Any] = {}
    lines = text.splitlines()
    i = 0
    if lines and lines[0].strip() == "---":
        i = 1
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t":
            raise JobFileError(f"{name}:{i}: indented line outside a | block: only flat "
                               "'key: value' lines are read without PyYAML")
        found = _KEY.match(line.rstrip())
        if not found:
            raise JobFileError(f"{name}:{i}: expected 'key: value', got {line.strip()!r}")
        key, value = found.group(1), (found.group(2) or "").strip()
        if key in out:
            raise DuplicateKeyError(name, i, key)
        if value in ("|", "|-"):
            block, i = _block(lines, i)
            out[key] = block + ("\n" if value == "|" and block else "")
            continue
        out[key] = _scalar(value, name, i)
    return out


def _block(lines: list[str], i: int) -> tuple[str, int]:
    """The lines of a ``|`` block from line ``i``: every following line more indented
    than the key (or blank), less the first line's indentation."""
    body: list[str] = []
    indent: int | None = None
    while i < len(lines):
        line = lines[i]
        if line.strip() and not line[0].isspace():
            break
        if line.strip():
            here = len(line) - len(line.lstrip())
            indent = here if indent is None else indent
            body.append(line[min(indent, here):])
        else:
            body.append("")
        i += 1
    while body and not body[-1]:
        body.pop()
    return "\n".join(body), i


def _scalar(value: str, name: str, line: int) -> str | None:
    if value.startswith('"'):
        end = _closing_double_quote(value)
        if end < 0 or _rest(value[end + 1:]):
            raise JobFileError(f"{name}:{line}: unterminated or trailing text after \"...\"")
        try:
            return json.loads(value[: end + 1])
        except ValueError as error:
            raise JobFileError(f"{name}:{line}: bad escape in a quoted string: "
                               f"{error}") from error
    if value.startswith("'"):
        found = re.match(r"^'((?:[^']|'')*)'(.*)$", value)
        if not found or _rest(found.group(2)):
            raise JobFileError(f"{name}:{line}: unterminated or trailing text after '...'")
        return found.group(1).replace("''", "'")
    plain = re.split(r"\s+#", value, maxsplit=1)[0].strip()
    if plain.startswith(("[", "{", "&", "*", "!", "|", ">", "%", "@", "`")):
        raise JobFileError(f"{name}:{line}: {plain!r} is beyond the flat subset read "
                           "without PyYAML (quote it, or write the file as JSON)")
    return None if plain in ("", "~", "null", "Null", "NULL") else plain


def _closing_double_quote(value: str) -> int:
    escaped = False
    for i, ch in enumerate(value[1:], start=1):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            return i
    return -1


def _rest(text: str) -> bool:
    """True when ``text`` (after a closing quote) is more than spaces and a comment."""
    rest = text.strip()
    return bool(rest) and not rest.startswith("#")
