"""How a job tells its agent about a checkpoint: one small JSON file in the inbox the agent
watches (``$SCHED_CHECKPOINT_INBOX``), which the agent forwards to the scheduler (time and
resume pointer) and then deletes.

From a shell or any language::

    python -m scheduler_app.agent.checkpoint --pointer s3://ckpt/run-7/step-1200

or write ``{"resume_pointer": "...", "checkpoint_at": "<ISO 8601>"}`` to a file named
``*.json`` in the inbox yourself, atomically (write a dot-file, then rename it). From
Python: :func:`report_checkpoint`. Write the checkpoint itself first: the pointer is
where the next run resumes from.

A job asked to stop (the agent's stop signal, SIGTERM by default) writes its checkpoint,
reports it, and exits with :data:`STOPPED_EXIT_CODE`; exit 0 means it finished its work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

#: sysexits' EX_TEMPFAIL ("try again later"): the exit of a job that stopped because it
#: was asked to, after its checkpoint. The agent reports any non-zero exit after a stop
#: request as preempted; this is the code that says so on purpose.
STOPPED_EXIT_CODE = 75

INBOX_ENV = "SCHED_CHECKPOINT_INBOX"


def report_checkpoint(
    pointer: str, *, at: datetime | None = None, inbox: str | os.PathLike | None = None
) -> Path:
    """Drop a checkpoint report in the agent's inbox; returns the file written."""
    if not pointer or len(pointer) > 512:
        raise ValueError("a resume pointer is 1 to 512 characters")
    where = inbox or os.environ.get(INBOX_ENV)
    folder = Path(where) if where else None
    if folder is None or not folder.is_dir():
        raise RuntimeError(f"no checkpoint inbox: ${INBOX_ENV} is not set to a directory "
                           "(is this running under the node agent?)")
    when = (at or datetime.now(UTC)).astimezone(UTC)
    # names sort in the order the reports were made: the agent forwards them in that order
    name = f"{time.time_ns():020d}-{os.getpid()}"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps({"resume_pointer": pointer,
                               "checkpoint_at": when.isoformat()}))
    final = folder / f"{name}.json"
    os.replace(tmp, final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler_app.agent.checkpoint",
        description="Tell the node agent that this job wrote a checkpoint.")
    parser.add_argument("--pointer", required=True,
                        help="where the next run resumes from (a path or URI)")
    parser.add_argument("--at", default=None,
                        help="when it was written (ISO 8601; default now)")
    parser.add_argument("--inbox", default=None, help=f"default ${INBOX_ENV}")
    args = parser.parse_args(argv)
    at = datetime.fromisoformat(args.at) if args.at else None
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    try:
        report_checkpoint(args.pointer, at=at, inbox=args.inbox)
    except (ValueError, RuntimeError) as error:
        print(f"checkpoint: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
