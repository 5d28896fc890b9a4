"""HTTP against HTTP: `render-service serve` and `vllm launch render` answer the same bytes.

One reference server (`vllm launch render` from the vLLM 0.33 ref venv, RS_VLLM_REF_VENV)
and our app on real uvicorn (127.0.0.1, random port) load the same weightless Qwen3 folder
with the same flags. Every request goes to both over HTTP; status and JSON body must be
equal. What is compared: malformed bodies on every POST route (bad JSON, wrong JSON types,
empty bodies, content types), /tokenize's union errors, /detokenize on ids the tokenizer does
not know, GET /version, /v1/models, /health, and the status of unknown paths and methods.

Deliberate differences, asserted as such:
- unknown paths / wrong methods, and bodies the JSON parser cannot even read (bad UTF-8, too
  deep): vLLM answers FastAPI's bare `{"detail": ...}`; we answer an OpenAI error object with
  the same status and that text as message (the product answers OpenAI-style errors everywhere);
- /version: vLLM's `{"version": "0.33.0"}` plus our own `render_service_version` key.

The ref venv is required: without it the fixture raises and these tests fail (CI installs it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from render_service import __version__
from render_service.config import ServiceConfig
from render_service.http.app import create_app

from ..reliability.reliability_support import ThreadServer
from ..render.ref_server import PARSER_FLAGS, RefRenderServer, build_render_model_dir

pytestmark = pytest.mark.vllm

SERVED = "Qwen/Qwen3-8B"
POST_ROUTES = (
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/tokenize",
    "/detokenize",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
)
JSON = "application/json"
# (name, raw body, content-type header or None): input malformed before any field is read.
MALFORMED = (
    ("bad_json", b"{bad", JSON),
    ("bad_json_inside", b'{"messages": [}', JSON),
    ("trailing_data", b"{} x", JSON),
    ("whitespace_only", b"   ", JSON),
    ("empty_body", b"", JSON),
    ("json_null", b"null", JSON),
    ("json_list", b"[1,2]", JSON),
    ("json_string", b'"x"', JSON),
    ("json_number", b"5", JSON),
    ("json_float", b"1.5", JSON),
    ("json_true", b"true", JSON),
    ("text_plain", b'{"a": 1}', "text/plain"),
    ("text_plain_empty", b"", "text/plain"),
    ("no_content_type", b'{"a": 1}', None),
    ("no_content_type_bad_json", b"{bad", None),
    ("empty_content_type", b"{}", ""),
    ("vendor_json", b"[1]", "application/vnd.api+json"),
    ("vendor_json_bad", b"{bad", "application/vnd.api+json"),
    ("space_before_params", b"[1]", "application/json ; charset=utf-8"),
    ("space_before_params_bad", b"{bad", "application/json ; charset=utf-8"),
    ("upper_case_type", b"[1]", "Application/JSON"),
    ("charset_param", b"[1]", "application/json; charset=utf-8"),
)
# Readable JSON that only vLLM's (stdlib) parser accepts, to bodies every route refuses.
LENIENT_JSON = (
    ("nan_in_list", b"[NaN]", JSON),
    ("big_int_in_list", b"[123456789012345678901234567890]", JSON),
    ("utf16_list", '["é"]'.encode("utf-16"), JSON),
)
# Bodies FastAPI fails to parse at all (vLLM: {"detail": ...}).
UNPARSABLE = (
    ("bad_utf8", b'{"a": "\xff"}', JSON),
    ("too_deep", b"[" * 5000 + b"]" * 5000, JSON),
)
TOKENIZE_BODIES = (
    {},
    {"a": float("nan")},
    {"messages": 5},
    {"prompt": 5},
    {"prompt": 1e300},
    {"prompt": "a", "messages": 5},
    {"prompt": "a", "messages": [{"role": "user", "content": "hi"}]},
    {"prompt": "hello", "model": "nope"},
)
DETOKENIZE_BODIES = (
    {"tokens": [99_999_999]},  # out of vocabulary: decodes to ""
    {"tokens": [9, 99_999_999, 10]},  # unknown ids are skipped, known ones decoded
    {"tokens": [151_669, 151_935]},  # past the added tokens, inside config.json's vocab_size
    {"tokens": [151_643, 151_645]},  # special tokens are kept
    {"tokens": [2**32]},  # does not fit the tokenizer's u32
    {"tokens": [2**63 - 1]},
    {"tokens": [2**63]},
    {"tokens": [-1]},
    {"tokens": [9, -3]},
    {"tokens": [1.0, True]},
    {"tokens": [1.5]},
    {"tokens": ["a"]},
    {"tokens": []},
    {"tokens": [9], "model": "nope"},
    {},
)

# Bodies neither derender form accepts: vLLM lists the errors of both union members.
DERENDER_BODIES = (
    {},
    {"stream": True},
    {"stream": False},
    {"stream": "yes"},
    {"generate_response": 5},
    {"generate_response": {}},
    {"generate_response": {"choices": 5}},
    {"stream": True, "generate_chunk": 5},
    {"stream": True, "generate_chunk": {"choices": [{"index": "x"}]}},
    {"generate_responses": 5},
    {"stream": True, "generate_chunk": {}, "generate_responses": [5]},
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_render_model_dir(tmp_path_factory.mktemp("http-diff-model"))


@pytest.fixture(scope="module")
def ref(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    server = RefRenderServer(model_dir, PARSER_FLAGS, tmp_path_factory.mktemp("http-diff-logs"))
    with server, httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def ours(model_dir: Path) -> Iterator[httpx.Client]:
    config = ServiceConfig(
        model=str(model_dir),
        served_model_name=(SERVED,),
        reasoning_parser="qwen3",
        tool_call_parser="hermes",
        enable_auto_tool_choice=True,
    )
    with ThreadServer(create_app(config)) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def post(client: httpx.Client, route: str, raw: bytes, content_type: str | None) -> httpx.Response:
    headers = {} if content_type is None else {"content-type": content_type}
    return client.post(route, content=raw, headers=headers)


def both(ref: httpx.Client, ours: httpx.Client, route: str, raw: bytes, content_type: str | None):
    return post(ref, route, raw, content_type), post(ours, route, raw, content_type)


def mismatches(ref: httpx.Client, ours: httpx.Client, cases: list[tuple[str, str, bytes, str | None]]) -> list[str]:
    """Every (route, case) whose status or JSON body differs, described."""
    found = []
    for route, name, raw, content_type in cases:
        expected, got = both(ref, ours, route, raw, content_type)
        if (expected.status_code, expected.json()) != (got.status_code, got.json()):
            found.append(f"{route} {name}:\n  vllm {expected.status_code} {expected.text[:600]}\n"
                         f"  ours {got.status_code} {got.text[:600]}")  # fmt: skip
    return found


def test_malformed_bodies_get_vllms_exact_error_on_every_post_route(ref: httpx.Client, ours: httpx.Client) -> None:
    cases = [(route, *case) for route in POST_ROUTES for case in MALFORMED + LENIENT_JSON]
    assert mismatches(ref, ours, cases) == []


def test_tokenize_lists_the_errors_of_both_request_forms(ref: httpx.Client, ours: httpx.Client) -> None:
    """vLLM's TokenizeRequest is a union: a body neither form accepts lists both forms' errors."""
    cases = [("/tokenize", json.dumps(body), body_bytes(body), JSON) for body in TOKENIZE_BODIES]
    assert mismatches(ref, ours, cases) == []
    expected, _ = both(ref, ours, "/tokenize", b"{}", JSON)
    assert expected.json()["error"]["message"].startswith("2 validation errors:")  # the case the issue names


def test_derender_lists_the_errors_of_both_request_forms(ref: httpx.Client, ours: httpx.Client) -> None:
    """vLLM's derender bodies are batch | stream unions: errors of both forms, member-named."""
    routes = ("/v1/chat/completions/derender", "/v1/completions/derender")
    cases = [(route, json.dumps(body), body_bytes(body), JSON) for route in routes for body in DERENDER_BODIES]
    assert mismatches(ref, ours, cases) == []
    expected, _ = both(ref, ours, routes[0], b"{}", JSON)
    assert expected.status_code == 400 and expected.json()["error"]["type"] == "Bad Request"
    assert "body.DerenderChatRequest.generate_response" in expected.json()["error"]["message"]


