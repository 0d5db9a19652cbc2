"""What the log says about other jobs, as a viewer may read it: a job they may not see is
"a job of team X", never its id.

The core explains its decisions with job ids: a reservation's basis ("when 42 reaches its
declared limit"), a preemption's plan ("to start 42 (16 GPUs) ...: evicted 17 and 18"),
the candidates it weighed ("kept 19: ..."), and the rows' details name jobs by id
(``for``, ``around``, ``reclaimed_from``, a claim's ``victims``). Shown as they are, they
told a researcher the ids of other teams' jobs, and with each id, through the API, its
team. Here every id of a job the viewer may not see becomes "a job of team <name>", as
the dashboard writes a job it may not show; the jobs the viewer sees keep their ids.

Used by the API (job detail, reservations, the transitions feed) and the dashboard (the
job page, the reservations, the feed). One query for all the ids of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from scheduler_app.models import Job

#: "may the viewer see a job of this tenant, owned by this user?" (tenant id, owner id)
Sees = Callable[[int, int | None], bool]

#: Job ids in the core's sentences: after these words ("when 42 reaches", "when 42 and 7
#: reach", "to start 42 (", "evicted 17, 18 and 19,", "kept 20:", "next best: 21 and 22")
#: but not "when 42 and 3 other jobs" (a count); and a weighed candidate's "17: ..." at
#: the start of its sentence.
_ID = r"\d+(?![\d.])"  # not the "0" of "0.7 GPU-h"
JOB_ID_LISTS = re.compile(rf"\b(when|start|evicted|killed|kept|best:) ({_ID}(?:, {_ID})*"
                    rf"(?: and {_ID}(?! other))?)")
_LEADING = re.compile(r"^(\d+)(?=: )")
JOB_ID = re.compile(_ID)

#: Detail keys whose value is a job id, and those whose value is a list of them.
_ID_KEYS = ("for", "around", "entitled_past")
_ID_LIST_KEYS = ("reclaimed_from", "victims")
#: Detail keys whose value is a core sentence (or a list of them).
_TEXT_KEYS = ("why", "words", "weighed")


class OtherJobs:
    """Rewrites job ids a viewer may not see. ``learn`` what an answer will show first
    (one query), then ``text``, ``detail`` and ``job_id`` rewrite it."""

    def __init__(self, sees: Sees | None) -> None:
        self.sees = sees  # None: the viewer sees every job (an operator): nothing to hide
        self._named: dict[int, str | None] = {}  # job id -> None (visible) or its words

    def learn(self, *, texts: Iterable[str] = (), details: Iterable[dict[str, Any]] = ()
              ) -> OtherJobs:
        if self.sees is None:
            return self
        ids: set[int] = set()
        for text in texts:
            ids.update(_ids_in_text(text))
        for detail in details:
            ids.update(_ids_in_detail(detail))
        ids -= self._named.keys()
        if ids:
            found = {pk: (tenant_id, owner_id, tenant) for pk, tenant_id, owner_id, tenant in
                     Job.objects.filter(pk__in=ids).values_list(
                         "pk", "tenant_id", "owner_id", "tenant__name")}
            for pk in ids:
                if pk not in found:
                    self._named[pk] = "a job"  # (gone: named by nobody)
                    continue
                tenant_id, owner_id, tenant = found[pk]
                self._named[pk] = None if self.sees(tenant_id, owner_id) else \
                    f"a job of team {tenant}"
        return self

    def job_id(self, value: Any) -> int | None:
        """The id, if the viewer may see that job; else None."""
        pk = _as_id(value)
        if pk is None:
            return None
        return pk if self._hidden(pk) is None else None

    def text(self, text: str) -> str:
        if not text:
            return text

        def rewrite_list(m: re.Match[str]) -> str:
            return f"{m.group(1)} " + JOB_ID.sub(lambda n: self._say(n.group(0)), m.group(2))

        text = JOB_ID_LISTS.sub(rewrite_list, text)
        return _LEADING.sub(lambda m: self._say(m.group(1)), text)

    def detail(self, detail: dict[str, Any] | None) -> dict[str, Any]:
        """A copy of a row's detail with the hidden ids and sentences rewritten."""
        if not detail:
            return detail or {}
        out = dict(detail)
        for key in _ID_KEYS:
            if key in out and self._hidden(_as_id(out[key])) is not None:
                out[key] = self._hidden(_as_id(out[key]))
        for key in _ID_LIST_KEYS:
            if isinstance(out.get(key), list):
                out[key] = [self._say(v) for v in out[key]]
        for key in _TEXT_KEYS:
            value = out.get(key)
            if isinstance(value, str):
                out[key] = self.text(value)
            elif isinstance(value, list):
                out[key] = [self.text(v) if isinstance(v, str) else v for v in value]
        if isinstance(out.get("claim"), dict):
            out["claim"] = self.detail(out["claim"])
        return out

    def _hidden(self, pk: int | None) -> str | None:
        if pk is None or self.sees is None:
            return None
        return self._named.get(pk, "a job")  # never learnt: say nothing of it

    def _say(self, value: Any) -> Any:
        pk = _as_id(value)
        hidden = self._hidden(pk)
        return value if hidden is None else hidden


def _as_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


def _ids_in_text(text: str) -> set[int]:
    if not text:
        return set()
    ids = {int(n) for m in JOB_ID_LISTS.finditer(text) for n in JOB_ID.findall(m.group(2))}
    ids.update(int(m.group(1)) for m in _LEADING.finditer(text))
    return ids


def _ids_in_detail(detail: dict[str, Any] | None) -> set[int]:
    if not detail:
        return set()
    ids = {pk for key in _ID_KEYS if (pk := _as_id(detail.get(key))) is not None}
    for key in _ID_LIST_KEYS:
        if isinstance(detail.get(key), list):
            ids.update(pk for v in detail[key] if (pk := _as_id(v)) is not None)
    for key in _TEXT_KEYS:
        value = detail.get(key)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                ids.update(_ids_in_text(text))
    if isinstance(detail.get("claim"), dict):
        ids.update(_ids_in_detail(detail["claim"]))
    return ids


__all__ = ["JOB_ID", "JOB_ID_LISTS", "OtherJobs", "Sees"]
