"""HdRAG Portal settings: one module, driven by environment variables (docs/deployment.md, "Settings").

Two modes, chosen by `HDRAG_ENV`:

* `development` (default, the embedded mode): SQLite in `DATA_DIR`, Celery on kombu's filesystem
  broker in `DATA_DIR/broker` (no Redis), in-memory channel layer, embedded Chroma, local llama.cpp.
  Each service switches to its production form as soon as its variable is set (`DATABASE_URL`,
  `REDIS_URL`, `CHROMA_URL`, `LLM_BASE_URL`), so tests and CI can use PostgreSQL and Redis too.
* `production`: the same, but start-up is refused unless DEBUG is off, `SECRET_KEY` is set to a
  real secret, and `DATABASE_URL` and `REDIS_URL` are set (several processes on several machines
  cannot share SQLite, a filesystem broker or an in-memory channel layer).
"""

from __future__ import annotations

from datetime import timedelta
from ipaddress import ip_network
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.env import envbool, envint, envlist, envnetworks, envstr
from core.security import DEFAULT_POLICY

BASE_DIR = Path(__file__).resolve().parent.parent

HDRAG_ENV = envstr("HDRAG_ENV", "development")
if HDRAG_ENV not in ("development", "production"):
    raise ImproperlyConfigured(f"HDRAG_ENV={HDRAG_ENV!r}: expected 'development' or 'production'")
PRODUCTION = HDRAG_ENV == "production"

DEFAULT_SECRET_KEY = "hdrag-development-secret-key-never-use-in-production"
SECRET_KEY = envstr("SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = envbool("DEBUG", not PRODUCTION)
DATA_DIR = Path(envstr("DATA_DIR", str(BASE_DIR / "var"))).resolve()
DATABASE_URL = envstr("DATABASE_URL", "")
REDIS_URL = envstr("REDIS_URL", "")

if PRODUCTION:
    problems = []
    if DEBUG:
        problems.append("DEBUG is on (set DEBUG=0)")
    if SECRET_KEY == DEFAULT_SECRET_KEY or len(SECRET_KEY) < 32:
        problems.append("SECRET_KEY is the development default or shorter than 32 characters")
    if not DATABASE_URL:
        problems.append("DATABASE_URL is not set (PostgreSQL is required)")
    if not REDIS_URL:
        problems.append("REDIS_URL is not set (Redis is required for Celery, channels and the cache)")
    if problems:
        raise ImproperlyConfigured("refusing to start with HDRAG_ENV=production: " + "; ".join(problems))

ALLOWED_HOSTS = envlist(
    "ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", PRODUCTION)
if envbool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Single sign-on (see its block below): django-allauth.
SSO_APPS = [
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "corpus",
    "memory",
    "chat",
    "api",
    *SSO_APPS,  # the single sign-on block below
]

MIDDLEWARE = [
    "core.metrics.RequestMetricsMiddleware",  # first: it times the whole of each request
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "accounts.audit.AuditContextMiddleware",  # who and from where, for the audit trail's services
    # Every page needs a login unless its view is marked @login_not_required (login, health).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",  # allauth's sign-in flows (single sign-on block)
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.security.ContentSecurityPolicyMiddleware",
    # Last: it sees the credentials a login view passes to authenticate() and refuses locked-out ones.
    "axes.middleware.AxesMiddleware",
]
CONTENT_SECURITY_POLICY = envstr("CONTENT_SECURITY_POLICY", DEFAULT_POLICY)

# A backup's dump format: JSON Lines that keep microseconds (corpus/backup_format.py).
SERIALIZATION_MODULES = {"jsonl_exact": "corpus.backup_format"}

ROOT_URLCONF = "hdrag_site.urls"
WSGI_APPLICATION = "hdrag_site.wsgi.application"
ASGI_APPLICATION = "hdrag_site.asgi.application"

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
                "accounts.oidc.context.single_sign_on",
            ],
        },
    },
]

if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 60),
                                                  conn_health_checks=True)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "portal.sqlite3",
            # Kept per request thread (hdrag_site.asgi_http keeps the threads): no connect and
            # PRAGMAs per request.
            "CONN_MAX_AGE": envint("DB_CONN_MAX_AGE", 60),
            # The web process and the worker write the same file: WAL lets readers go on while a
            # build inserts memories, IMMEDIATE avoids the deadlock of two readers upgrading.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}]}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    # Single process only: events from a separate worker never reach it, so pages also poll.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery (namespace CELERY_). State lives on the rows, so task results are not kept.
