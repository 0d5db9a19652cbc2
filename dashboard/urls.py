from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("jobs/", views.jobs, name="jobs"),
    path("jobs/new/", views.job_new, name="job_new"),
    path("jobs/new/check/", views.job_validate, name="job_validate"),
    path("jobs/<int:pk>/", views.job_detail, name="job"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_view, name="job_cancel"),
    path("arrays/<int:pk>/cancel/", views.array_cancel_view, name="array_cancel"),
    path("teams/", views.teams, name="teams"),
    path("cluster/", views.cluster, name="cluster"),
    path("operator/", views.operator, name="operator"),
    path("operator/teams/<int:pk>/quota/", views.tenant_quota, name="tenant_quota"),
    path("operator/nodes/<int:pk>/<slug:action>/", views.node_action, name="node_action"),
    path("glossary/", views.glossary, name="glossary"),
    path("live/node/<int:pk>/", views.node_panel, name="node_panel"),
    path("operator/whatif/", views.whatif, name="whatif"),
    path("operator/whatif/<uuid:pk>/", views.whatif_run, name="whatif_run"),
    path("live/<slug:name>/", views.live, name="live"),
]
