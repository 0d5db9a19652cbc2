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

from scheduler_app.core.types import join_words
from scheduler_app.models import Job

#: "may the viewer see a job of this tenant, owned by this user?" (tenant id, owner id)
Sees = Callable[[int, int | None], bool]

#: Job ids in the core's sentences: after these words ("when 42 reaches", "when 42 and 7
#: reach", "to start 42 (", "evicted 17, 18 and 19,", "kept 20:", "next best: 21 and 22",
#: "job 6: protected") but not "when 42 and 3 other jobs" (a count) nor the "0" of
#: "0.7 GPU-hours" nor the "2" of "2 jobs of team X" (a count the redaction writes: the
#: dashboard made it "next best: job #2 jobs of team X", a real job's number, until
#: 2026-12-07); and a weighed candidate's "17: ..." at the start of its sentence.
_ID = r"\d+(?![\d.])(?! jobs\b)"
JOB_ID_LISTS = re.compile(rf"\b(when|start|evicted|killed|kept|best:|job) ({_ID}(?:, {_ID})*"
                          rf"(?: and {_ID}(?! other))?)")
_LEADING = re.compile(r"^(\d+)(?=: )")
JOB_ID = re.compile(_ID)

#: Detail keys whose value is a job id or a list of them, at any depth (``for``,
#: ``around``, ``reclaimed_from``, a claim's ``victims``, a backfill's ``entitled_past``,
#: ``uses_none_of`` and the ``job`` of each of its ``ends_before``, ``quota_of``).
_ID_KEYS = frozenset({"for", "around", "entitled_past", "reclaimed_from", "victims",
                      "uses_none_of", "job"})
#: Detail keys whose value is a core sentence (or a list of them).
_TEXT_KEYS = frozenset({"why", "words", "weighed"})


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
            word, ids = m.group(1), m.group(2)
            names = [str(self._say(n)) for n in JOB_ID.findall(ids)]
            if len(set(names)) < len(names):
                # "a job of team infra and a job of team infra" read as a slip: "2 jobs
                # of team infra" (a pipeline author's session, 2026-12-07)
                return f"{word} {join_words(_counted(names))}"
            said = JOB_ID.sub(lambda n: str(self._say(n.group(0))), ids)
            if word == "job" and said != ids and JOB_ID.fullmatch(ids):
                return said  # "job 17" -> "a job of team X", not "job a job of ..."
            return f"{word} {said}"

        text = JOB_ID_LISTS.sub(rewrite_list, text)
        return _LEADING.sub(lambda m: str(self._say(m.group(1))), text)

    def detail(self, detail: dict[str, Any] | None) -> dict[str, Any]:
        """A copy of a row's detail with the hidden ids and sentences rewritten."""
        if not detail:
            return detail or {}
        return self._value(detail, key=None)

    def _value(self, value: Any, *, key: str | None) -> Any:
        if isinstance(value, dict):
            return {k: self._value(v, key=k) for k, v in value.items()}
        if isinstance(value, list):
            return [self._value(v, key=key) for v in value]
        if key in _ID_KEYS:
            return self._say(value)
        if key in _TEXT_KEYS and isinstance(value, str):
            return self.text(value)
        return value

    def _hidden(self, pk: int | None) -> str | None:
        if pk is None or self.sees is None:
            return None
        return self._named.get(pk, "a job")  # never learnt: say nothing of it

    def _say(self, value: Any) -> Any:
        pk = _as_id(value)
        hidden = self._hidden(pk)
        return value if hidden is None else hidden


def _counted(names: list[str]) -> list[str]:
    """The names in first-seen order, each hidden one once with its count ("2 jobs of team
    X"); a visible id appears once in a list anyway."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return [name if n == 1 else f"{n} jobs{name[len('a job'):]}" if name.startswith("a job")
            else name for name, n in counts.items()]


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


def _ids_in_detail(value: Any, key: str | None = None) -> set[int]:
    if isinstance(value, dict):
        return {pk for k, v in value.items() for pk in _ids_in_detail(v, k)}
    if isinstance(value, list):
        return {pk for v in value for pk in _ids_in_detail(v, key)}
    if key in _ID_KEYS:
        pk = _as_id(value)
        return set() if pk is None else {pk}
    if key in _TEXT_KEYS and isinstance(value, str):
        return _ids_in_text(value)
    return set()


__all__ = ["JOB_ID", "JOB_ID_LISTS", "OtherJobs", "Sees"]
