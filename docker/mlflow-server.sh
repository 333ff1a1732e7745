#!/usr/bin/env bash
# The one definition of the devicebench MLflow tracking server command line.
#
# Used unchanged by the `mlflow` compose service (it is server.Dockerfile's entrypoint) and by
# `make server` (run with the project's venv first on PATH), so the two cannot drift apart.
#
# Settings, all from the environment (compose passes them from .env; `make server` reads .env):
#   MLFLOW_BACKEND_STORE_URI       tracking store                      default sqlite:///mlflow.db
#                                  (e.g. postgresql://user:pass@postgres:5432/mlflow)
#   MLFLOW_ARTIFACTS_DESTINATION   where the server stores artifacts   default ./mlartifacts
#                                  (clients upload and download them through the server)
#   MLFLOW_HOST                    address to listen on                default 127.0.0.1
#   MLFLOW_PORT                    port to listen on                   default 5000
#   MLFLOW_WORKERS                 uvicorn worker processes            default 2
#   MLFLOW_ALLOWED_HOSTS           Host headers the server accepts, comma separated (MLflow >= 3.5
#                                  refuses others); default admits the compose service name:
#                                  mlflow,mlflow:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*
#   MLFLOW_AUTH                    true: switch on MLflow's basic-auth app   default false
#     with MLFLOW_AUTH=true:
#     MLFLOW_AUTH_ADMIN_USERNAME     admin user created on first start   default admin
#     MLFLOW_AUTH_ADMIN_PASSWORD     its password; required, at least 12 characters, and never the
#                                    old documented default (the server refuses to start otherwise)
#     MLFLOW_FLASK_SERVER_SECRET_KEY signs the UI's sessions; required
#     MLFLOW_AUTH_DATABASE_URI       user/permission store          default: MLFLOW_BACKEND_STORE_URI
#                                    (its tables and alembic_version_auth sit beside MLflow's)
#     MLFLOW_AUTH_DEFAULT_PERMISSION what users get on others' experiments   default READ
#
# The basic-auth app reads its settings from the ini file named by MLFLOW_AUTH_CONFIG_PATH; this
# script writes one from the settings above into a private temporary directory. The password is
# not written to it: MLflow reads MLFLOW_AUTH_ADMIN_PASSWORD from the environment itself.
#
# A SQL store is upgraded (`mlflow db upgrade`) before the server starts, so a newer image never
# meets an old schema. Take a database backup before moving to a new MLflow version.
set -euo pipefail

die() {
    echo "mlflow-server: $*" >&2
    exit 2
}

: "${MLFLOW_BACKEND_STORE_URI:=sqlite:///mlflow.db}"
: "${MLFLOW_ARTIFACTS_DESTINATION:=./mlartifacts}"
: "${MLFLOW_HOST:=127.0.0.1}"
: "${MLFLOW_PORT:=5000}"
: "${MLFLOW_WORKERS:=2}"
: "${MLFLOW_ALLOWED_HOSTS:=mlflow,mlflow:*,localhost,localhost:*,127.0.0.1,127.0.0.1:*}"
: "${MLFLOW_AUTH:=false}"

[[ "$MLFLOW_PORT" =~ ^[0-9]+$ ]] || die "MLFLOW_PORT must be a number, got '$MLFLOW_PORT'"
[[ "$MLFLOW_WORKERS" =~ ^[1-9][0-9]*$ ]] || die "MLFLOW_WORKERS must be a positive number, got '$MLFLOW_WORKERS'"

app_args=()
case "${MLFLOW_AUTH,,}" in
    true | 1 | yes | on)
        : "${MLFLOW_AUTH_ADMIN_USERNAME:=admin}"
        : "${MLFLOW_AUTH_ADMIN_PASSWORD:=}"
        : "${MLFLOW_AUTH_DATABASE_URI:=$MLFLOW_BACKEND_STORE_URI}"
        : "${MLFLOW_AUTH_DEFAULT_PERMISSION:=READ}"
        if [[ -z "$MLFLOW_AUTH_ADMIN_PASSWORD" || "$MLFLOW_AUTH_ADMIN_PASSWORD" == "password1234" ]]; then
            die "MLFLOW_AUTH=true needs MLFLOW_AUTH_ADMIN_PASSWORD set to a password of your own (not empty, not the documented default)"
        fi
        if ((${#MLFLOW_AUTH_ADMIN_PASSWORD} < 12)); then
            die "MLFLOW_AUTH_ADMIN_PASSWORD must be at least 12 characters (MLflow's password rule)"
        fi
        [[ -n "${MLFLOW_FLASK_SERVER_SECRET_KEY:-}" ]] ||
            die "MLFLOW_AUTH=true needs MLFLOW_FLASK_SERVER_SECRET_KEY (e.g. from: python -c 'import secrets; print(secrets.token_hex(32))')"
        auth_dir="$(mktemp -d)"
        chmod 700 "$auth_dir"
        export MLFLOW_AUTH_CONFIG_PATH="$auth_dir/basic_auth.ini"
        cat >"$MLFLOW_AUTH_CONFIG_PATH" <<EOF
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION}
database_uri = ${MLFLOW_AUTH_DATABASE_URI}
admin_username = ${MLFLOW_AUTH_ADMIN_USERNAME}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
EOF
        export MLFLOW_AUTH_ADMIN_USERNAME MLFLOW_AUTH_ADMIN_PASSWORD MLFLOW_FLASK_SERVER_SECRET_KEY
        app_args=(--app-name basic-auth)
        ;;
    false | 0 | no | off | "") ;;
    *) die "MLFLOW_AUTH must be true or false, got '$MLFLOW_AUTH'" ;;
esac

case "$MLFLOW_BACKEND_STORE_URI" in
    postgresql* | mysql* | sqlite* | mssql*)
        echo "mlflow-server: upgrading the tracking store schema" >&2
        mlflow db upgrade "$MLFLOW_BACKEND_STORE_URI"
        ;;
esac

echo "mlflow-server: listening on ${MLFLOW_HOST}:${MLFLOW_PORT} (auth: ${MLFLOW_AUTH})" >&2
exec mlflow server \
    --backend-store-uri "$MLFLOW_BACKEND_STORE_URI" \
    --serve-artifacts \
    --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
    --host "$MLFLOW_HOST" \
    --port "$MLFLOW_PORT" \
    --workers "$MLFLOW_WORKERS" \
    --allowed-hosts "$MLFLOW_ALLOWED_HOSTS" \
    "${app_args[@]}"
