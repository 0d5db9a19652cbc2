"""The persistence model: the seed's data model as Django models.

Job state is a projection of the append-only Transition log. Only
``scheduler_app.services.transitions`` writes Job.state, Allocation rows, Node.free_gpus
and tenant usage; ``manage.py replay --verify`` checks the projection against the log.
"""

from .cluster import Node, Pod
from .jobs import Allocation, Job, Transition
from .lease import Lease
from .reservations import Reservation
from .tenants import Membership, Tenant

__all__ = ["Allocation", "Job", "Lease", "Membership", "Node", "Pod", "Reservation", "Tenant",
           "Transition"]
