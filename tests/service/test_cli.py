"""`render-service serve`: flags -> config, clear start-up errors, and real servers (1 and 2 workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from render_service.cli import build_parser, config_from_args, main
from tests.harness.ports import free_port

CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return config_from_args(build_parser().parse_args(["serve", *argv]))


def exit_status(argv: list[str]) -> int:
    """main's status: argparse refuses unparsable values by exiting, range checks by returning."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


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
        (["--reasoning-effort-map", '{"lowest": "low"}'], "--reasoning-effort-map has unknown efforts ['lowest']"),
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


@pytest.mark.parametrize("source", ["file", "env"])
def test_short_stream_state_secret_fails_at_start(
    source: str, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both ways of giving the shared secret enforce the same 16-character minimum."""
    argv = ["serve"]
    if source == "file":
        secret_file = tmp_path / "secret"
        secret_file.write_text("short\n")
        argv += ["--stream-state-secret-file", str(secret_file)]
    else:
        monkeypatch.setenv("RENDER_SERVICE_STREAM_STATE_SECRET", "short")
    assert main(argv) == 2
    assert "the secret must be at least 16 characters" in capsys.readouterr().err


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real `render-service serve` process (argv from the test's param), stopped by PID."""
    port = free_port()
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
    from render_service.config import config_from_json, config_to_json

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


# -- vLLM's flag value syntax (issue 2 review, item 4) ---------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("1m", 1_000_000), ("4096", 4096),
     ("auto", None), ("AUTO", None), ("-1", None)],
)  # fmt: skip
def test_max_model_len_takes_vllms_human_readable_forms(value: str, expected: int | None) -> None:
    """k/m/g/t are x1000, K/M/G/T x1024; -1 and auto mean "the model's own" (None)."""
    assert parse("--max-model-len", value).max_model_len == expected


@pytest.mark.parametrize("value", ["0", "-5", "1.5K", "abc", "1.5"])
def test_max_model_len_refuses_what_vllm_refuses(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["serve", "--max-model-len", value]) == 2
    assert "--max-model-len" in capsys.readouterr().err


