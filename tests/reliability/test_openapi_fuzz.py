"""Schema fuzzing of every endpoint from the app's own OpenAPI document (schemathesis).

The document is fetched from the running server (`/openapi.json`), so what is fuzzed is what
clients are told. Each operation gets schema-valid (positive) and schema-violating (negative)
bodies with a fixed seed and a bounded number of examples; every response must

- not be a 5xx, except a documented 501 `NotImplementedError` body (a feature vLLM has and
  this service deliberately does not: a typed refusal, not a failure),
- have a documented status code, content type and body schema,
- arrive within the per-request timeout (a hang fails the test instead of stalling CI).

Budget: about a minute in total on a loaded 2-core machine (see EXAMPLES).
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from render_service.http.app import _GET_ROUTES, _POST_ROUTES


@schemathesis.check
def no_server_error(ctx, response, case) -> bool:  # noqa: ANN001
    """No 5xx other than a typed 501 refusal."""
    if response.status_code < 500:
        return True
    typed_501 = response.status_code == 501 and response.json()["error"]["type"] == "NotImplementedError"
    assert typed_501, f"server error {response.status_code}: {response.text[:500]}"
    return True


CHECKS = [no_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
REQUEST_TIMEOUT_S = 20.0  # one request; a render is milliseconds, so this only trips on a hang
SEED = 20240808
EXAMPLES = {"post": 15, "get": 3}  # per operation and generation mode


@pytest.fixture(scope="module")
def api_schema(default_server):  # noqa: ANN001, ANN201
    return schemathesis.openapi.from_url(default_server.url + "/openapi.json")


def test_every_route_is_in_the_document(api_schema) -> None:  # noqa: ANN001
    """The fuzzed document lists every route of the app (nothing escapes fuzzing)."""
    documented = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    expected = {("POST", p) for p in _POST_ROUTES} | {("GET", p) for p in _GET_ROUTES}
    assert documented == expected


def test_json_routes_document_request_and_error_schemas(default_server) -> None:  # noqa: ANN001
    """Each POST route has a request schema and the OpenAI error body for its error statuses."""
    doc = requests.get(default_server.url + "/openapi.json", timeout=10).json()
    for path in _POST_ROUTES:
        operation = doc["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"], path
        for status in ("400", "404", "413", "503"):
            schema = operation["responses"][status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (path, status)
    assert "securitySchemes" not in doc.get("components", {})  # no --api-key on this server


def _fuzz(api_schema, base_url: str, method: str, path: str, mode: GenerationMode) -> None:  # noqa: ANN001
    operation = api_schema[path][method.upper()]
    session = requests.Session()

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES[method],
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case) -> None:  # noqa: ANN001
        try:
            case.call_and_validate(base_url=base_url, session=session, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)
        except requests.Timeout:
            pytest.fail(f"{method.upper()} {path}: no answer within {REQUEST_TIMEOUT_S} s (hang)")

    run()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("path", _POST_ROUTES)
def test_post_routes_survive_schema_fuzzing(api_schema, default_server, path: str, mode: GenerationMode) -> None:  # noqa: ANN001
    """Valid and invalid bodies: a documented answer (2xx or a typed 4xx), never a 5xx or a hang."""
    _fuzz(api_schema, default_server.url, "post", path, mode)


@pytest.mark.parametrize("path", _GET_ROUTES)
def test_get_routes_survive_schema_fuzzing(api_schema, default_server, path: str) -> None:  # noqa: ANN001
    _fuzz(api_schema, default_server.url, "get", path, GenerationMode.POSITIVE)


def test_server_still_serves_after_fuzzing(default_server) -> None:  # noqa: ANN001
    """After the fuzzing above, a plain render still succeeds on the same worker."""
    body = {"messages": [{"role": "user", "content": "hi"}]}
    response = requests.post(default_server.url + "/v1/chat/completions/render", json=body, timeout=30)
    assert response.status_code == 200
    assert response.json()["token_ids"]
