"""Issue 20 (visibility): vLLM's http_* metrics, 4xx reasons at INFO, the start-up summary,
health changes (not polls), and the docs' Grafana dashboard querying only metrics we expose.
No model, no engine: a bare FastAPI app behind the real middleware and error mapping."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import render_service.gateway.metrics  # noqa: F401  (registers the gateway's metrics)
from render_service.config import ServiceConfig
from render_service.errors import BadRequestError
from render_service.http.errors import install_error_handlers
from render_service.http.middleware import ServiceMiddleware
from render_service.http.startup_log import non_default_settings, quiet_http_client_logs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
VLLM_HTTP_FAMILIES = ("http_requests", "http_request_size_bytes", "http_response_size_bytes",
                      "http_request_duration_highr_seconds", "http_request_duration_seconds")


def tiny_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/tokenize")
    async def tokenize() -> dict[str, int]:
        return {"count": 1}

    @app.post("/v1/completions/render")
    async def bad() -> None:
        raise BadRequestError("prompt is missing")

    @app.get("/health")
    async def health() -> None:
        return None

    app.add_middleware(ServiceMiddleware, api_key=None, max_body_bytes=1000, max_concurrent=10,
                       known_paths=frozenset({"/tokenize", "/v1/completions/render", "/health"}))
    return app


async def exercise(app: FastAPI) -> None:
    """One 2xx, one 4xx, one probe and one unknown path."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.post("/tokenize", json={})).status_code == 200
        bad = await client.post("/v1/completions/render", json={}, headers={"X-Request-Id": "req-42"})
        assert bad.status_code == 400
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/nowhere")).status_code == 404


def label_sets(text: str, families: tuple[str, ...] = VLLM_HTTP_FAMILIES) -> dict[str, set[frozenset[str]]]:
    """family -> the label-name sets of its samples (bucket/quantile labels dropped)."""
    found: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in families:
            found[family.name] = {frozenset(s.labels) - {"le", "quantile"} for s in family.samples}
    return found


def handler_values(text: str) -> set[str]:
    return {s.labels["handler"] for f in text_string_to_metric_families(text) if f.name == "http_requests"
            for s in f.samples if "handler" in s.labels}


async def test_vllm_http_metrics_names_labels_and_exclusions() -> None:
    await exercise(tiny_app())
    text = generate_latest(REGISTRY).decode()
    assert label_sets(text) == {
        "http_requests": {frozenset({"method", "status", "handler"})},
        "http_request_size_bytes": {frozenset({"handler"})},
        "http_response_size_bytes": {frozenset({"handler"})},
        "http_request_duration_highr_seconds": {frozenset()},
        "http_request_duration_seconds": {frozenset({"method", "handler"})},
    }
    handlers = handler_values(text)
    assert {"/tokenize", "/v1/completions/render", "none"} <= handlers  # unknown path: "none"
    assert "/health" not in handlers  # vLLM's Instrumentator excludes its probes
    assert 'http_requests_total{handler="/v1/completions/render",method="POST",status="4xx"}' in text


async def test_4xx_reason_logged_at_info_with_request_id(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="render_service.http.errors"):
        await exercise(tiny_app())
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("req-42" in line and "400" in line and "prompt is missing" in line for line in lines), lines
    assert any("/nowhere" in line and "404" in line for line in lines), lines


def test_non_default_settings_lists_changes_and_masks_secrets() -> None:
    config = ServiceConfig(model="/m", workers=3, api_key="sekret", stream_state_secret="x" * 32,
                           reasoning_parser="qwen3")
    changed = non_default_settings(config.replace(limits=config.limits.__class__(max_tools=7)))
    assert changed == {"model": "/m", "workers": 3, "api_key": "<set>", "stream_state_secret": "<set>",
                       "reasoning_parser": "qwen3", "max_tools": 7}
    assert non_default_settings(ServiceConfig()) == {}


