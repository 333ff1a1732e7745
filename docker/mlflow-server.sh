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
#   MLFLOW_SERVER_ENABLE_JOB_EXECUTION  MLflow's background job runner      default false
#                                  (GenAI scorers and trace jobs; devicebench uses none, and with a
#                                  SQL store it starts ~10 huey consumer processes of ~250 MB each)
#   MLFLOW_PUBLISHED_ON            where a container's published port listens: compose sets it to
#                                  MLFLOW_BIND (in a container MLFLOW_HOST is always 0.0.0.0). It
#                                  stands for MLFLOW_HOST only in a network of the container's own;
#                                  in the host's network the bind address is what is reachable
#   MLFLOW_AUTH                    true: switch on MLflow's basic-auth app   default false
#                                  (required when the server is reachable beyond loopback)
#   MLFLOW_ALLOW_UNAUTHENTICATED   true: serve beyond loopback without auth anyway (anyone who can
#                                  reach the port reads, changes and deletes every run); default false
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
# A store URI is never on a command line (any local user can read those with `ps`): it reaches
# `mlflow server` and the schema upgrade as MLFLOW_BACKEND_STORE_URI. A PostgreSQL password, as
# `user:password@` or `?password=`, is also taken out of the URIs and written to a 0600 pgpass file
# (PGPASSFILE, which libpq reads) in the same private 0700 directory. That directory is removed when
# the server stops.
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
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

[[ "$MLFLOW_PORT" =~ ^[0-9]+$ ]] || die "MLFLOW_PORT must be a number, got '$MLFLOW_PORT'"
[[ "$MLFLOW_WORKERS" =~ ^[1-9][0-9]*$ ]] || die "MLFLOW_WORKERS must be a positive number, got '$MLFLOW_WORKERS'"

private_dir=""
cleanup() {
    [[ -z "$private_dir" ]] || rm -rf "$private_dir"
}
trap cleanup EXIT
# Called in this shell, never inside $(...), so that cleanup knows the directory.
make_private_dir() {
    if [[ -z "$private_dir" ]]; then
        private_dir="$(mktemp -d)"
        chmod 700 "$private_dir"
        export PGPASSFILE="$private_dir/pgpass"
    fi
}

# without_password URI: the URI with its password moved into the private pgpass file. The URI reaches
# Python through the environment, not argv, for the same reason.
without_password() {
    case "$1" in
        postgresql*) ;;
        *)
            printf '%s\n' "$1"
            return
            ;;
    esac
    DEVICEBENCH_URI="$1" python -c '
import os, sys, urllib.parse
uri = os.environ["DEVICEBENCH_URI"]
p = urllib.parse.urlsplit(uri)
query = urllib.parse.parse_qsl(p.query, keep_blank_values=True)
in_query = [v for k, v in query if k.lower() == "password"]
password = urllib.parse.unquote(p.password) if p.password is not None else (in_query[-1] if in_query else None)
if password is None:
    print(uri)
    sys.exit()
def esc(s):
    return s.replace("\\", "\\\\").replace(":", "\\:")
fields = [p.hostname or "localhost", str(p.port or 5432), "*", urllib.parse.unquote(p.username or ""), password]
fd = os.open(os.environ["PGPASSFILE"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
with os.fdopen(fd, "a") as f:
    f.write(":".join(esc(x) for x in fields) + "\n")
host = p.netloc.rsplit("@", 1)[-1]
netloc = (p.username + "@" + host) if p.username else host
rest = urllib.parse.urlencode([(k, v) for k, v in query if k.lower() != "password"])
print(urllib.parse.urlunsplit(p._replace(netloc=netloc, query=rest)))
'
}

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
        make_private_dir
        auth_db_uri="$(without_password "$MLFLOW_AUTH_DATABASE_URI")"
        export MLFLOW_AUTH_CONFIG_PATH="$private_dir/basic_auth.ini"
        (
            umask 077
            cat >"$MLFLOW_AUTH_CONFIG_PATH" <<EOF
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION}
database_uri = ${auth_db_uri}
admin_username = ${MLFLOW_AUTH_ADMIN_USERNAME}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
EOF
        )
        export MLFLOW_AUTH_ADMIN_USERNAME MLFLOW_AUTH_ADMIN_PASSWORD MLFLOW_FLASK_SERVER_SECRET_KEY
        app_args=(--app-name basic-auth)
        ;;
    false | 0 | no | off | "") ;;
    *) die "MLFLOW_AUTH must be true or false, got '$MLFLOW_AUTH'" ;;
