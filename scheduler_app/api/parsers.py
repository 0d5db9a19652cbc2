"""The one request body format: JSON, as valid Unicode."""

from __future__ import annotations

import json
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class StrictJSONParser(JSONParser):
    """JSON whose strings are valid Unicode. JSON may escape a lone surrogate
    ("\\ud800"); Python decodes it, and the database then fails to store it. Refuse it
    here with a 400 rather than a 500 there."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: dict | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise ParseError("JSON strings must be valid Unicode: no lone surrogates "
                             "(\\ud800-\\udfff).") from error
        return data
