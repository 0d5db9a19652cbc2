"""Signals the services send after commit (never before: a rolled-back change sends nothing).

``transition_committed(sender=Transition, transition=<Transition>)`` fires once per
committed transition; the production tick loop listens to it to ask for an early tick.
"""

from django.dispatch import Signal

transition_committed = Signal()
