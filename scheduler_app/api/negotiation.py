"""Content negotiation with a fast path for what API clients send.

DRF's negotiation parses the Accept header into media types and matches each against
each renderer, for every request. Nearly every API request accepts JSON plainly (no
Accept header, ``*/*`` or ``application/json``) and the API's views render JSON first:
then the answer is known without parsing, and it is the one DRF would give. Anything
else (another Accept, a ``?format=``, a view whose first renderer is not JSON, such as
the schema's) goes to DRF's own negotiation.
"""

from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request

JSON = "application/json"
#: Accept headers that DRF resolves to the first renderer, as "application/json", when
#: that renderer's media type is exactly application/json.
PLAIN_JSON_ACCEPTS = frozenset({"", "*/*", JSON})


class FastContentNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request: Request, renderers: list[Any],
                        format_suffix: str | None = None) -> tuple[Any, str]:
        if (
            not format_suffix
            and renderers
            and renderers[0].media_type == JSON
            and request.META.get("HTTP_ACCEPT", "").strip() in PLAIN_JSON_ACCEPTS
            and self.settings.URL_FORMAT_OVERRIDE not in request.query_params
        ):
            return renderers[0], JSON
        return super().select_renderer(request, renderers, format_suffix)
