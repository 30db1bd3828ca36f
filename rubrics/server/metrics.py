"""Prometheus metrics of the reward server (one registry per app, so several apps can share a process).

* `rlvr_reward_items_total{rubric,status}`: items scored, by result status;
* `rlvr_reward_request_seconds{rubric,endpoint}`: request latency histogram (admission wait included);
* `rlvr_reward_cache_total{rubric,outcome}`: verified-result cache `hit` / `shared` (joined an
  identical in-flight item) / `miss`;
* `rlvr_reward_inflight` / `rlvr_reward_queued`: items being scored / waiting for a slot (queue depth);
* `rlvr_reward_rejected_total`: requests refused with 429 (overload), `rlvr_reward_cache_entries`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# seconds; dense where a CPU verifier answers (ms) and out to the default 300 s deadline
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.items = Counter("rlvr_reward_items", "Items scored", ["rubric", "status"], registry=r)
        self.latency = Histogram(
            "rlvr_reward_request_seconds",
            "Request latency",
            ["rubric", "endpoint"],
            buckets=BUCKETS,
            registry=r,
        )
        self.cache = Counter("rlvr_reward_cache", "Result cache lookups", ["rubric", "outcome"], registry=r)
        self.cache_entries = Gauge("rlvr_reward_cache_entries", "Cached verified results", registry=r)
        self.inflight = Gauge("rlvr_reward_inflight", "Items being scored", registry=r)
        self.queued = Gauge("rlvr_reward_queued", "Items waiting for a scoring slot", registry=r)
        self.rejected = Counter("rlvr_reward_rejected", "Requests refused with 429", registry=r)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def of(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept (the lookup costs more than the increment it serves)."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def text(self) -> bytes:
        return generate_latest(self.registry)
