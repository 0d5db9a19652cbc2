"""Refuse malformed requests before any view or the database sees them, in the site's
error shapes: the API's JSON (``{"errors": [{"field", "code", "message"}]}``), the
dashboard's 400 page.

- **Body size**, from ``Content-Length``, before the body is read: each route's limit
  is the largest body its input accepts (``api.limits``): a batch of 1,000 jobs with
  the longest command fits (about 96 MiB), any other API request gets 1 MiB (the
  largest single submit, every character of its command escaped, is 0.6 MiB), pages and
  forms Django's usual 2.5 MiB. Over it: 413, ``request_too_large``. Django's own
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (settings) is only the backstop above them all: it
  answered an oversized body with an HTML 400 page, the API's clients included.
- **NUL characters in the query string** (``?tenant=a%00b``): PostgreSQL refuses them
  in text, so a look-up by that value was a 500 (a DataError) wherever a view filtered
  by it unchecked (the API's ``?tenant=``, the dashboard's ``/jobs/?team=``). 400,
  ``null_characters_not_allowed`` (DRF's code for the same refusal in a filter), naming
  the parameter.

And after the view: a request that failed because the database was locked (SQLite's
"database is locked": a bulk submit held the one write lock past the busy timeout) is
503 with ``Retry-After``, in the same shapes, not a 500 (the API's views answer it in
their exception handler, ``api.errors``; this covers the pages and anything else).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.template.loader import render_to_string

from .api.errors import BUSY_RETRY_AFTER_S, busy_errors, database_busy, json_error

#: Paths whose errors are the API's JSON (/api/v1/, the schema).
API_PATHS = "/api/"
#: The batch endpoint: its own, larger limit.
BATCH_PATH = "/api/v1/jobs/batch/"
#: Every other API request.
API_BODY_LIMIT = 1024 * 1024
#: Pages and forms (Django's default DATA_UPLOAD_MAX_MEMORY_SIZE).
PAGE_BODY_LIMIT = 2_621_440


@cache
def batch_body_limit() -> int:
    from .api.jobs import BatchIn
    from .api.limits import body_limit

    return body_limit(BatchIn)


def body_limit_for(path: str) -> int:
    if path == BATCH_PATH:
        return batch_body_limit()
    return API_BODY_LIMIT if path.startswith(API_PATHS) else PAGE_BODY_LIMIT


class RequestGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        refusal = self.refusal(request)
        if refusal is not None:
            return refusal
        return self.get_response(request)

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> HttpResponseBase | None:
        if not database_busy(exception):
            return None
        error = busy_errors()[0]
        try:
            response = refuse(request, 503, None, error["code"], error["message"])
        except Exception:  # the page itself needed the database: say it in plain text
            response = HttpResponse(error["message"], status=503,
                                    content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(BUSY_RETRY_AFTER_S)
        return response

    def refusal(self, request: HttpRequest) -> HttpResponseBase | None:
        path = request.path_info
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # Django reads no body then
        limit = body_limit_for(path)
        if length > limit:
            return refuse(request, 413, None, "request_too_large",
                          f"The request body is {length:,} bytes; this endpoint takes at "
                          f"most {limit:,}." + (" Split the batch." if path == BATCH_PATH
                                                 else ""))
        query = request.META.get("QUERY_STRING", "")
        if "%00" in query or "\x00" in query:  # (the only ways to write a NUL there)
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in v for v in values):
                    return refuse(request, 400, name.replace("\x00", "") or None,
                                  "null_characters_not_allowed",
                                  "Null characters are not allowed.")
        return None


def refuse(request: HttpRequest, status: int, field: str | None, code: str,
           message: str) -> HttpResponse:
    """The refusal in the shape the caller reads: JSON under /api/, else the 400 page."""
    if request.path_info.startswith(API_PATHS):
        return json_error(status, [{"field": field, "code": code, "message": message}])
    html = render_to_string("400.html", {"message": message, "status": status}, request)
    return HttpResponse(html, status=status)