def test_health_polls_quiet_changes_logged(caplog: pytest.LogCaptureFixture) -> None:
    from render_service.gateway.pool import Engine, EnginePool
    from render_service.gateway.routing import make_policy

    engine = Engine(url="http://e:1", pool="collocated", client=None)  # type: ignore[arg-type]
    pool = EnginePool("collocated", [engine], make_policy("round_robin", 16), block_size=16, failure_threshold=1)
    with caplog.at_level(logging.DEBUG, logger="render_service.gateway.pool"):
        for ok in (True, True, True, False, False, True, True):
            pool.observe_health(engine, ok)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "out of rotation" in messages[0] and "back in rotation" in messages[1]
    root = logging.getLogger()
    old = root.level, logging.getLogger("httpx").level
    try:
        root.setLevel(logging.INFO)
        quiet_http_client_logs()  # httpx would log every GET /health poll at INFO
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(old[0])
        logging.getLogger("httpx").setLevel(old[1])


def test_grafana_dashboard_queries_only_metrics_we_expose() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exposed = {sample.name for metric in REGISTRY.collect() for sample in metric.samples}
    exposed |= {metric.name + suffix for metric in REGISTRY.collect()
                for suffix in ("", "_total", "_bucket", "_sum", "_count")}
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    for expr in exprs:
        for name in re.findall(r"\b((?:http|render_service)_[a-z_]+)\b", expr):
            assert name in exposed, (name, expr)
    assert "render-service" in (DOCS / "prometheus.yml").read_text()


def test_startup_summary_names_model_parsers_context_and_backend(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from render_service.http.startup_log import log_startup_summary

    bundle = SimpleNamespace(model="/models/gpt-oss", served_model_names=("openai/gpt-oss-20b",),
                             model_type="gpt_oss", max_model_len=131072,
                             encoder=SimpleNamespace(backend_name="fastokens"))
    config = ServiceConfig(model="/models/gpt-oss", workers=2, port=9000)
    with caplog.at_level(logging.INFO, logger="render_service"):
        log_startup_summary("serve", config, bundle)  # type: ignore[arg-type]
    summary, non_default = (r.getMessage() for r in caplog.records)
    for fact in ("/models/gpt-oss", "openai/gpt-oss-20b", "131072", "fastokens", "openai_gptoss",
                 "2 worker", ":9000"):
        assert fact in summary, (fact, summary)
    assert non_default == "non-default args: {'model': '/models/gpt-oss', 'port': 9000, 'workers': 2}"


def test_model_config_reads_params_json_without_mistral_mode_and_warns_with_neither(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 20 item 3: a Mistral folder (params.json, no config.json) gets its context length
    derived whatever --tokenizer-mode, as vLLM's config_format auto; a folder with neither file
    (vLLM refuses it) starts with a warning naming both files."""
    from render_service.model import _derive_max_model_len, _model_config

    (tmp_path / "params.json").write_text(json.dumps({"dim": 64, "max_seq_len": 8192}))
    assert _derive_max_model_len(_model_config(tmp_path)) == 8192
    empty = tmp_path / "empty"
    empty.mkdir()
    with caplog.at_level(logging.WARNING, logger="render_service.model"):
        assert _model_config(empty) == {}
    assert "config.json" in caplog.text and "params.json" in caplog.text


async def test_enable_log_requests_logs_request_at_info_and_body_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    app = FastAPI()

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, int]:
        return {"count": len(await request.body())}

    wrapped = ServiceMiddleware(app, api_key=None, max_body_bytes=1000, max_concurrent=10,
                                known_paths=frozenset({"/tokenize"}), log_requests=True, max_log_len=12)
    with caplog.at_level(logging.DEBUG, logger="render_service.requests"):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=wrapped), base_url="http://t") as client:
            await client.post("/tokenize", json={"prompt": "a long prompt here"}, headers={"X-Request-Id": "r7"})
            await client.get("/health")  # probes are not logged
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages == [(logging.INFO, "Received request r7: POST /tokenize"),
                        (logging.DEBUG, 'Request r7 JSON body: {"prompt":"a')]


def test_lean_log_records_drop_only_fields_no_server_format_shows() -> None:
    """`serve` and `gateway` skip the caller/thread/process fields of every LogRecord
    (startup_log.lean_log_records): no format those processes log with may show one."""
    from uvicorn.config import LOGGING_CONFIG

    from render_service.cli import LOG_FORMAT
    from render_service.http.startup_log import LEAN_RECORD_FIELDS

    formats = [LOG_FORMAT, *(f["fmt"] for f in LOGGING_CONFIG["formatters"].values())]
    assert len(formats) == 3
    for fmt in formats:
        assert not [name for name in LEAN_RECORD_FIELDS if f"%({name})" in fmt], fmt
