"""The node agent: runs on each GPU node, turns the scheduler's assignments into
processes, delivers preemption as a signal, forwards checkpoints and exits.

Standalone on purpose: this package imports only the standard library (HTTP through
urllib), never Django, so a node needs Python and this directory (with
``scheduler_app/__init__.py``) and nothing else::

    python -m scheduler_app.agent --node pod-a-n01 --api http://sched:8000 --token-file T

``manage.py node_agent`` is the same thing for hosts that have the whole project.
The protocol, for people writing their own agent (Kubernetes, Slurm):
docs/agent-protocol.md. Modules: ``daemon`` (the loop), ``client`` (the HTTP API),
``procs`` and ``runner`` (job processes), ``state`` (what survives a restart),
``checkpoint`` (the job's side: report a checkpoint), ``demo_job`` (a demo training job),
``cli`` (the command line).
"""
