"""A demo training job: counts steps, checkpoints every N seconds and when asked to stop,
resumes from ``RESUME_POINTER``.

    python -m scheduler_app.agent.demo_job --steps 600 --step-seconds 0.5 --checkpoint-every 10

It is what a well-behaved job does under the node agent (docs/agent-protocol.md):

- reads ``CUDA_VISIBLE_DEVICES``, ``JOB_ID``, ``CHECKPOINT_DIR`` and ``RESUME_POINTER``
  (empty on a first start) from its environment;
- writes each checkpoint to ``$CHECKPOINT_DIR/step-<n>.json``, then reports it to the
  agent (``checkpoint.report_checkpoint``) with that path as the resume pointer (with
  ``--from-command``, the demo cluster's ``demo://job-<id>/t=<seconds of work>``, which
  its simulated agents understand too);
- on the stop signal (SIGTERM by default) writes a checkpoint at once, reports it and
  exits with ``STOPPED_EXIT_CODE`` (75); ``--ignore-sigterm`` plays a job that does not
  (the agent kills it at the end of its grace window);
- resumes at the step after the one its pointer names: the step counter continues.

``--from-command`` takes the run length from ``--demo-seconds N`` in the job's command
(``$SCHED_JOB_COMMAND``), as the demo cluster's jobs carry it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

from .checkpoint import STOPPED_EXIT_CODE, report_checkpoint

_STEP = re.compile(r"step-(\d+)")
_WORK_SECONDS = re.compile(r"/t=(\d+)$")  # the demo cluster's pointers: demo://job-7/t=340
_DEMO_SECONDS = re.compile(r"--demo-seconds[ =](\d+)")

stop_asked = False


def _on_stop(signum: int, _frame: object) -> None:
    global stop_asked
    stop_asked = True


def resume_step(pointer: str, step_seconds: float = 1.0) -> int:
    """The last step the checkpoint at ``pointer`` holds (0: start from scratch): the
    file when it is here, else the step its name says (another node's local path), else
    the seconds of work of a demo cluster's pointer (``.../t=<seconds>``)."""
    if not pointer:
        return 0
    try:
        return int(json.loads(Path(pointer).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _STEP.search(pointer)
    if found:
        return int(found.group(1))
    found = _WORK_SECONDS.search(pointer)
    return int(int(found.group(1)) / step_seconds) if found else 0


def checkpoint(step: int, folder: Path, *, demo_pointer: float | None = None) -> str:
    """Write the checkpoint, report it, return its resume pointer: the file's path, or
    with ``demo_pointer`` (seconds of work done) the demo cluster's form
    ``demo://job-<id>/t=<seconds>``, which its simulated agents read too."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step-{step:08d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "at": time.time()}))
    os.replace(tmp, path)
    pointer = str(path)
    if demo_pointer is not None:
        pointer = f"demo://job-{os.environ.get('JOB_ID', '0')}/t={int(demo_pointer)}"
    try:
        report_checkpoint(pointer)
    except RuntimeError as error:  # run by hand, outside an agent
        print(f"(not reported: {error})", flush=True)
    return pointer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler_app.agent.demo_job",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=0,
                        help="total steps of the training (0: until stopped)")
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument("--checkpoint-every", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--ignore-sigterm", action="store_true",
                        help="ignore the stop signal (a job that cannot checkpoint on demand)")
    parser.add_argument("--fail-at-step", type=int, default=0,
                        help="crash (exit 1) when reaching this step")
    parser.add_argument("--from-command", action="store_true",
                        help="the run length from --demo-seconds N in $SCHED_JOB_COMMAND")
    parser.add_argument("--default-seconds", type=float, default=300.0,
                        help="with --from-command, when the command names no length")
    args = parser.parse_args(argv)
    if args.from_command:
        found = _DEMO_SECONDS.search(os.environ.get("SCHED_JOB_COMMAND", ""))
        seconds = float(found.group(1)) if found else args.default_seconds
        args.steps = max(1, int(seconds / args.step_seconds))

    job = os.environ.get("JOB_ID", "?")
    folder = Path(os.environ.get("CHECKPOINT_DIR") or "checkpoints")
    pointer = os.environ.get("RESUME_POINTER", "")
    step = resume_step(pointer, args.step_seconds)

    def save(at: int) -> str:
        return checkpoint(at, folder, demo_pointer=at * args.step_seconds
                          if args.from_command else None)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, _on_stop)
    print(f"demo job {job}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
          f" node={os.environ.get('SCHED_NODE', '')} pid={os.getpid()}", flush=True)
    if step:
        print(f"resuming from step {step} ({pointer})", flush=True)
    else:
        print("starting from step 0", flush=True)

    last_checkpoint = time.monotonic()
    ignored = False
    while args.steps == 0 or step < args.steps:
        if stop_asked:
            if args.ignore_sigterm:
                if not ignored:
                    print(f"stop signal at step {step}: ignored", flush=True)
                    ignored = True
            else:
                path = save(step)
                print(f"stop signal: checkpoint at step {step} ({path}); exiting "
                      f"{STOPPED_EXIT_CODE}", flush=True)
                return STOPPED_EXIT_CODE
        # sleep in slices so a stop signal is answered within a tenth of a second
        until = time.monotonic() + args.step_seconds
        while not (stop_asked and not args.ignore_sigterm) and time.monotonic() < until:
            time.sleep(min(0.05, max(0.0, until - time.monotonic())))
        if stop_asked and not args.ignore_sigterm:
            continue  # the step was cut short: checkpoint the last complete one
        step += 1
        print(f"step {step}", flush=True)
        if args.fail_at_step and step >= args.fail_at_step:
            print(f"failing at step {step}", file=sys.stderr, flush=True)
            return 1
        if time.monotonic() - last_checkpoint >= args.checkpoint_every:
            path = save(step)
            print(f"checkpoint at step {step} ({path})", flush=True)
            last_checkpoint = time.monotonic()
    path = save(step)
    print(f"done: {step} steps ({path})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
