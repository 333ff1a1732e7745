"""Read devicebench runs from the tracking store: through `MlflowClient` for an embedded store, and as
plain JSON from a tracking server (read/rest.py: the client's protobuf parsing cost seconds).

Paging is explicit (page tokens until there are none), because `search_runs` silently stops at its
`max_results`: a report that quietly compares the first 1,000 of 2,000 runs would be wrong, not slow.
`search_runs` only returns each metric's latest value. A matmul run logs each per-size point also as a
flat metric (`matmul/<backend>/<dtype>/n<size>/time_s`, schema.matmul_point_key), which the search returns
with the run (read/points.py): no request per run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException

from devicebench.config.workloads import WORKLOADS
from devicebench.errors import UsageError
from devicebench.report.read.experiments import active_experiments, read_line, resolve_experiments
from devicebench.report.read.options import Query, parse_since
from devicebench.report.read.points import flat_points
from devicebench.report.read.records import RunRecord, left_out_line, schema_mismatch, tags_and_params
from devicebench.report.read.rest import rest_store, search_page
from devicebench.schema import TAG_PREFIX as TAG
from devicebench.util.text import visible

NOT_RESULTS = ("report", "suite")  # runs that are not measurements of a workload
# A server's search is cut into workload x start-time streams (time_slices), this many in flight at once
SEARCH_STREAMS = 4
TIME_SLICES = 8


# --------------------------------------------------------------------------------------------- search


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def build_filter(query: Query, workload_clause: str | None = None, time_clause: str | None = None) -> str:
    """The server-side filter: workload (when one), start time, and the user's own filter ANDed on.

    `workload_clause` replaces the workload part, and `time_clause` narrows the start time, for one
    stream of a partitioned search.
    """
    parts = []
    if workload_clause:
        parts.append(workload_clause)
    elif len(query.workloads) == 1:
        parts.append(f"tags.`{TAG}workload` = {_quote(query.workloads[0])}")
    if query.since:
        parts.append(f"attributes.start_time >= {parse_since(query.since)}")
    if time_clause:
        parts.append(time_clause)
    if query.filter and query.filter.strip():
        parts.append(query.filter.strip())  # MLflow's grammar has AND only, so appending keeps its meaning
    return " and ".join(parts)


def partitions(query: Query) -> list[str | None]:
    """Disjoint workload clauses that together select what `query` selects, searched concurrently.

    A server answers one search page at a time per request; splitting the search by workload lets its
    workers serve several streams at once. Without a workload option the last stream takes every
    workload that is not a known one, so nothing new is missed. Every clause names the workload tag, and
    a tag comparison (`!=` too) matches only runs that carry the tag: runs that are not devicebench's
    (someone's own in `Default`) stay on the server when every experiment is read.
    """
    if len(query.workloads) == 1:
        return [None]
    names = list(query.workloads) or list(WORKLOADS)
    clauses: list[str | None] = [f"tags.`{TAG}workload` = {_quote(w)}" for w in names]
    if not query.workloads:
        clauses.append(
            " and ".join(f"tags.`{TAG}workload` != {_quote(w)}" for w in (*WORKLOADS, *NOT_RESULTS))
        )
    return clauses


def time_slices(
    client: Any, experiment_ids: Sequence[str], query: Query, k: int = TIME_SLICES
) -> list[str | None]:
    """Disjoint start-time clauses that together hold every run, for a tracking server only.

    A server's worker processes share one listening socket, and the client keeps its connections
    alive: the few searches a report started at once landed on one worker, which answered them all
    while the other sat idle. More, shorter streams, each page on a new connection (rest.search_page),
    spread the pages over the workers (docs/measured.md, reading 2,000 runs back).

    Two one-run searches find the oldest and the newest matching run, and `slice_clauses` cuts the
    span between them. An embedded store gains nothing from threads that share one interpreter, and
    gets one slice.
    """
    if k < 2 or rest_store(client) is None:
        return [None]
    flt = build_filter(query)
    ends = []
    for direction in ("ASC", "DESC"):
        with _filter_named(query):
            page, _ = _page(client, experiment_ids, flt, 1, None, direction)
        ends.extend(r.start_time for r in page)
    return slice_clauses(min(ends), max(ends), k) if ends else [None]


def slice_clauses(oldest: int, newest: int, k: int) -> list[str | None]:
    """Start-time clauses for `k` equal parts of [oldest, newest] (a nightly store fills time evenly).

    The first has no lower bound and the last no upper one, so a run logged while the report reads,
    or stamped by a clock behind or ahead of the others, is still read exactly once.
    """
    cuts = sorted({oldest + (newest - oldest) * i // k for i in range(1, k)} - {oldest})
    clauses: list[str | None] = []
    for a, b in pairwise([None, *cuts, None]):
        parts = [f"attributes.start_time >= {a}"] if a is not None else []
        parts += [f"attributes.start_time < {b}"] if b is not None else []
        clauses.append(" and ".join(parts) or None)
    return clauses


def record(run: Any) -> RunRecord:
    """One MLflow `Run` entity as a RunRecord (the embedded store's path), names and values made visible."""
    info, data = run.info, run.data
    return RunRecord(
        run_id=info.run_id,
        status=info.status,
        start_time=int(info.start_time or 0),
        **tags_and_params(data.tags, data.params),
        metrics=dict(data.metrics),
        experiment_id=info.experiment_id,
        run_name=visible(info.run_name or ""),
    )


def host_matches(run: RunRecord, host: str) -> bool:
    """`--host` matches a hostname or `DEVICEBENCH_HOST` label exactly, or a GPU model, CPU model or OCI
    shape by substring."""
    needle = host.strip().lower()
    if needle in (run.tag("host.hostname").lower(), run.tag("host.label").lower()):
        return True
    return any(
        needle in run.tag(t).lower()
        for t in ("host.gpu_name", "host.cpu_model", "host.oci.shape", "device.name")
    )


def keep(run: RunRecord, query: Query) -> bool:
    """The filters MLflow's grammar cannot express: several workloads, hosts by model, no reports."""
    wanted = set(query.workloads)
    if not run.workload or (run.workload in NOT_RESULTS and run.workload not in wanted):
        return False  # not a devicebench measurement (or the reports themselves)
    if wanted and run.workload not in wanted:
        return False
    return not (query.host and not host_matches(run, query.host))


def _page(
    client: Any,
    experiment_ids: Sequence[str],
    filter_string: str,
    size: int,
    token: str | None,
    direction: str = "DESC",
) -> tuple[list[RunRecord], str | None]:
    """One search page as RunRecords: JSON straight from a server (read/rest.py), else the client's."""
    order = [f"attributes.start_time {direction}"]
    store = rest_store(client)
    if store is not None:
        fields, token = search_page(store, experiment_ids, filter_string, size, order, token)
        return [RunRecord(**f) for f in fields], token
    page = client.search_runs(
        list(experiment_ids),
        filter_string=filter_string,
        run_view_type=ViewType.ACTIVE_ONLY,
        max_results=size,
        order_by=order,
        page_token=token,
    )
    return list(map(record, page)), page.token or None


@contextmanager
def _filter_named(query: Query) -> Iterator[None]:
    """A search the server rejects is the user's filter's fault when there is one: say so, as usage."""
    try:
        yield
    except MlflowException as e:
        if query.filter:
            raise UsageError(
                f"MLflow rejected the filter {query.filter!r}: {' '.join(str(e).split())[:300]}",
                param="filter",
            ) from None
        raise


def search_pages(
    client: Any,
    experiment_ids: Sequence[str],
    query: Query,
    workload_clause: str | None = None,
    time_clause: str | None = None,
) -> Iterator[list[RunRecord]]:
    """Every matching run, one page at a time (newest first), until MLflow returns no page token."""
    filter_string = build_filter(query, workload_clause, time_clause)
    token: str | None = None
    while True:
        with _filter_named(query):
            page, token = _page(client, experiment_ids, filter_string, query.page_size, token)
        yield [r for r in page if keep(r, query)]
        if not token:
            return


@dataclass(frozen=True)
class Selection:
    """What the report compares, and how it was chosen (printed in the report's header)."""

    runs: list[RunRecord]
    experiments: dict[str, str]
    filter_string: str
    read_s: float = 0.0
    every_experiment: bool = False  # read every active experiment, not named ones
    left_out: str = ""  # the runs logged in another form, named (records.left_out_line)

    def read_line(self) -> str:
        """Which experiments the runs came from, with counts, and what was left out: printed once, and in
        the selection table."""
        line = read_line(self.experiments, [r.experiment_id for r in self.runs], self.every_experiment)
        return f"{line}; {self.left_out}" if self.left_out else line


def _nothing_matched(
    query: Query, experiments: dict[str, str], every: bool, search: Callable[[Query], list[RunRecord]]
) -> UsageError:
    """No run matched: name the option that emptied the selection (the first whose removal alone finds
    runs; for --host, with the hosts there are), else everything that was asked."""
    emptied = (
        ("host", replace(query, host=None)),
        ("filter", replace(query, filter=None)),
        ("since", replace(query, since=None)),
        ("workload", replace(query, workloads=())),
    )
    for param, wider in emptied:
        asked = getattr(query, "workloads" if param == "workload" else param)
        if asked and (found := search(wider)):
            there = f"; hosts there: {', '.join(hosts_of(found))}" if param == "host" else ""
            shown = ",".join(asked) if param == "workload" else repr(asked)
            return UsageError(
                f"no runs match --{param} {shown} ({len(found)} runs without it){there}", param=param
            )
    what = ["any experiment" if every else f"experiment {', '.join(experiments.values())}"]
    what += [f"workload {','.join(query.workloads)}"] if query.workloads else []
    what += [f"{name} {value!r}" for name in ("since", "host", "filter") if (value := getattr(query, name))]
    return UsageError(
        f"no runs match ({'; '.join(what)}); run a workload first (devicebench matmul) or widen the selection",
        param="experiment",
    )


def hosts_of(runs: Sequence[RunRecord]) -> list[str]:
    """Each run's host as --host matches it: its label or hostname, with its GPU or CPU model."""
    said = set()
    for r in runs:
        name = r.tag("host.label") or r.tag("host.hostname") or "?"
        model = r.tag("host.gpu_name") or r.tag("host.cpu_model")
        said.add(f"{name} ({model})" if model else name)
    return sorted(said)


def _search(client: Any, experiments: dict[str, str], query: Query) -> list[RunRecord]:
    """Every run of `experiments` that `query` selects, newest first, each made whole."""

    def stream(clauses: tuple[str | None, str | None]) -> list[RunRecord]:
        return [r for page in search_pages(client, list(experiments), query, *clauses) for r in page]

    workloads = partitions(query) if experiments else []
    slices = time_slices(client, list(experiments), query) if workloads else []
    tasks = [(w, t) for t in slices for w in workloads]
    with ThreadPoolExecutor(max_workers=max(min(len(tasks), SEARCH_STREAMS), 1)) as search_pool:
        found = [r for got in search_pool.map(stream, tasks) for r in got]
    # a matmul record made whole from its flat per-size keys once: records are never changed
    whole = [replace(r, history=points) if (points := flat_points(r)) else r for r in found]
    return sorted(whole, key=lambda r: r.start_time, reverse=True)


def read_runs(client: Any, query: Query) -> Selection:
    """Resolve experiments and page through runs, each made whole from its search result (a matmul
    run's points from its flat keys). No runs is a usage error; a run logged in another form (older,
    newer, or no version) is named and left out. The search runs as streams by workload and start time (time_slices), a few at once.
    """
    t0 = time.perf_counter()
    if query.since:
        parse_since(query.since)  # a bad window is named before any request
    every = query.every_experiment
    if every:  # only runs tagged with a workload come back: every search clause names the tag
        experiments = active_experiments(client, query.page_size)
    else:
        experiments = resolve_experiments(client, query.experiments)

    def search(asked: Query) -> list[RunRecord]:
        return _search(client, experiments, asked)

    read = search(query)
    left_out = [r for r in read if schema_mismatch(r)]
    runs = [r for r in read if not schema_mismatch(r)]
    if not runs:
        raise (
            UsageError(f"no runs to compare: {left_out_line(left_out)}", param="experiment")
            if left_out
            else _nothing_matched(query, experiments, every, search)
        )
    return Selection(
        runs,
        experiments,
        build_filter(query),
        time.perf_counter() - t0,
        every_experiment=every,
        left_out=left_out_line(left_out),
    )