def test_max_model_len_matches_vllms_own_parser() -> None:
    """Our parser and vLLM's human_readable_int_or_auto agree (run in the ref venv)."""
    from ..render.ref_server import ref_venv

    values = ["32k", "32K", "25.6k", "2M", "1g", "auto", "-1", "4096", " 8k "]
    script = ("import json, sys; from vllm.utils.argparse_utils import human_readable_int_or_auto as f; "
              "print(json.dumps([f(v) for v in json.load(sys.stdin)]))")  # fmt: skip
    result = subprocess.run([str(ref_venv() / "bin" / "python"), "-c", script], input=json.dumps(values),
                            capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    ours = [build_parser().parse_args(["serve", "--max-model-len", v]).max_model_len for v in values]
    assert ours == theirs


def test_several_api_keys_like_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """--api-key k1 k2 keeps both; the variable holds one key or several, space-separated."""
    assert parse("--api-key", "k1", "k2").api_key == ("k1", "k2")
    assert parse().api_key is None
    monkeypatch.setenv("RENDER_SERVICE_API_KEY", "env1 env2")
    assert parse().api_key == ("env1", "env2")
    assert parse("--api-key", "flag").api_key == ("flag",)


def test_reasoning_effort_map_checks_only_the_keys() -> None:
    """vLLM validates the efforts mapped from; the values are whatever the template knows."""
    assert parse("--reasoning-effort-map", '{"high": "deep"}').reasoning_effort_map == {"high": "deep"}


@pytest.mark.parametrize(
    "raw, message",
    [('{"deep": "high"}', "unknown efforts ['deep']"), ('{"high": 1}', "mapping reasoning efforts to strings")],
)
def test_reasoning_effort_map_refuses_unknown_efforts(raw: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--reasoning-effort-map", raw]) == 2
    assert message in capsys.readouterr().err


# -- bad values fail at start, exit 2, no traceback (item 5) ---------------------------------


@pytest.mark.parametrize(
    "variable, value, message",
    [
        ("RENDER_SERVICE_WORKERS", "two", "argument --workers: expected an integer, got 'two' (from $RENDER_SERVICE_WORKERS)"),
        ("RENDER_SERVICE_PORT", "abc", "argument --port: expected an integer, got 'abc' (from $RENDER_SERVICE_PORT)"),
        ("RENDER_SERVICE_RENDER_TIMEOUT", "soon", "argument --render-timeout: expected a number"),
        ("RENDER_SERVICE_MAX_MODEL_LEN", "lots", "argument --max-model-len: expected an integer"),
        ("RENDER_SERVICE_MM_PROCESSOR_CACHE_GB", "x", "argument --mm-processor-cache-gb: expected a number"),
        ("RENDER_SERVICE_ENABLE_AUTO_TOOL_CHOICE", "ture",
         ("$RENDER_SERVICE_ENABLE_AUTO_TOOL_CHOICE='ture' is not a boolean; accepted values: 1, true, yes, on (on), "
          "0, false, no, off (off)")),
        ("RENDER_SERVICE_TRUST_REMOTE_CODE", "maybe", "$RENDER_SERVICE_TRUST_REMOTE_CODE='maybe' is not a boolean"),
        ("RENDER_SERVICE_PORT", "99999", "--port must be between 1 and 65535, got 99999"),
        ("RENDER_SERVICE_MAX_BODY_BYTES", "-5", "--max-body-bytes must be an integer >= 1, got -5"),
    ],
)  # fmt: skip
def test_bad_environment_values_fail_at_start_in_a_real_process(variable: str, value: str, message: str) -> None:
    """The real console entry point: exit status 2, one clear line, never a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RENDER_SERVICE_")}
    result = subprocess.run([sys.executable, "-m", "render_service.cli", "serve"], env={**env, variable: value},
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("value, expected", [("1", True), ("TRUE", True), ("on", True), ("no", False), ("0", False)])
def test_boolean_variables_accept_the_usual_spellings(value: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RENDER_SERVICE_TRUST_REQUEST_CHAT_TEMPLATE", value)
    assert parse().trust_request_chat_template is expected


def test_a_flag_wins_over_a_bad_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable is only read when the flag is absent, so a flag can repair a bad one."""
    monkeypatch.setenv("RENDER_SERVICE_WORKERS", "two")
    assert parse("--workers", "3").workers == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--port", "99999"], "--port must be between 1 and 65535, got 99999"),
        (["--port", "0"], "--port must be between 1 and 65535, got 0"),
        (["--max-body-bytes", "-5"], "--max-body-bytes must be an integer >= 1, got -5"),
        (["--max-messages", "0"], "--max-messages must be an integer >= 1, got 0"),
        (["--max-tools", "-1"], "--max-tools must be an integer >= 1, got -1"),
        (["--render-timeout", "-1"], "--render-timeout must be a number of seconds > 0, got -1.0"),
        (["--render-timeout", "0"], "--render-timeout must be a number of seconds > 0, got 0.0"),
        (["--render-timeout", "nan"], "--render-timeout must be a number of seconds > 0, got nan"),
        (["--media-fetch-timeout", "inf"], "--media-fetch-timeout must be a number of seconds > 0, got inf"),
        (["--max-concurrent-requests", "0"], "--max-concurrent-requests must be an integer >= 1"),
        (["--max-stream-state-bytes", "0"], "--max-stream-state-bytes must be an integer >= 1"),
        (["--max-template-output-chars", "-1"], "--max-template-output-chars must be an integer >= 1"),
        (["--max-tool-call-chars", "0"], "--max-tool-call-chars must be an integer >= 1"),
        (["--max-image-pixels", "0"], "--max-image-pixels must be an integer >= 1"),
        (["--max-image-bytes", "0"], "--max-image-bytes must be an integer >= 1"),
        (["--max-images", "-1"], "--max-images must be an integer >= 0"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--max-logprobs", "-2"], "--max-logprobs must be >= 0, or -1 for no cap"),
        (["--mm-processor-cache-gb", "-1"], "--mm-processor-cache-gb must be >= 0"),
    ],
)  # fmt: skip
def test_out_of_range_values_fail_at_start(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert f"render-service: error: {message}" in err and "Traceback" not in err


def test_zero_images_and_unlimited_logprobs_are_valid() -> None:
    """vLLM's own meanings: no images per prompt, and no cap on logprobs."""
    assert parse("--max-images", "0").limits.max_images == 0
    assert parse("--max-logprobs", "-1").max_logprobs == -1


def test_limits_are_checked_in_process_too() -> None:
    """The in-process API gets the same checks as the CLI (Limits / ServiceConfig)."""
    from render_service.config import Limits, ServiceConfig
    from render_service.errors import ConfigError

    for bad in ({"max_messages": 0}, {"max_body_bytes": -5}, {"render_timeout_s": -1.0},
                {"max_tools": True}, {"max_messages": "5"}, {"media_fetch_timeout_s": float("nan")}):  # fmt: skip
        with pytest.raises(ConfigError):
            Limits(**bad)
    with pytest.raises(ConfigError, match="--port"):
        ServiceConfig(port=70000)
    assert ServiceConfig(max_model_len=-1).max_model_len is None


# -- one default for CLI and in-process (item 7) ---------------------------------------------


def test_cli_and_in_process_share_the_embedded_default() -> None:
    """`render-service serve` == ServiceConfig.embedded_default() in every field that matters."""
    from render_service.config import ServiceConfig

    cli = parse()
    embedded = ServiceConfig.embedded_default()
    assert (embedded.model, embedded.reasoning_parser, embedded.tool_call_parser, embedded.enable_auto_tool_choice) == (
        None, "qwen3", "hermes", True)  # fmt: skip
    # Only process-level settings (and the key read from a file or the environment) may differ.
    assert cli.replace(stream_state_secret=None) == embedded


@pytest.mark.parametrize(
    "argv, overrides",
    [
        (["--tool-call-parser", "none"], {"tool_call_parser": None}),
        (["--tool-call-parser", "pythonic"], {"tool_call_parser": "pythonic"}),
        (["--tool-call-parser", "pythonic", "--enable-auto-tool-choice"],
         {"tool_call_parser": "pythonic", "enable_auto_tool_choice": True}),
        (["--reasoning-parser", "none"], {"reasoning_parser": None}),
        (["--max-model-len", "8k"], {"max_model_len": 8000}),
    ],
)  # fmt: skip
def test_embedded_default_overrides_mean_what_the_flags_mean(argv: list[str], overrides: dict) -> None:
    from render_service.config import ServiceConfig

    assert parse(*argv).replace(stream_state_secret=None) == ServiceConfig.embedded_default(**overrides)


def test_in_process_embedded_default_renders_like_the_server() -> None:
    """Same parsers on: a tool_choice "auto" request renders (it needs a tool parser)."""
    from render_service.api import Renderer
    from render_service.config import ServiceConfig

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    rendered = Renderer(ServiceConfig.embedded_default()).render_chat({**CHAT, "tools": tools, "tool_choice": "auto"})
    assert rendered["token_ids"][:3] == [151644, 8948, 198]  # <|im_start|>system\n (the tools block)


def test_request_logging_flags_reach_the_config() -> None:
    assert (parse().enable_log_requests, parse().max_log_len) == (False, None)
    config = parse("--enable-log-requests", "--max-log-len", "64")
    assert (config.enable_log_requests, config.max_log_len) == (True, 64)
