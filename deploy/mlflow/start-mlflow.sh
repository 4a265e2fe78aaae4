#!/bin/sh
# Start the MLflow tracking server with basic authentication, configured only from the environment,
# so that no secret is baked into an image or committed. Used by deploy/docker-compose.yml and, with
# local paths, by tests/deploy (the same script is what the integration test starts).
#
# Required:
#   MLFLOW_BACKEND_STORE_URI        postgresql+psycopg2://mlflow:<pw>@postgres:5432/mlflow
#   MLFLOW_AUTH_DATABASE_URI        postgresql+psycopg2://mlflow:<pw>@postgres:5432/mlflow_auth
#                                   (its own database: the auth store runs its own migrations)
#   MLFLOW_ARTIFACTS_DESTINATION    s3://mlflow-artifacts (or a local path); the server proxies
#                                   artifact traffic, so clients need no object-store credentials
#   MLFLOW_AUTH_ADMIN_PASSWORD      password of the admin user, created on first start only
#   MLFLOW_FLASK_SERVER_SECRET_KEY  signs sessions/CSRF tokens; must be equal across workers
# Optional:
#   MLFLOW_AUTH_ADMIN_USERNAME (admin)  MLFLOW_AUTH_DEFAULT_PERMISSION (READ)
#   MLFLOW_SERVER_ALLOWED_HOSTS     Host headers accepted; default covers the compose service name
#   MLFLOW_HOST (0.0.0.0)  MLFLOW_PORT (5000)  MLFLOW_WORKERS (2)
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION (false)  MLflow's job runner (GenAI evaluation jobs, trace roll-ups)
#   MLFLOW_AUTH_CACHE_TTL_SECONDS (60)  how long a worker trusts a checked username/password (0: check every
#                                   request). The check is a scrypt hash by design, 0.13 s of CPU per request on
#                                   one core; a run or a nightly judging makes tens of requests. A deleted user or
#                                   changed password stays accepted by the other workers for at most this long.
# Extra arguments are passed on to `mlflow server`.
set -eu

: "${MLFLOW_BACKEND_STORE_URI:?must be set}"
: "${MLFLOW_AUTH_DATABASE_URI:?must be set}"
: "${MLFLOW_ARTIFACTS_DESTINATION:?must be set}"
: "${MLFLOW_AUTH_ADMIN_PASSWORD:?must be set}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?must be set}"

port="${MLFLOW_PORT:-5000}"
# MLflow rejects Host headers it does not know (DNS-rebinding protection) and, once the list is
# given, forgets its localhost/private-IP defaults: name every way clients reach it, with any port.
allowed_hosts="${MLFLOW_SERVER_ALLOWED_HOSTS:-mlflow,mlflow:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*}"

# The auth plugin reads its database URI only from an INI file; write it (it holds the database
# password) to a private file instead of shipping one.
auth_dir="$(mktemp -d)"
umask 077
cat > "$auth_dir/basic_auth.ini" <<INI
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION:-READ}
database_uri = ${MLFLOW_AUTH_DATABASE_URI}
admin_username = ${MLFLOW_AUTH_ADMIN_USERNAME:-admin}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = ${MLFLOW_AUTH_CACHE_TTL_SECONDS:-60}
INI
export MLFLOW_AUTH_CONFIG_PATH="$auth_dir/basic_auth.ini"

# MLflow's job runner serves GenAI evaluation jobs and trace roll-ups, which this stack does not use; it would
# start 8 more processes beside the server (benchmarks/bench_mlflow_server_start.py: 28 against 7 CPU seconds
# for a start and 20 s idle).
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

exec mlflow server \
    --app-name basic-auth \
    --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
    --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
    --serve-artifacts \
    --host "${MLFLOW_HOST:-0.0.0.0}" \
    --port "$port" \
    --workers "${MLFLOW_WORKERS:-2}" \
    --allowed-hosts "$allowed_hosts" \
    "$@"
