#!/bin/sh
# One role and database per service, created once on an empty data directory.
# The postgres image runs this from /docker-entrypoint-initdb.d (as the superuser, over the local
# socket); tests/deploy runs the same script against its throwaway cluster (PGHOST/PGPORT set).
#   mlflow       tracking store (runs, params, metrics, tags)
#   mlflow_auth  MLflow basic-auth users and permissions (separate: it has its own migrations)
#   prefect      Prefect server
set -eu

: "${MLFLOW_DB_PASSWORD:?must be set}"
: "${PREFECT_DB_PASSWORD:?must be set}"

# Passwords go in as psql variables (:'name' quotes them as SQL literals), never spliced into SQL.
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    -v mlflow_pw="$MLFLOW_DB_PASSWORD" -v prefect_pw="$PREFECT_DB_PASSWORD" <<'SQL'
CREATE ROLE mlflow LOGIN PASSWORD :'mlflow_pw';
CREATE DATABASE mlflow OWNER mlflow;
CREATE DATABASE mlflow_auth OWNER mlflow;
CREATE ROLE prefect LOGIN PASSWORD :'prefect_pw';
CREATE DATABASE prefect OWNER prefect;
SQL
