"""The background sender: one thread that sends a journal's operations to the store in batches.

Metrics are queued and sent in batches, never one round trip per step, so tracking does not slow the
workload it measures. A failed send is retried with backoff (the operations are in the journal already);
once the final deadline has passed, the thread gives up and leaves the rest to `devicebench sync`.

The final deadline counts from when the store went away, not from the run's end: a store that has been
gone for the whole final flush already gets one more try, not another full wait, so a run whose server
died mid-training ends by itself soon after its work, into its spool.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from devicebench.schema import MAX_BATCH_METRICS
from devicebench.tracking.journal import Journal
from devicebench.tracking.protocol import one_line
from devicebench.tracking.replay import send_ops


class Sender:
    """Sends what `enqueue` journalled, in order, and acknowledges it in the journal once the store has it."""

    def __init__(self, client: Any, run_id: str, journal: Journal, flush_interval_s: float) -> None:
        self.client = client
        self.run_id = run_id
        self.journal = journal
        self.flush_interval_s = flush_interval_s
        self.last_error: str | None = None  # the last failure, in one line, for the spooled-run message
        self._pending: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._down_since: float | None = None  # when the current run of failed sends began; None: up
        self._thread = threading.Thread(target=self._loop, name="devicebench-tracker", daemon=True)
        self._thread.start()

    def enqueue(self, op: dict[str, Any]) -> None:
        """Journal `op`, then queue it; anything but a metric (or a full batch) wakes the thread."""
        op["seq"] = self.journal.append(op)
        with self._cond:
            self._pending.append(op)
            if len(self._pending) >= MAX_BATCH_METRICS or op["op"] != "metrics":
                self._cond.notify()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _next_batch(self) -> list[dict[str, Any]] | None:
        """What is queued now (waiting up to the flush interval for something); None once closed and empty."""
        while True:
            with self._cond:
                if not self._pending and not self._closing:
                    self._cond.wait(self.flush_interval_s)
                batch = list(self._pending)
                if batch:
                    return batch
                if self._closing:
                    return None

    def _loop(self) -> None:
        backoff = 0.5
        while (batch := self._next_batch()) is not None:
            self.journal.flush()
            try:
                send_ops(self.client, self.run_id, batch, self.journal.dir)
            except Exception as e:
                with self._cond:
                    self.last_error = one_line(e)
                    if self._down_since is None:
                        self._down_since = time.monotonic()
                    self._cond.notify_all()  # a drain that gives up when the store is away learns it now
                if self._deadline is not None and time.monotonic() > self._deadline:
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.5
            with self._cond:
                self._down_since = None
                del self._pending[: len(batch)]
                self._cond.notify_all()
            self.journal.acknowledge(batch[-1]["seq"])

    def drain(self, timeout_s: float, while_reachable: bool = False) -> bool:
        """Wait until everything queued so far reached the store; False if it did not in time.
        `while_reachable`: False as soon as a send finds the store away (mid-run, a model is spooled
        rather than the run held for the whole final flush)."""
        with self._cond:
            self._cond.notify()
            end = time.monotonic() + timeout_s
            while self._pending:
                if while_reachable and self._down_since is not None:
                    return False
                left = end - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def finish(self, final_flush_s: float, join_timeout_s: float) -> bool:
        """Send what is left within `final_flush_s` of the store going away (of now, while it answers),
        allowing one last try of `join_timeout_s`, then stop the thread; True when all of it arrived."""
        now = time.monotonic()
        with self._cond:
            self._deadline = (self._down_since if self._down_since is not None else now) + final_flush_s
        delivered = self.drain(max(self._deadline - now, 0.0) + join_timeout_s)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=join_timeout_s)
        return delivered
