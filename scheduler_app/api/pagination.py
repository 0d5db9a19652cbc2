"""Pagination: cursors, so a pipeline polling thousands of jobs never skips or repeats a
row when new ones arrive between pages (offsets would)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import BasePagination, Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param


class IdCursorPagination(CursorPagination):
    """Newest first, by id. ``?page_size=`` (1 to 1,000, default 100)."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request: Request) -> int:
        # DRF falls back to the default on a bad value; a client should hear about it
        return _int_param(request, self.page_size_query_param, default=self.page_size,
                          low=1, high=self.max_page_size)

    def get_schema_operation_parameters(self, view: Any) -> list[dict]:
        params = super().get_schema_operation_parameters(view)
        for param in params:
            if param["name"] == self.page_size_query_param:
                param["schema"] = {"type": "integer", "minimum": 1,
                                   "maximum": self.max_page_size}
                param["description"] = f"Rows per page, 1 to {self.max_page_size} " \
                                       f"(default {self.page_size})."
        return params

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound as error:
            raise ValidationError({self.cursor_query_param: [
                "Not a cursor this API made: follow the 'next' and 'previous' links."
            ]}) from error
        if cursor is not None and cursor.position is not None:
            try:
                int(cursor.position)
            except ValueError as error:
                raise ValidationError({self.cursor_query_param: [
                    "Not a cursor this API made: follow the 'next' and 'previous' links."
                ]}) from error
        return cursor


class SeqPagination(BasePagination):
    """The transitions feed: ``?after=<seq>`` (exclusive) and ``?limit=`` (1 to 1,000).

    The cursor is the sequence number itself, so a consumer stores one integer and resumes
    from it after a restart. Seq order is commit order (appends are serialised), so a
    reader that resumes after the last seq it saw never skips a row.
    """

    default_limit = 100
    max_limit = 1000

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list:
        self.request = request
        after = _int_param(request, "after", default=0, low=0, high=2**62)
        self.limit = _int_param(request, "limit", default=self.default_limit, low=1,
                                high=self.max_limit)
        self.rows = list(queryset.filter(pk__gt=after).order_by("pk")[: self.limit])
        self.after = after
        return self.rows

    def next_after(self) -> int:
        return self.rows[-1].pk if self.rows else self.after

    def get_paginated_response(self, data: Any) -> Response:
        url = self.request.build_absolute_uri()
        return Response({
            "next_after": self.next_after(),
            "next": replace_query_param(url, "after", self.next_after()),
            "results": data,
        })

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return {
            "type": "object",
            "required": ["next_after", "next", "results"],
            "properties": {
                "next_after": {"type": "integer", "description":
                               "The seq to pass as ?after= for the rows that follow."},
                "next": {"type": "string", "format": "uri"},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict]:
        return [
            {"name": "after", "in": "query", "required": False,
             "description": "Return rows with a seq greater than this (default 0).",
             "schema": {"type": "integer", "minimum": 0}},
            {"name": "limit", "in": "query", "required": False,
             "description": "At most this many rows (1 to 1,000, default 100).",
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
        ]


def _int_param(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ValidationError({name: [f"Must be an integer from {low} to {high}."]})
    return value