CELERY_BROKER_URL = REDIS_URL or "filesystem://"
if REDIS_URL:
    # A build may run for hours; with late acks Redis would redeliver it after the visibility
    # timeout. Redelivery is harmless (the task claims its row), but pointless work.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 6 * 3600)}
else:
    _BROKER_DIR = DATA_DIR / "broker"
    CELERY_BROKER_TRANSPORT = "core.broker:FilesystemTransport"  # messages appear whole (see there)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "staging_folder": str(_BROKER_DIR / "staging"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "control_folder": str(_BROKER_DIR / "control"),  # kombu's default is ./control
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = envstr("CELERY_QUEUE", "hdrag")
# The meaning channel's background reading (corpus.services.meaning_jobs): a queue and a worker of
# its own (Procfile's "meaning"), so its hours of encoding never hold a build's or an append's slot.
CELERY_MEANING_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-meaning"
CELERY_TASK_ROUTES = {"corpus.tasks.encode_meaning": {"queue": CELERY_MEANING_QUEUE}}
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery beat (the worker's -B in `./portal run`; one `celery beat` in production) queues the
# sources whose sync interval has passed (corpus.sources.services.sources_sync_due).
CELERY_BEAT_SCHEDULE = {"sync-sources": {"task": "corpus.tasks.sync_sources_due", "schedule": 60.0},
                        "prune-records": {"task": "chat.tasks.records_prune", "schedule": 24 * 3600.0}}

# Engine and services
GGUF_PATH = envstr("GGUF_PATH", "")  # blank: the packaged Gemma 3 270M (engine.model_files.default_gguf_path)
HDRAG_CONFIG_FILE = envstr("HDRAG_CONFIG_FILE", "")  # optional YAML of engine.config.Config values
# Engine searches a process runs at once; more wait for a slot (corpus.serving.search_slot).
SEARCH_CONCURRENCY = envint("SEARCH_CONCURRENCY", 2, minimum=1)
EMBEDDING_CACHE_DIR = Path(envstr("EMBEDDING_CACHE_DIR", str(BASE_DIR / ".cache" / "embeddings")))
LLAMA_PORT = envint("LLAMA_PORT", 8081, minimum=1)
LLM_BASE_URL = envstr("LLM_BASE_URL", f"http://127.0.0.1:{LLAMA_PORT}")
# The LLM server's API key, sent as `Authorization: Bearer` (a vLLM --api-key, a gateway's key); never shown.
LLM_API_KEY = envstr("LLM_API_KEY", "")
# The model name sent with each request: llama.cpp serves its one model under any name; a gateway or
# a server of several models needs the one it knows.
LLM_MODEL = envstr("LLM_MODEL", "default")
# Several LLM servers (chat.llm.servers): JSON in the variable or the path of a YAML file, a list of
# {url, key, model, slots}; unset, the one server above.
LLM_SERVERS = envstr("LLM_SERVERS", "")
LLM_TIMEOUT_SECONDS = envint("LLM_TIMEOUT_SECONDS", 120, minimum=1)
# The chat's token budget (search + generation + system + history) must fit the server's context:
# `./portal run` starts llama.cpp with this context. Gemma 270M rambles, so answers are capped.
LLM_CONTEXT_SIZE = envint("LLM_CONTEXT_SIZE", 8192, minimum=512)
LLM_MAX_NEW_TOKENS = envint("LLM_MAX_NEW_TOKENS", 1024, minimum=1)
# Turns into the LLM (chat.llm.queue): at most LLM_PREFILL_AT_ONCE in prefill (1: first come, first
# served, right for a CPU server, where prefill is compute-bound; 0: no limit, for a server that
# batches prefill, a GPU), at most LLM_STREAMS with a request open (the server's slots: `./portal run`
# starts llama.cpp with as many), at most LLM_QUEUE_LIMIT waiting in all and LLM_QUEUE_PER_USER per user.
LLM_PREFILL_AT_ONCE = envint("LLM_PREFILL_AT_ONCE", 1, minimum=0)
LLM_STREAMS = envint("LLM_STREAMS", 8, minimum=1)
LLM_QUEUE_LIMIT = envint("LLM_QUEUE_LIMIT", 32, minimum=1)
LLM_QUEUE_PER_USER = envint("LLM_QUEUE_PER_USER", 2, minimum=1)
# Several web processes (or machines) in front of one LLM server: unset, each process keeps its own
# queue and admits its own turns, so their prompts are read together; redis://HOST:PORT/DB (may be
# REDIS_URL), one queue in that Redis shared by every process that names the same LLM_BASE_URL and
# policy (chat.llm.queue_redis: a process that dies frees its places within a 10 s lease).
LLM_QUEUE_REDIS_URL = envstr("LLM_QUEUE_REDIS_URL", "")
if LLM_QUEUE_REDIS_URL and urlsplit(LLM_QUEUE_REDIS_URL).scheme not in ("redis", "rediss", "unix"):
    raise ImproperlyConfigured(f"LLM_QUEUE_REDIS_URL: expected a redis://, rediss:// or unix:// URL, got "
                               f"{urlsplit(LLM_QUEUE_REDIS_URL).scheme or 'no'} scheme")
# Memory tokens of a turn that has to wait for the LLM (0: the conversation's own budget always).
LLM_BUSY_TOKEN_BUDGET = envint("LLM_BUSY_TOKEN_BUDGET", 0, minimum=0)
CHROMA_URL = envstr("CHROMA_URL", "")
CHROMA_PATH = DATA_DIR / "chroma"
# Each request to a Chroma server (connect: at most 5 s): a host that drops packets fails a search
# or page in this time instead of stalling it (chromadb's own client would wait forever).
CHROMA_TIMEOUT_SECONDS = envint("CHROMA_TIMEOUT_SECONDS", 10, minimum=1)
# Each corpus's multi-vector store (corpus.chroma): embedding width and write format
# ("1.0" the contract's gzip(float32), "1.1" float16; both are always read).
MULTIVECTOR_DIM = envint("MULTIVECTOR_DIM", 768, minimum=1)
MULTIVECTOR_STORAGE_VERSION = envstr("MULTIVECTOR_STORAGE_VERSION", "1.1")

# Builds: a running build writes a heartbeat at least this often; one silent for
# BUILD_STALE_SECONDS lost its worker and is marked failed by the sweep (see corpus.services.build_liveness).
BUILD_HEARTBEAT_SECONDS = envint("BUILD_HEARTBEAT_SECONDS", 10, minimum=1)
BUILD_STALE_SECONDS = envint("BUILD_STALE_SECONDS", 300, minimum=10)
# Segments (docs/segments.md): a successful upload queues an append that makes it searchable in
# seconds (per corpus: Corpus.append_on_upload; the first upload of a corpus queues its first
# build). A merge (a full build of the live datasets) is queued when the state has more than
# SEGMENT_LIMIT segments, or when its appends hold more than SEGMENT_MERGE_PERCENT % of the
# documents of its full build (how far frozen statistics may drift; docs/segments.md measures it).
INDEX_ON_UPLOAD = envbool("INDEX_ON_UPLOAD", True)
# A new corpus reads by meaning (its setting `meaning_channel`) unless this is 0 or it has late interaction.
MEANING_CHANNEL_DEFAULT = envbool("MEANING_CHANNEL_DEFAULT", True)
SEGMENT_LIMIT = envint("SEGMENT_LIMIT", 10, minimum=1)
SEGMENT_MERGE_PERCENT = envint("SEGMENT_MERGE_PERCENT", 25, minimum=1)
# Several machines (corpus.object_store): unset, uploads and builds stay under DATA_DIR;
# s3://BUCKET/PREFIX, they go to an S3-compatible store (boto3 reads AWS_ENDPOINT_URL,
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION), workers publish every build and
# append there before activating it, and every process fetches what it lacks into DATA_DIR, keeping
# at most SEGMENT_CACHE_BYTES of segments that no corpus serves (corpus.segment_cache).
BUILD_STORAGE_URL = envstr("BUILD_STORAGE_URL", "")
# Sources kept in sync with a corpus (corpus/sources/, docs/sources.md): folders only under these
# roots; every request to a Git server, web site or S3 store gives up after SOURCE_TIMEOUT_SECONDS.
SOURCE_ROOTS = envlist("SOURCE_ROOTS", [])
SOURCE_TIMEOUT_SECONDS = envint("SOURCE_TIMEOUT_SECONDS", 30, minimum=1)
# The outbound policy (core.outbound, docs/security.md): a source reaches public addresses only,
# and what this list allows (CIDRs, addresses and host names, each optionally :PORT). The portal's
# own ports on this machine (the web's PORT, llama.cpp's LLAMA_PORT) and the cloud metadata
# addresses stay refused unless an entry names them exactly. OUTBOUND_RESOLVER answers a name's
# addresses (tests swap it for one that sends nothing).
SOURCE_ALLOWED_NETWORKS = envnetworks("SOURCE_ALLOWED_NETWORKS")
OUTBOUND_OWN_PORTS = [envint("PORT", 8000, minimum=1), LLAMA_PORT]
OUTBOUND_RESOLVER = "core.outbound.system_resolve"
# Exact-word indexes and late-interaction scorers are read into RAM (index files are mapped): each
# process keeps at most this many bytes of them (corpus.serving).
INDEX_MEMORY_CACHE_BYTES = envint("INDEX_MEMORY_CACHE_BYTES", 2 * 1024**3, minimum=0)
SEGMENT_CACHE_BYTES = envint("SEGMENT_CACHE_BYTES", 20 * 1024**3, minimum=0)
BUILD_PROGRESS_INTERVAL = 0.5  # seconds between progress writes/events while a build runs
MEMORY_INSERT_BATCH = envint("MEMORY_INSERT_BATCH", 5000, minimum=1)