def test_detokenize_unknown_ids_like_vllm(ref: httpx.Client, ours: httpx.Client) -> None:
    cases = [("/detokenize", json.dumps(body), body_bytes(body), JSON) for body in DETOKENIZE_BODIES]
    assert mismatches(ref, ours, cases) == []
    expected, _ = both(ref, ours, "/detokenize", b'{"tokens": [99999999]}', JSON)
    assert (expected.status_code, expected.json()) == (200, {"prompt": ""})


def test_unparsable_bodies_same_status_and_text_in_an_openai_error(ref: httpx.Client, ours: httpx.Client) -> None:
    for route in POST_ROUTES:
        for name, raw, content_type in UNPARSABLE:
            expected, got = both(ref, ours, route, raw, content_type)
            detail = expected.json()["detail"]
            assert got.status_code == expected.status_code == 400, (route, name)
            assert got.json() == {"error": {"message": detail, "type": "Bad Request", "param": None, "code": 400}}


def test_version_speaks_the_vllm_api_version(ref: httpx.Client, ours: httpx.Client) -> None:
    expected, got = ref.get("/version"), ours.get("/version")
    assert got.status_code == expected.status_code == 200
    assert got.json() == {**expected.json(), "render_service_version": __version__}
    assert got.json()["version"] == "0.33.0"


