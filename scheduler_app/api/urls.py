"""/api/v1/ routes. The schema and its docs are wired in scheduler_app/urls.py."""

from __future__ import annotations

from django.urls import path, re_path, register_converter

from . import account, agent_logs, agents, cluster, jobs, nodes, tenants
from .routing import IdConverter, NameConverter, not_found

register_converter(IdConverter, "id")
register_converter(NameConverter, "name")

app_name = "api"

urlpatterns = [
    path("me/", account.Me.as_view(), name="me"),
    path("tokens/", account.TokenListCreate.as_view(), name="tokens"),
    path("tokens/<id:pk>/", account.TokenRevoke.as_view(), name="token"),
    path("jobs/", jobs.JobListCreate.as_view(), name="jobs"),
    path("jobs/batch/", jobs.JobBatchSubmit.as_view(), name="jobs-batch"),
    path("jobs/<id:pk>/", jobs.JobDetail.as_view(), name="job"),
    path("jobs/<id:pk>/cancel/", jobs.JobCancel.as_view(), name="job-cancel"),
    path("arrays/", jobs.ArraySubmit.as_view(), name="arrays"),
    path("arrays/<id:pk>/", jobs.ArrayDetail.as_view(), name="array"),
    path("arrays/<id:pk>/cancel/", jobs.ArrayCancel.as_view(), name="array-cancel"),
    path("tenants/", tenants.TenantList.as_view(), name="tenants"),
    path("tenants/<slug:name>/", tenants.TenantDetail.as_view(), name="tenant"),
    path("tenants/<slug:name>/quota/", tenants.TenantQuota.as_view(), name="tenant-quota"),
    path("nodes/", nodes.NodeList.as_view(), name="nodes"),
    path("nodes/<name:name>/", nodes.NodeDetail.as_view(), name="node"),
    path("nodes/<name:name>/drain/", nodes.NodeDrain.as_view(), name="node-drain"),
    path("nodes/<name:name>/undrain/", nodes.NodeUndrain.as_view(), name="node-undrain"),
    path("nodes/<name:name>/down/", nodes.NodeDown.as_view(), name="node-down"),
    path("nodes/<name:name>/up/", nodes.NodeUp.as_view(), name="node-up"),
    path("cluster/", cluster.ClusterSummary.as_view(), name="cluster"),
    path("cluster/reservations/", cluster.Reservations.as_view(), name="reservations"),
    path("cluster/transitions/", cluster.TransitionFeed.as_view(), name="transitions"),
    path("agent/register/", agents.AgentRegister.as_view(), name="agent-register"),
    path("agent/heartbeat/", agents.AgentHeartbeat.as_view(), name="agent-heartbeat"),
    path("agent/assignments/", agents.AgentAssignments.as_view(), name="agent-assignments"),
    path("agent/jobs/<id:pk>/start/", agents.AgentConfirmStart.as_view(),
         name="agent-start"),
    path("agent/jobs/<id:pk>/checkpoint/", agents.AgentCheckpoint.as_view(),
         name="agent-checkpoint"),
    path("agent/jobs/<id:pk>/preempt-ack/", agents.AgentAckPreempt.as_view(),
         name="agent-preempt-ack"),
    path("agent/jobs/<id:pk>/exit/", agents.AgentExit.as_view(), name="agent-exit"),
    # job log tails (helper G's agent_logs.py)
    path("agent/jobs/<id:pk>/log/", agent_logs.AgentLogPush.as_view(), name="agent-log"),
    path("jobs/<id:pk>/log/", agent_logs.JobLogTail.as_view(), name="job-log"),
    # last: anything else under /api/v1/ is a JSON 404
    re_path(r"^", not_found),
]