# Uploads: every file goes through corpus.uploads (size limit enforced while streaming, sha256
# computed on the way) into a temporary file inside DATA_DIR, so accepting it is a rename.
UPLOAD_MAX_BYTES = envint("UPLOAD_MAX_BYTES", 512 * 1024 * 1024, minimum=1)
# Archive and storage bombs (corpus.services.batch_uploads, corpus.quotas): the ZIP members of one
# request may expand to UPLOAD_MAX_EXPANDED_BYTES in all, counted as they are unpacked (text deflates
# 3-10x, a bomb 100x and more); past it the archive is refused whole. Each user may keep
# USER_STORAGE_QUOTA_BYTES of the datasets they uploaded, in all corpora (staff: no limit; 0: none).
UPLOAD_MAX_EXPANDED_BYTES = envint("UPLOAD_MAX_EXPANDED_BYTES", 2 * UPLOAD_MAX_BYTES, minimum=1)
USER_STORAGE_QUOTA_BYTES = envint("USER_STORAGE_QUOTA_BYTES", 10 * 1024**3, minimum=0)
# Daily quotas of each person (accounts.quotas): chat turns, LLM tokens (prompt and answer) and upload
# bytes a day, in the TIME_ZONE day; a person's or a group's `Quota` row (admin) overrides them. 0: no limit.
QUOTA_QUESTIONS_PER_DAY = envint("QUOTA_QUESTIONS_PER_DAY", 0, minimum=0)
QUOTA_TOKENS_PER_DAY = envint("QUOTA_TOKENS_PER_DAY", 0, minimum=0)
QUOTA_UPLOAD_BYTES_PER_DAY = envint("QUOTA_UPLOAD_BYTES_PER_DAY", 0, minimum=0)
# Days the per-turn usage records (chat.models.TurnRecord: the usage page, quotas) are kept; 0: for ever.
USAGE_RETENTION_DAYS = envint("USAGE_RETENTION_DAYS", 400, minimum=0)
# Days the audit trail (accounts.AuditEvent) keeps an event; 0: for ever. Pruned daily (accounts.audit_prune).
AUDIT_RETENTION_DAYS = envint("AUDIT_RETENTION_DAYS", 730, minimum=0)
# Every request body is bounded in front of Django (core.bodylimit): REQUEST_MAX_BYTES, or
# UPLOAD_MAX_BYTES on these paths (dataset uploads of the pages and the API, the API's multi-vector
# store) for a request that declares its Content-Length and logs in: a session, or a credential
# check an app registered (the API's tokens, through accounts.throttle).
REQUEST_MAX_BYTES = envint("REQUEST_MAX_BYTES", 2_621_440, minimum=1024)
UPLOAD_PATH_PATTERN = r"(/api/v1)?/corpora/\d+/datasets/|/api/v1/corpora/\d+/store/.*"
FILE_UPLOAD_HANDLERS = ["corpus.uploads.LimitedHashingUploadHandler"]
FILE_UPLOAD_TEMP_DIR = str(DATA_DIR / "tmp")
FILE_UPLOAD_PERMISSIONS = 0o640

