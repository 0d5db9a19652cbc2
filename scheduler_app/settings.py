"""Django settings, read from the environment (django-environ).

Every knob an operator may turn is an environment variable; README.md has the table.
Defaults are for a laptop: SQLite in WAL mode next to manage.py, no broker (the in-process
tick loop), DEBUG on. ``DJANGO_ENV=production`` turns the defaults that are unsafe in
production into a refusal to start (see :func:`refuse_unsafe_production`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from scheduler_app import scheduler_config

BASE_DIR = Path(__file__).resolve().parent.parent

#: The development secret. Anyone can read it here, so production refuses it.
DEFAULT_SECRET_KEY = "django-insecure-dev-only-gpu-scheduler-do-not-use-in-production"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # optional; absent in CI and containers

#: The only two values: anything else ("Production", "prod", "production " with a space)
#: is refused at start, where it used to run silently with DEBUG on and the public key.
DJANGO_ENVS = ("production", "development")
#: Django's own rule for a secret (``check --deploy``, security.W009): production refuses
#: a shorter one, or one of fewer distinct characters.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE = 5


def django_env_from(value: str) -> str:
    """``DJANGO_ENV`` as given, if it is exactly one of :data:`DJANGO_ENVS`."""
    if value not in DJANGO_ENVS:
        raise ImproperlyConfigured(
            f"DJANGO_ENV must be exactly 'production' or 'development', not {value!r}: "
            "refusing to start."
        )
    return value


DJANGO_ENV = django_env_from(env.str("DJANGO_ENV", default="development"))
IS_PRODUCTION = DJANGO_ENV == "production"


def refuse_unsafe_production(*, django_env: str, debug: bool, secret_key: str) -> None:
    """Raise ImproperlyConfigured when production runs with DEBUG, the public secret or a
    weak one (shorter than 50 characters, or of fewer than 5 distinct characters)."""
    if django_env != "production":
        return
    problems = []
    if debug:
        problems.append("DEBUG is on (set DEBUG=false)")
    if not secret_key or secret_key == DEFAULT_SECRET_KEY:
        problems.append("SECRET_KEY is the public development default (set SECRET_KEY)")
    elif len(secret_key) < SECRET_KEY_MIN_LENGTH or \
            len(set(secret_key)) < SECRET_KEY_MIN_UNIQUE:
        problems.append(
            f"SECRET_KEY is too weak: {len(secret_key)} characters, {len(set(secret_key))} "
            f"distinct (at least {SECRET_KEY_MIN_LENGTH} and {SECRET_KEY_MIN_UNIQUE}; e.g. "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )
    if problems:
        raise ImproperlyConfigured(
            "Refusing to start with DJANGO_ENV=production: " + "; ".join(problems) + "."
        )


SECRET_KEY = env.str("SECRET_KEY", default=DEFAULT_SECRET_KEY)
DEBUG = env.bool("DEBUG", default=not IS_PRODUCTION)
refuse_unsafe_production(django_env=DJANGO_ENV, debug=DEBUG, secret_key=SECRET_KEY)

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "scheduler_app.apps.SchedulerAppConfig",
    "scheduler_app.api.apps.ApiConfig",
    "dashboard.apps.DashboardConfig",
]

# Sessions, CSRF, authentication and messages: Django's, stepped over by token-
# authenticated requests to /api/v1/, which use none of them (scheduler_app/api/middleware.py).
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "scheduler_app.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "scheduler_app.api.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "scheduler_app.api.middleware.CsrfViewMiddleware",
    "scheduler_app.api.middleware.AuthenticationMiddleware",
    "scheduler_app.api.middleware.MessageMiddleware",
    # malformed requests (too large, NUL in the query) refused in the site's error shapes,
    # before any view reads the body (CSRF's process_view reads a form's): after the
    # session, user and messages the 400 page shows
    "scheduler_app.guard.RequestGuardMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # sign-in throttling: answers a locked-out attempt (last, as django-axes asks)
    "axes.middleware.AxesMiddleware",
]

#: Only the backstop: each route has its own, smaller limit (scheduler_app/guard.py), the
#: largest a batch of 1,000 jobs with the longest commands needs (about 96 MiB).
DATA_UPLOAD_MAX_MEMORY_SIZE = 128 * 1024 * 1024

ROOT_URLCONF = "scheduler_app.urls"
WSGI_APPLICATION = "scheduler_app.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# DATABASE_URL, e.g. postgres://user:pass@host:5432/name. Default: SQLite file in WAL mode.
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Our backend subclass only teaches `flush` about the append-only Transition triggers.
    DATABASES["default"]["ENGINE"] = "scheduler_app.db_backends.sqlite3"
    # Tests: an in-memory database (Django's default for SQLite), said outright so that
    # pytest-xdist's workers keep it instead of deriving a file name from the engine's.
    DATABASES["default"].setdefault("TEST", {}).setdefault("NAME", ":memory:")
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # WAL lets the dashboard read while the tick writes; busy_timeout waits for the
            # writer instead of failing at once.
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;"
            ),
            # Take the write lock at BEGIN: no deadlock when a reader upgrades to a writer.
            "transaction_mode": "IMMEDIATE",
        }
    )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
# A reused connection is checked (a trivial query) before each request's first use, and
# replaced if the server dropped it: without it, each web process answered one request
# 500 after a PostgreSQL restart, failover or pg_terminate_backend.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache ----------------------------------------------------------------------------
# The early-tick debounce lives here: with several web processes and a worker, point
# CACHE_URL at Redis (e.g. redis://host:6379/1) so "one early tick pending" holds across
# them; the default per-process memory cache debounces each process on its own.
CACHES = {"default": env.cache("CACHE_URL", default="locmemcache://")}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if IS_PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

if IS_PRODUCTION:
    SESSION_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=True)
    CSRF_COOKIE_SECURE = env.bool("SECURE_COOKIES", default=True)
    # HSTS: browsers keep to HTTPS for a year (a header they ignore over plain HTTP, so
    # the compose file's http://localhost still works). Preloading is a commitment for
    # the whole domain: opt in (check --deploy's W021 remains until then, docs).
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
    # TLS usually ends at the proxy in front: redirect here only if asked (W008 otherwise),
    # and trust the proxy's X-Forwarded-Proto only if told to.
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
    if env.bool("SECURE_PROXY_SSL_HEADER", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

#: check --deploy's W003 looks for Django's CsrfViewMiddleware by its exact path; ours is
#: that class, stepping over token-authenticated API requests only (api/middleware.py;
#: tests/api/test_middleware.py checks that a session still needs the CSRF token).
SILENCED_SYSTEM_CHECKS = ["security.W003"]

# --- Sign-in throttling (django-axes) ----------------------------------------------------
# Every password sign-in (the dashboard's /login/ and the admin's) goes through Django's
# authenticate(); axes' backend refuses it, before the password is checked, for a user
# name or an address with LOGIN_FAILURE_LIMIT failures in the last LOGIN_LOCKOUT_S
# seconds: 429 and the "locked out" page. Counted in the database (every web process
# shares them, and a broker or cache outage changes nothing); a success resets the count
# of its user and address. Tokens are not passwords: the API is throttled apart.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("LOGIN_LOCKOUT_S", default=900))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # failures only: no table row per successful sign-in
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
#: The client's address (scheduler_app/security.py): REMOTE_ADDR, or behind a proxy the
#: address the proxy appended to this header (e.g. X-Forwarded-For; set it only behind a
#: proxy that appends it, else a client chooses its own address).
LOGIN_CLIENT_IP_HEADER = env.str("LOGIN_CLIENT_IP_HEADER", default="")
AXES_CLIENT_IP_CALLABLE = "scheduler_app.security.client_ip"

#: The Content-Security-Policy header (scheduler_app/security.py), production only by
#: default. Scripts only from this site (htmx, Chart.js and Swagger UI are served from
#: it; the Swagger page's own script comes as a file); inline styles are allowed, for the
#: style attributes of the dashboard's bars and timelines. Empty: no header.
PRODUCTION_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self'; connect-src 'self'; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)
CONTENT_SECURITY_POLICY = env.str(
    "CONTENT_SECURITY_POLICY",
    default=PRODUCTION_CONTENT_SECURITY_POLICY if IS_PRODUCTION else "",
)

# --- REST API -------------------------------------------------------------------------
# docs/api.md. Tokens (pipelines, node agents) first: its WWW-Authenticate header makes
# "no credentials" a 401. Sessions serve the browser (and enforce CSRF on writes).
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "scheduler_app.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        # no credentials: counted against the address's anonymous rate (429 past it)
        "scheduler_app.api.authentication.AnonymousThrottleAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["scheduler_app.api.parsers.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "scheduler_app.api.negotiation.FastContentNegotiation",
    "DEFAULT_THROTTLE_CLASSES": [
        "scheduler_app.api.throttling.UserThrottle",
        "scheduler_app.api.throttling.AgentThrottle",
        "scheduler_app.api.throttling.AnonThrottle",
    ],
    # Per user, per node agent, per address (anonymous); empty = no limit. Counted in the
    # cache: per process with the default local-memory cache.
    "DEFAULT_THROTTLE_RATES": {
        "user": env.str("API_THROTTLE_USER", default="6000/min") or None,
        "agent": env.str("API_THROTTLE_AGENT", default="1200/min") or None,
        "anon": env.str("API_THROTTLE_ANON", default="60/min") or None,
    },
    "EXCEPTION_HANDLER": "scheduler_app.api.errors.exception_handler",
    "DATETIME_FORMAT": "iso-8601",
}
#: Seconds each web process may reuse what it read of a token (and its user or node), of
#: a user's role in a tenant (and the tenant's quota) and of the cluster's shape, instead
#: of reading them again for every request: a revoked token, a removed member, a changed
#: quota or a newly registered node is seen by the other processes within this (the
#: process that made the change sees it at once). 0: read them every time.
#: scheduler_app/api/cache.py, docs/api.md.
API_CACHE_S = env.float("API_CACHE_S", default=5.0)
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU scheduler API",
    "DESCRIPTION": "Submit and follow GPU jobs, read the cluster, run node agents. "
    "Reference and examples: docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # the API's path converters (scheduler_app/api/routing.py)
    "PATH_CONVERTER_OVERRIDES": {
        "id": int,
        "name": {"type": "string", "minLength": 1, "maxLength": 128},
    },
    "ENUM_NAME_OVERRIDES": {
        "LogStateEnum": "scheduler_app.models.choices.LOG_STATE_CHOICES",
        "JobStateEnum": "scheduler_app.models.choices.JOB_STATE_CHOICES",
        "NodeHealthEnum": "scheduler_app.models.choices.NODE_HEALTH_CHOICES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "scheduler_app.api.schema.add_error_responses",
    ],
}

# --- Celery ---------------------------------------------------------------------------
# Empty broker: no Celery worker; the tick runs in-process (`make demo`). Tasks enqueued
# anyway run eagerly so nothing tries to reach a broker that is not there.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_ACKS_LATE = True
CELERY_TIMEZONE = TIME_ZONE
#: Tests and shared brokers give each deployment its own queue (worker and beat alike).
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
#: What-if runs go to a queue of their own, consumed by a worker of their own: on the
#: tick's worker (one process, --concurrency 1) a run of a minute held every tick back
#: for that minute (found 2026-12-07). docs/operations.md.
CELERY_WHATIF_QUEUE = env.str("CELERY_WHATIF_QUEUE",
                              default=f"{CELERY_TASK_DEFAULT_QUEUE}-whatif")
CELERY_TASK_ROUTES = {"dashboard.whatif_run": {"queue": CELERY_WHATIF_QUEUE}}
#: Keep Django's LOGGING (JSON lines) in the worker instead of Celery's own handlers.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
#: Every worker also reads a queue of its own (``<nodename>.dq2``): a standby forwards the
#: beat's ticks it takes to the leader's (tasks.forward_to_leader).
CELERY_WORKER_DIRECT = True
#: The scheduler tick, every SCHEDULER_TICK_INTERVAL_S seconds (the leader lease decides
#: which worker's tick writes; standbys' ticks do nothing).
CELERY_BEAT_SCHEDULE = {
    "scheduler-tick": {
        "task": "scheduler_app.scheduler_tick",
        "schedule": float(env.int("SCHEDULER_TICK_INTERVAL_S", default=5)),
        # a tick still queued when the next one is due is pointless (e.g. after an outage)
        "options": {"expires": float(env.int("SCHEDULER_TICK_INTERVAL_S", default=5))},
    },
}

# --- Scheduler ------------------------------------------------------------------------
#: The policy settings, SCHEDULER_<NAME> for every scenario setting (grace, its cap, the
#: preemption cap, the retry budget, the interactive slice, the tick and estimate
#: budgets...): README's configuration table. A bad value or an unknown SCHEDULER_
#: variable (a typo) stops the start with a message naming it.
try:
    SCHEDULER_CONFIG = scheduler_config.from_environ(os.environ)
    _SCHEDULER = scheduler_config.scheduler_config(SCHEDULER_CONFIG)
except (ValueError, TypeError) as error:
    raise ImproperlyConfigured(str(error)) from None
#: Half-life of a tenant's decayed GPU-second usage (fair share), in seconds.
SCHEDULER_USAGE_HALF_LIFE_S = _SCHEDULER.usage_half_life_s
#: Seconds between ticks (beat schedule and the embedded `run_scheduler` loop).
SCHEDULER_TICK_INTERVAL_S = _SCHEDULER.tick_interval_s
#: Leader lease lifetime: renewed every tick; a standby takes over this long after the
#: leader's last renewal.
SCHEDULER_LEASE_TTL_S = env.int("SCHEDULER_LEASE_TTL_S", default=15)
#: A node whose agent sent no heartbeat for this long is marked down by the leader before
#: its next tick (nodes that never sent one are exempt). 0 disables the check.
SCHEDULER_HEARTBEAT_TIMEOUT_S = env.int("SCHEDULER_HEARTBEAT_TIMEOUT_S", default=30)

# --- Dashboard --------------------------------------------------------------------------
#: Seconds between two refreshes of a live dashboard section (htmx polling).
DASHBOARD_POLL_S = env.int("DASHBOARD_POLL_S", default=3)

# --- Logs and metrics -------------------------------------------------------------------
# LOG_FORMAT=json: one JSON object per line (ts, level, logger, message, tick_id, holder,
# the tick's fields), for a log shipper; text (the default outside production) for people.
LOG_FORMAT = env.str("LOG_FORMAT", default="json" if IS_PRODUCTION else "text")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "scheduler_app.observability.LogContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "scheduler_app.observability.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
#: If set, GET /metrics needs "Authorization: Bearer <METRICS_TOKEN>".
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
#: If set, the process that runs the ticks (a Celery worker's pool process, or
#: run_scheduler) serves its own metrics on this port: for a worker on another host than
#: the web server (without a shared PROMETHEUS_MULTIPROC_DIR). docs/operations.md.
SCHEDULER_METRICS_PORT = env.int("SCHEDULER_METRICS_PORT", default=None)
