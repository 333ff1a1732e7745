"""`search_runs` against a tracking server, read as plain JSON.

`MlflowClient.search_runs` turns each page into protobuf messages and then into entities in pure Python:
for thousands of runs that is seconds of the client's CPU (`json_format` ParseDict and
`Metric.from_proto`; docs/measured.md), taken from a server that may share the host.
The report wants plain dicts anyway (RunRecord), so for a server it posts the same documented request
(`POST /api/2.0/mlflow/runs/search`) through MLflow's own `http_request`, which applies the same
credentials, TLS settings, retries and timeouts as the client, and reads the JSON directly. Embedded
stores (`sqlite:///`, a directory) have no HTTP to skip and keep the client's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlflow.store.tracking.rest_store import RestStore
from mlflow.utils.rest_utils import http_request, verify_rest_response

from devicebench.report.read.records import tags_and_params
from devicebench.util.text import visible

SEARCH_ENDPOINT = "/api/2.0/mlflow/runs/search"
CLOSE = {"Connection": "close"}


def rest_store(client: Any) -> Any | None:
    """The client's REST store when it talks to a tracking server, else None (use the client).

    MLflow exposes no public accessor for the store behind a client; where the attribute is missing
    (another MLflow version) the report falls back to `client.search_runs`, slower but the same runs.
    """
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return (
        store if isinstance(store, RestStore) and callable(getattr(store, "get_host_creds", None)) else None
    )


def search_page(
    store: Any,
    experiment_ids: Sequence[str],
    filter_string: str,
    max_results: int,
    order_by: Sequence[str],
    page_token: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of active runs as RunRecord fields, and the next page's token (None after the last).

    A rejected request raises MlflowException, as `client.search_runs` does.
    """
    body: dict[str, Any] = {
        "experiment_ids": [str(e) for e in experiment_ids],
        "filter": filter_string,
        "run_view_type": "ACTIVE_ONLY",
        "max_results": max_results,
        "order_by": list(order_by),
    }
    if page_token:
        body["page_token"] = page_token
    # A new connection for each page: kept-alive ones stay with the worker process that accepted them
    # (query.time_slices), and a page of runs costs the server far more than a connect (docs/measured.md).
    response = http_request(store.get_host_creds(), SEARCH_ENDPOINT, "POST", json=body, extra_headers=CLOSE)
    page = verify_rest_response(response, SEARCH_ENDPOINT).json()
    return [record_fields(r) for r in page.get("runs", [])], page.get("next_page_token") or None


def record_fields(run: dict[str, Any]) -> dict[str, Any]:
    """One run of the REST answer as RunRecord's fields: what `Run.from_proto` would give, without it,
    its names and values made visible (util.text).

    Metric values come as JSON numbers, or as strings for NaN and ±Infinity, which `float` reads alike.
    """
    info, data = run.get("info", {}), run.get("data", {})
    return {
        "run_id": info.get("run_id") or info.get("run_uuid", ""),
        "status": info.get("status", ""),
        "start_time": int(info.get("start_time") or 0),
        **tags_and_params(
            {t["key"]: t.get("value", "") for t in data.get("tags", [])},
            {p["key"]: p.get("value", "") for p in data.get("params", [])},
        ),
        "metrics": {m["key"]: float(m.get("value", 0.0)) for m in data.get("metrics", [])},
        "experiment_id": str(info.get("experiment_id", "")),
        "run_name": visible(info.get("run_name", "")),
    }