# REST API (api/): bearer tokens or the browser session, one error shape, throttled per token.
API_THROTTLE_RATE = envstr("API_THROTTLE_RATE", "600/min")  # per token (user, address); blank: off
API_MAX_JSON_BYTES = envint("API_MAX_JSON_BYTES", 64 * 1024 * 1024, minimum=1024)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.BearerTokenAuthentication",
                                       "rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": ["api.throttling.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["api.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.LimitedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "URL_FORMAT_OVERRIDE": None,  # `?format=` belongs to the export endpoint
    "STRICT_JSON": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "HdRAG Portal API",
    "DESCRIPTION": "Corpora, datasets, builds, memory search, conversations, the multi-vector store and an "
                   "OpenAI-compatible chat. Authenticate with `Authorization: Bearer <token>` (create one at "
                   "/accounts/tokens/). Every error is `{\"error\": {\"code\", \"message\", \"details\"}}`.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from our static files: no CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling, one path for every credential check (accounts.throttle: the login form, API
# tokens, the body-limit layer), counted by django-axes:
# * an account: after LOGIN_FAILURE_LIMIT (10) failures for it, from any address, it is refused for
#   LOGIN_LOCKOUT_MINUTES (15) after the last one (a page that says so; 429 on the API);
# * an address: after LOGIN_ADDRESS_FAILURE_LIMIT (50) failures from it across accounts and tokens
#   (credential stuffing), logins and wrong tokens from it are refused as long. A refused attempt is
#   not counted, so an account adds at most its own limit: 50 takes failures for at least five
#   accounts, and one account's lockout never locks the colleagues behind the same NAT or proxy.
# Staff unlock at once by deleting the "access attempts" in the admin, or with
# `manage.py axes_reset_username NAME` / `axes_reset_ip ADDRESS`. A right password resets the account.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_HANDLER = "accounts.throttle.AddressLimitHandler"
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 10, minimum=1)
LOGIN_ADDRESS_FAILURE_LIMIT = envint("LOGIN_ADDRESS_FAILURE_LIMIT", 50, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
# The account from every address (so from this one too); the address has its own, higher limit in
# AddressLimitHandler, which axes' check W006 ("ip_address" missing here) cannot see.
AXES_LOCKOUT_PARAMETERS = ["username"]
SILENCED_SYSTEM_CHECKS = ["axes.W006"]
# A refused attempt neither counts nor extends the lockout (and the backend marks it, so the
# lockout page shows for an address lock too).
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# The client address: REMOTE_ADDR, or from X-Forwarded-For only on a request from one of these
# proxies (addresses or CIDR networks; accounts.throttle.client_address). Empty: the header is
# never read, since any client can send one.
TRUSTED_PROXIES = envlist("TRUSTED_PROXIES", [])
for proxy in TRUSTED_PROXIES:
    try:
        ip_network(proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {proxy!r} is not an IP address or network") from None
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_address"

# --- Monitoring (hdrag_site.monitoring, docs/deployment.md "Monitoring") --------------------------
# /metrics (Prometheus text, core.metrics) and /healthz/dependencies (which dependency is down) answer
# a request that carries `Authorization: Bearer METRICS_TOKEN`, or comes from an address in
# METRICS_ALLOWED_NETWORKS (addresses or CIDR networks; the client address as TRUSTED_PROXIES says);
# anyone else gets 403. Neither set: both endpoints are closed. /healthz (alive) stays open.
METRICS_TOKEN = envstr("METRICS_TOKEN", "")
METRICS_ALLOWED_NETWORKS = envlist("METRICS_ALLOWED_NETWORKS", [])
for network in METRICS_ALLOWED_NETWORKS:
    try:
        ip_network(network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"METRICS_ALLOWED_NETWORKS: {network!r} is not an IP address or network"
        ) from None
# Seconds each dependency check of /healthz/dependencies may take.
HEALTH_CHECK_TIMEOUT = envint("HEALTH_CHECK_TIMEOUT", 3, minimum=1)

# --- Single sign-on: OpenID Connect (accounts.oidc, docs/single-sign-on.md) -------------------------
# Off unless OIDC_DISCOVERY_URL is set: then the login page offers "Sign in with OIDC_PROVIDER_NAME"
# (django-allauth's openid_connect provider: discovery, code flow with PKCE S256, identity by issuer
# + sub). OIDC_SIGNUP=0: only people who already have an account here may sign in. OIDC_ALLOWED_DOMAINS:
# email domains that may sign in (blank: any). A first sign-in joins the local account of the same
# email only when email_verified is true, or absent with OIDC_TRUST_EMAIL=1 (a risk: see the docs).
# OIDC_GROUPS_CLAIM names the claim (dotted for nested ones) that lists a person's groups, applied
# at every sign-in to the provider-managed groups (created unless OIDC_CREATE_GROUPS=0);
# OIDC_ADMIN_GROUPS make staff, OIDC_BLOCKED_GROUPS are refused (and deactivated). LOCAL_LOGIN=0:
# only superusers may use a password (the way in when the provider is down).
OIDC_DISCOVERY_URL = envstr("OIDC_DISCOVERY_URL", "").strip()
OIDC_CLIENT_ID = envstr("OIDC_CLIENT_ID", "").strip()
OIDC_CLIENT_SECRET = envstr("OIDC_CLIENT_SECRET", "")
OIDC_PROVIDER_NAME = envstr("OIDC_PROVIDER_NAME", "").strip() or "your identity provider"
OIDC_SCOPES = envlist("OIDC_SCOPES", ["openid", "profile", "email"])
OIDC_SIGNUP = envbool("OIDC_SIGNUP", True)
OIDC_ALLOWED_DOMAINS = [domain.lower().lstrip("@") for domain in envlist("OIDC_ALLOWED_DOMAINS", [])]
OIDC_TRUST_EMAIL = envbool("OIDC_TRUST_EMAIL", False)
OIDC_GROUPS_CLAIM = envstr("OIDC_GROUPS_CLAIM", "").strip() or "groups"
OIDC_CREATE_GROUPS = envbool("OIDC_CREATE_GROUPS", True)
OIDC_ADMIN_GROUPS = envlist("OIDC_ADMIN_GROUPS", [])
OIDC_BLOCKED_GROUPS = envlist("OIDC_BLOCKED_GROUPS", [])
LOCAL_LOGIN = envbool("LOCAL_LOGIN", True)
OIDC_ENABLED = bool(OIDC_DISCOVERY_URL)
if OIDC_ENABLED:
    if urlsplit(OIDC_DISCOVERY_URL).scheme not in ("https", "http") or not OIDC_CLIENT_ID:
        raise ImproperlyConfigured("OIDC_DISCOVERY_URL must be the provider's http(s) issuer URL, and "
                                   "OIDC_CLIENT_ID must be set with it")
    if "openid" not in OIDC_SCOPES:
        raise ImproperlyConfigured(f"OIDC_SCOPES={' '.join(OIDC_SCOPES)!r} must include openid")
    # The sign-in and logout buttons are forms whose answer redirects to the provider, which
    # browsers check against form-action: the provider's origin joins 'self' there.
    _issuer = urlsplit(OIDC_DISCOVERY_URL)
    CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
        "form-action 'self'", f"form-action 'self' {_issuer.scheme}://{_issuer.netloc}")
elif OIDC_CLIENT_ID or OIDC_CLIENT_SECRET:
    raise ImproperlyConfigured("OIDC_CLIENT_ID/OIDC_CLIENT_SECRET are set without OIDC_DISCOVERY_URL")
if not LOCAL_LOGIN:
    AUTHENTICATION_BACKENDS = [AUTHENTICATION_BACKENDS[0], "accounts.backends.SuperuserPasswordBackend"]
ACCOUNT_ADAPTER = "accounts.oidc.adapter.PortalAccountAdapter"
SOCIALACCOUNT_ADAPTER = "accounts.oidc.adapter.PortalSocialAccountAdapter"
ACCOUNT_EMAIL_VERIFICATION = SOCIALACCOUNT_EMAIL_VERIFICATION = "none"  # the provider verifies addresses
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = ["username*", "email"]
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True  # only as PortalSocialAccountAdapter.authenticate_by_email allows
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_STORE_TOKENS = False  # the ID token for logout is kept in the session (accounts.oidc.views)
SOCIALACCOUNT_PROVIDERS = {
    "openid_connect": {
        "OAUTH_PKCE_ENABLED": True,
        "SCOPE": OIDC_SCOPES,
        "APPS": [
            {
                "provider_id": "sso",
                "name": OIDC_PROVIDER_NAME,
                "client_id": OIDC_CLIENT_ID,
                "secret": OIDC_CLIENT_SECRET,
                "settings": {"server_url": OIDC_DISCOVERY_URL, "oauth_pkce_enabled": True},
            },
        ]
        if OIDC_ENABLED
        else [],
    }
}
# --- end of single sign-on ---------------------------------------------------------------------------

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": str(DATA_DIR / "media")}},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage" if PRODUCTION
                    else "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Development serves straight from the source folders; production from collectstatic's output.
WHITENOISE_USE_FINDERS = not PRODUCTION

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
