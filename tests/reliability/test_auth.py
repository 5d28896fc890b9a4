"""`--api-key` over the real app: every route in the route table is protected but the probes.

The routes are read from the app itself (not from a list in this file), so a route added
later is checked automatically: it must answer 401 without the key unless it is one of the
open probe paths, and adding a new open path fails `test_only_probes_are_open`.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

import httpx
import pytest
from starlette.routing import Mount, Route, WebSocketRoute

import render_service.http.middleware as middleware_module

API_KEY = "s3cr3t-key-for-tests"
OPEN = {"/health", "/metrics", "/ping"}
BODY_LIMIT = 64 * 1024
UNAUTHORIZED = {"error": "Unauthorized"}  # vLLM's 401 body (not the ErrorResponse shape)


@pytest.fixture(scope="module")
def app(make_app):  # noqa: ANN001, ANN201
    return make_app(api_key=API_KEY, limits={"max_body_bytes": BODY_LIMIT})


@pytest.fixture(scope="module")
def client(app, serve) -> Iterator[httpx.Client]:  # noqa: ANN001
    server = serve(app)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def _route_requests(app) -> list[tuple[str, str]]:  # noqa: ANN001
    """(method, path) for every HTTP route of the app, HEAD/GET/POST/... as declared."""
    pairs = []
    for route in app.routes:
        if isinstance(route, Route):
            path = route.path.replace("{", "").replace("}", "")  # a concrete path for templates
            pairs += [(method, path) for method in sorted(route.methods or {"GET"})]
        elif isinstance(route, Mount):
            pairs.append(("GET", route.path.rstrip("/") + "/anything"))
        else:
            assert isinstance(route, WebSocketRoute), f"unexpected route type {type(route)}"
    assert len(pairs) >= 12
    return pairs


def _body_for(method: str) -> dict:
    return {"json": {}} if method in ("POST", "PUT", "PATCH") else {}


def test_every_protected_route_refuses_requests_without_the_key(app, client) -> None:  # noqa: ANN001
    """No header, a wrong key, a lowercase scheme, a key prefix or suffix: 401 everywhere."""
    wrong_headers = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"bearer {API_KEY}"},
        {"Authorization": API_KEY},
        {"Authorization": f"Bearer {API_KEY[:-1]}"},
        {"Authorization": f"Bearer {API_KEY}x"},
        {"Authorization": f"Bearer  {API_KEY}"},
        {"X-Api-Key": API_KEY},
    ]
    checked = 0
    for method, path in _route_requests(app):
        if path in OPEN:
            continue
        for headers in wrong_headers:
            response = client.request(method, path, headers=headers, **_body_for(method))
            assert response.status_code == 401, (method, path, headers, response.status_code)
            if method != "HEAD":
                assert response.json() == UNAUTHORIZED
            checked += 1
    assert checked >= 9 * len(wrong_headers)


def test_every_protected_route_accepts_the_key(app, client) -> None:  # noqa: ANN001
    """With `Authorization: Bearer <key>` the route itself answers (not a 401)."""
    for method, path in _route_requests(app):
        response = client.request(method, path, headers={"Authorization": f"Bearer {API_KEY}"}, **_body_for(method))
        assert response.status_code != 401, (method, path)
        assert response.status_code < 500, (method, path, response.text[:300])


def test_only_probes_are_open(app, client) -> None:  # noqa: ANN001
    """Exactly /health, /metrics and /ping answer without the key (liveness probes, scrapes)."""
    open_now = set()
    for method, path in _route_requests(app):
        if client.request(method, path, **_body_for(method)).status_code != 401:
            open_now.add(path)
    assert open_now == OPEN
    assert middleware_module.OPEN_PATHS == OPEN


def test_render_with_key_works_and_without_is_refused(client) -> None:  # noqa: ANN001
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/chat/completions/render", json=body).status_code == 401
    ok = client.post("/v1/chat/completions/render", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    assert ok.status_code == 200 and ok.json()["token_ids"]


def test_unknown_paths_and_options_do_not_leak_past_auth(client) -> None:  # noqa: ANN001
    """Unknown paths are 401 before routing (no route enumeration); OPTIONS never reaches a
    handler (no route declares it), so skipping auth for CORS preflights exposes nothing."""
    for path in ("/nope", "/v1/models/", "/v1//models", "/health/x", "/admin"):
        assert client.get(path).status_code == 401, path
    for path in ("/v1/chat/completions/render", "/v1/models", "/tokenize"):
        response = client.options(path)
        assert response.status_code == 405, (path, response.status_code)


def test_oversized_unauthenticated_body_is_refused_as_401(client) -> None:  # noqa: ANN001
    """Auth is checked before the body limit or any body reading."""
    body = b"x" * (BODY_LIMIT + 1)
    response = client.post("/tokenize", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 401
    authorized = {"content-type": "application/json", "Authorization": f"Bearer {API_KEY}"}
    assert client.post("/tokenize", content=body, headers=authorized).status_code == 413


def test_key_comparison_is_constant_time(client, monkeypatch) -> None:  # noqa: ANN001
    """The header is compared with hmac.compare_digest (timing-safe), whole header vs whole key."""
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):  # noqa: ANN001, ANN202
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(middleware_module.hmac, "compare_digest", spy)
    client.get("/v1/models", headers={"Authorization": "Bearer guess"})
    client.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    assert seen == [(b"Bearer guess", f"Bearer {API_KEY}".encode()), (f"Bearer {API_KEY}".encode(),) * 2]


def test_openapi_document_declares_bearer_auth(client) -> None:  # noqa: ANN001
    """With --api-key the document says so: bearer scheme on every protected operation, 401 body."""
    doc = client.get("/openapi.json", headers={"Authorization": f"Bearer {API_KEY}"}).json()
    assert doc["components"]["securitySchemes"] == {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    for path, methods in doc["paths"].items():
        for operation in methods.values():
            if path in OPEN:
                assert "security" not in operation and "401" not in operation["responses"], path
            else:
                assert operation["security"] == [{"bearerAuth": []}], path
                assert "401" in operation["responses"], path
