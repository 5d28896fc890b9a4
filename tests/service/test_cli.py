"""`render-service serve`: flags -> config, clear start-up errors, and real servers (1 and 2 workers)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from render_service.cli import build_parser, config_from_args, main

CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return config_from_args(build_parser().parse_args(["serve", *argv]))


def test_no_model_serves_the_embedded_default_with_its_parsers() -> None:
    """With no MODEL: qwen3 reasoning, hermes tools and auto tool choice are on."""
    config = parse()
    assert config.model is None
    assert (config.reasoning_parser, config.tool_call_parser) == ("qwen3", "hermes")
    assert config.enable_auto_tool_choice


def test_explicit_none_turns_a_default_parser_off() -> None:
    """`--reasoning-parser none` wins over the embedded default."""
    assert parse("--reasoning-parser", "none").reasoning_parser is None


def test_vllm_flag_names_reach_the_config() -> None:
    """The flags of `vllm launch render` populate the one config object."""
    config = parse(
        "/models/x", "--served-model-name", "a", "b", "--max-model-len", "4096",
        "--default-chat-template-kwargs", '{"enable_thinking": false}',
        "--reasoning-effort-map", '{"low": "none"}', "--renderer-num-workers", "3",
        "--exclude-tools-when-tool-choice-none", "--trust-request-chat-template",
        "--reasoning-parser", "deepseek_r1", "--tool-call-parser", "llama3_json",
        "--enable-auto-tool-choice", "--max-body-bytes", "1000",
    )  # fmt: skip
    assert config.model == "/models/x" and config.served_model_name == ("a", "b")
    assert config.max_model_len == 4096 and config.renderer_num_workers == 3
    assert config.default_chat_template_kwargs == {"enable_thinking": False}
    assert config.reasoning_effort_map == {"low": "none"}
    assert config.exclude_tools_when_tool_choice_none and config.trust_request_chat_template
    assert (config.reasoning_parser, config.tool_call_parser) == ("deepseek_r1", "llama3_json")
    assert config.limits.max_body_bytes == 1000


def test_environment_variables_fill_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """RENDER_SERVICE_<FLAG> sets a flag; an empty variable means unset."""
    monkeypatch.setenv("RENDER_SERVICE_RENDERER_NUM_WORKERS", "2")
    monkeypatch.setenv("RENDER_SERVICE_MODEL", "")
    config = parse()
    assert config.renderer_num_workers == 2 and config.model is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--reasoning-parser", "nope"], "--reasoning-parser 'nope' is unknown; choose from"),
        (["--tool-call-parser", "nope"], "--tool-call-parser 'nope' is unknown; choose from"),
        (["--default-chat-template-kwargs", "{bad"], "--default-chat-template-kwargs: not valid JSON"),
        (["--reasoning-effort-map", '{"low": "x"}'], "--reasoning-effort-map"),
        (["--renderer-num-workers", "0"], "--renderer-num-workers must be >= 1"),
        (["/no/such/model/folder"], "/no/such/model/folder"),
    ],
)
def test_bad_flags_fail_at_start_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad flag values exit with status 2 and a message naming the flag, before serving."""
    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real `render-service serve` process (argv from the test's param), stopped by PID."""
    port = _free_port()
    argv = [sys.executable, "-m", "render_service.cli", "serve", "--port", str(port), *request.param]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("server did not become healthy")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("server", [[]], indirect=True)
def test_serve_with_no_arguments_renders_and_reports_metrics(server: str) -> None:
    """The first README command: no model, no network; render works and /metrics counts it."""
    rendered = httpx.post(f"{server}/v1/chat/completions/render", json=CHAT, timeout=60).json()
    assert rendered["request_id"].startswith("chatcmpl-")
    assert rendered["token_ids"][:3] == [151644, 872, 198]  # <|im_start|>user\n
    assert httpx.get(f"{server}/v1/models").json()["data"][0]["id"] == "Qwen/Qwen3-8B"
    metrics = httpx.get(f"{server}/metrics").text
    assert 'render_service_requests_total{endpoint="/v1/chat/completions/render",status="200"} 1.0' in metrics
    assert f"render_service_prompt_tokens_rendered_total {float(len(rendered['token_ids']))}" in metrics
    assert 'render_service_request_duration_seconds_bucket{endpoint="/v1/chat/completions/render"' in metrics


@pytest.mark.parametrize("server", [["--workers", "2"]], indirect=True)
def test_two_workers_share_the_port_and_aggregate_metrics(server: str) -> None:
    """--workers 2: requests are served by both processes and /metrics sums them."""
    with httpx.Client(timeout=60) as client:
        for _ in range(8):
            assert client.post(f"{server}/v1/chat/completions/render", json=CHAT).status_code == 200
        metrics = client.get(f"{server}/metrics").text
    line = next(
        row for row in metrics.splitlines()
        if row.startswith('render_service_requests_total{endpoint="/v1/chat/completions/render",status="200"}')
    )  # fmt: skip
    assert float(line.split()[-1]) == 8.0


def test_multimodal_flags_reach_the_config_and_survive_the_worker_handoff() -> None:
    """Image flags populate the config; the JSON handed to worker processes round-trips."""
    from render_service.config_io import config_from_json, config_to_json

    config = parse(
        "--allowed-media-domains", "images.example", "*.cdn.example",
        "--allowed-local-media-path", "/srv/media",
        "--mm-hasher-algorithm", "sha256",
        "--mm-processor-cache-gb", "0.5",
        "--interleave-mm-strings",
        "--dtype", "float16",
        "--max-image-pixels", "1000000",
        "--max-image-bytes", "2048",
        "--media-fetch-timeout", "2.5",
        "--limit-mm-per-prompt", '{"image": 3}',
    )  # fmt: skip
    assert config.allowed_media_domains == ("images.example", "*.cdn.example")
    assert (config.allowed_local_media_path, config.mm_hasher_algorithm) == ("/srv/media", "sha256")
    assert (config.mm_processor_cache_gb, config.interleave_mm_strings, config.dtype) == (0.5, True, "float16")
    limits = config.limits
    assert (limits.max_images, limits.max_image_pixels, limits.max_image_bytes) == (3, 1_000_000, 2048)
    assert limits.media_fetch_timeout_s == 2.5
    assert config_from_json(config_to_json(config)) == config
    assert parse("--max-images", "5").limits.max_images == 5


def test_bad_image_limit_json_is_a_clear_start_up_error() -> None:
    from render_service.errors import ConfigError

    with pytest.raises(ConfigError, match="--limit-mm-per-prompt"):
        parse("--limit-mm-per-prompt", '{"image": -1}')
