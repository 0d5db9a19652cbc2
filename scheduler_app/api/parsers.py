"""The one request body format: JSON, as valid Unicode."""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json


class StrictJSONParser(JSONParser):
    """JSON whose strings are valid Unicode. JSON may escape a lone surrogate
    ("\\ud800"); Python decodes it, and the database then fails to store it. Refuse it
    here with a 400 rather than a 500 there.

    The body is decoded and parsed in one go (what ``JSONParser`` does through a stream
    reader). A UTF-8 body is checked for surrogates only if it has a ``\\u`` escape:
    strict UTF-8 decoding refuses a surrogate written as bytes, so an escape is the only
    way in (a body in another charset is always checked).
    """

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict | None = None) -> Any:
        encoding = get_encoding(parser_context or {})
        try:
            text = stream.read().decode(encoding)
            data = json.loads(text, parse_constant=json.strict_constant if self.strict
                              else None)
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
            raise ParseError(f"JSON parse error - {exc}") from exc
        if "\\u" in text or codecs.lookup(encoding).name != "utf-8":
            try:
                json.dumps(data, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as error:
                raise ParseError("JSON strings must be valid Unicode: no lone surrogates "
                                 "(\\ud800-\\udfff).") from error
        return data
