from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from scheduler_app import observability

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("scheduler_app.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves the page's own script as a file (?script): the production
    # Content-Security-Policy allows no inline script
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("metrics", observability.metrics, name="metrics"),
    path("", include("dashboard.urls")),
]