esac

# Beyond loopback without auth, anyone who reaches the port can read, change and delete every run:
# refused unless auth is on, or MLFLOW_ALLOW_UNAUTHENTICATED=true says so (and then said loudly).
is_loopback() {
    [[ "$1" =~ ^(127\.[0-9.]+|::1|\[::1\]|localhost)$ ]]
}
# True in a network namespace of the server's own (a container on a bridge network): only loopback and
# veth ends whose peers live in another namespace. There a bind beyond loopback is reached from outside
# only through the published port (MLFLOW_PUBLISHED_ON); in the host's namespace (`make server`, a
# container on the host network) it is reached on every address it binds, whatever is published.
private_network() {
    local dev
    for dev in /sys/class/net/*; do
        [[ "${dev##*/}" != lo ]] || continue
        [[ -r "$dev/iflink" && "$(<"$dev/iflink")" != "$(<"$dev/ifindex")" ]] || return 1
    done
}
exposed_on="$MLFLOW_HOST"
published="${MLFLOW_PUBLISHED_ON:-}"
if [[ -n "$published" ]] && { ! is_loopback "$published" || { ! is_loopback "$MLFLOW_HOST" && private_network; }; }; then
    exposed_on="$published"
fi
where="$exposed_on"
[[ "$exposed_on" != "$MLFLOW_HOST" || -z "$published" ]] ||
    where="$MLFLOW_HOST in the host's network (MLFLOW_PUBLISHED_ON=$published applies only to a container's own network)"
if [[ -z "${app_args[*]}" ]] && ! is_loopback "$exposed_on"; then
    allow_unauthenticated="${MLFLOW_ALLOW_UNAUTHENTICATED:-false}"
    case "${allow_unauthenticated,,}" in
        true | 1 | yes)
            echo "mlflow-server: WARNING: serving on ${where} WITHOUT AUTHENTICATION (MLFLOW_ALLOW_UNAUTHENTICATED=true): anyone who reaches the port can read, change and delete every run" >&2
            ;;
        *) die "reachable on ${where} (beyond loopback) without authentication: set MLFLOW_AUTH=true, or MLFLOW_ALLOW_UNAUTHENTICATED=true to serve so anyway" ;;
    esac
fi

[[ "$MLFLOW_BACKEND_STORE_URI" != postgresql* ]] || make_private_dir
# The store's URI reaches `mlflow server` (which reads MLFLOW_BACKEND_STORE_URI itself) and the schema
# upgrade through the environment only: `mlflow db upgrade URL` would put it on a command line.
MLFLOW_BACKEND_STORE_URI="$(without_password "$MLFLOW_BACKEND_STORE_URI")"
export MLFLOW_BACKEND_STORE_URI
case "$MLFLOW_BACKEND_STORE_URI" in
    postgresql* | mysql* | sqlite* | mssql*)
        echo "mlflow-server: upgrading the tracking store schema" >&2
        python -c 'import os; from mlflow.db import upgrade; upgrade.main([os.environ["MLFLOW_BACKEND_STORE_URI"]], prog_name="mlflow db upgrade")'
        ;;
esac

echo "mlflow-server: listening on ${MLFLOW_HOST}:${MLFLOW_PORT} (auth: ${MLFLOW_AUTH})" >&2
server_args=(
    --serve-artifacts
    --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION"
    --host "$MLFLOW_HOST"
    --port "$MLFLOW_PORT"
    --workers "$MLFLOW_WORKERS"
    --allowed-hosts "$MLFLOW_ALLOWED_HOSTS"
    "${app_args[@]}"
)
if [[ -z "$private_dir" ]]; then
    exec mlflow server "${server_args[@]}"
fi
# The private directory must outlive the server (workers read it when they start) and not the server:
# run it as a child, pass on SIGTERM/SIGINT (compose's stop, Ctrl-C), and clean up on the way out.
mlflow server "${server_args[@]}" &
server_pid=$!
trap 'kill -TERM "$server_pid" 2>/dev/null || true' TERM INT
status=0
while kill -0 "$server_pid" 2>/dev/null; do
    wait "$server_pid" || status=$?
done
exit "$status"
