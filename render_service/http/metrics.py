"""Prometheus metrics of the render tier (and the gateway, which adds its own in gateway/).

With several worker processes, prometheus_client's multiprocess mode aggregates them: the CLI
points PROMETHEUS_MULTIPROC_DIR at a fresh folder before the workers start.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    Summary,
    generate_latest,
    multiprocess,
)

__all__ = ["METRICS", "VLLM_HTTP_METRICS", "VLLM_EXCLUDED_HANDLERS", "render_metrics_text", "CONTENT_TYPE_LATEST"]

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)


class _Labelled:
    """`metric.labels(*values)`, resolved once per label values: prometheus_client validates,
    converts and locks on every `labels()` call, six times per request here. Same children
    (labels() hands out one child per values), so exports are unchanged."""

    __slots__ = ("_metric", "_children")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class _Metrics:
    def __init__(self) -> None:
        self.requests = Counter(
            "render_service_requests_total",
            "HTTP requests by endpoint and status code.",
            ["endpoint", "status"],
        )
        self.latency = Histogram(
            "render_service_request_duration_seconds",
            "HTTP request latency by endpoint.",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
        )
        self.tokens_rendered = Counter(
            "render_service_prompt_tokens_rendered_total",
            "Prompt token ids produced by /render endpoints.",
        )
        self.tokens_derendered = Counter(
            "render_service_output_tokens_derendered_total",
            "Output token ids turned into text by /derender endpoints.",
        )
        self.rejected = Counter(
            "render_service_rejected_total",
            "Requests refused before any work, by reason.",
            ["reason"],
        )
        self.requests_by = _Labelled(self.requests)
        self.latency_by = _Labelled(self.latency)


METRICS = _Metrics()

# Paths vLLM's Instrumentator leaves out (vllm/entrypoints/serve/instrumentator/metrics.py).
VLLM_EXCLUDED_HANDLERS = ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")
# prometheus_fastapi_instrumentator's default buckets, as vLLM uses them.
_HIGHR_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5,
                  5, 7.5, 10, 30, 60)
_LOWR_BUCKETS = (0.1, 0.5, 1)


class _VllmHttpMetrics:
    """What `vllm serve` and `vllm launch render` expose through prometheus_fastapi_instrumentator
    (its `default()` set): same names, labels, buckets; `handler` is the route path or "none",
    `status` the class ("2xx")."""

    def __init__(self) -> None:
        self.requests = Counter("http_requests_total", "Total number of requests by method, status and handler.",
                                ["method", "status", "handler"])
        self.request_size = Summary("http_request_size_bytes", "Content length of incoming requests by handler. "
                                    "Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                                    ["handler"])
        self.response_size = Summary("http_response_size_bytes", "Content length of outgoing responses by handler. "
                                     "Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                                     ["handler"])
        self.latency_highr = Histogram("http_request_duration_highr_seconds",
                                       "Latency with many buckets but no API specific labels. "
                                       "Made for more accurate percentile calculations. ", buckets=_HIGHR_BUCKETS)
        self.latency = Histogram("http_request_duration_seconds", "Latency with only few buckets by handler. "
                                 "Made to be only used if aggregation by handler is important. ",
                                 ["method", "handler"], buckets=_LOWR_BUCKETS)
        self._requests, self._latency = _Labelled(self.requests), _Labelled(self.latency)
        self._request_size, self._response_size = _Labelled(self.request_size), _Labelled(self.response_size)

    def observe(self, method: str, status: int, handler: str, request_bytes: int, response_bytes: int,
                seconds: float) -> None:
        self._requests(method, f"{str(status)[0]}xx", handler).inc()
        self._request_size(handler).observe(request_bytes)
        self._response_size(handler).observe(response_bytes)
        self.latency_highr.observe(seconds)
        self._latency(method, handler).observe(seconds)


VLLM_HTTP_METRICS = _VllmHttpMetrics()


def render_metrics_text() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated upstream
        return generate_latest(registry)
    return generate_latest()
