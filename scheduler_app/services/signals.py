"""Signals the services send after commit (never before: a rolled-back change sends nothing).

``transition_committed(sender=Transition, transition=<Transition>)`` fires once per
committed transition; ``services.early_tick`` listens to it.

``early_tick_wanted(sender=None)`` fires when committed rows ask for an early tick
(``services.early_tick``, at most once per commit). The services never reach the broker
themselves: ``SchedulerAppConfig.ready`` connects ``tasks.on_early_tick_wanted``, so the
services import nothing of the Celery edge (no import cycle services -> tasks -> leader
-> services), and a process without the app ready simply asks nobody.
"""

from django.dispatch import Signal

transition_committed = Signal()
early_tick_wanted = Signal()