def test_models_and_health(ref: httpx.Client, ours: httpx.Client) -> None:
    expected, got = ref.get("/v1/models"), ours.get("/v1/models")
    assert got.status_code == expected.status_code == 200
    assert without_volatile(got.json()) == without_volatile(expected.json())
    expected, got = ref.get("/health"), ours.get("/health")
    assert (got.status_code, got.content) == (expected.status_code, expected.content) == (200, b"")


@pytest.mark.parametrize(
    "method, path",
    [("GET", "/nope"), ("POST", "/nope"), ("GET", "/v1/nope"), ("GET", "/tokenize"), ("PUT", "/detokenize"),
     ("GET", "/v1/chat/completions/render"), ("DELETE", "/v1/completions/derender"), ("POST", "/version"),
     ("POST", "/health"), ("HEAD", "/health"), ("DELETE", "/v1/models"), ("POST", "/ping"), ("POST", "/metrics"),
     ("PUT", "/metrics"), ("GET", "/metrics/")],
)  # fmt: skip
def test_unknown_paths_and_methods_get_vllms_status(ref: httpx.Client, ours: httpx.Client, method: str, path: str) -> None:
    """Same status as vLLM; where vLLM answers FastAPI's {"detail": ...}, ours is an OpenAI error."""
    expected, got = ref.request(method, path), ours.request(method, path)
    assert got.status_code == expected.status_code
    if expected.status_code >= 400 and method != "HEAD":
        detail = expected.json()["detail"]
        code = expected.status_code
        assert got.json() == {"error": {"message": detail, "type": detail, "param": None, "code": code}}


def body_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()  # NaN as the bare NaN token, as a Python client sends it


def without_volatile(models: dict[str, Any]) -> dict[str, Any]:
    """A ModelList without its timestamps and random permission ids."""
    data = []
    for card in models["data"]:
        card = {k: v for k, v in card.items() if k != "created"}
        card["permission"] = [{k: v for k, v in p.items() if k not in ("id", "created")} for p in card["permission"]]
        data.append(card)
    return {**models, "data": data}
