"""Fixtures for the reliability tests: one model load per session, apps per serving config.

Loading the embedded Qwen3 takes seconds, so one ModelBundle is shared by every app; apps
differ only in serving options (limits, API key, trust flags), which the bundle does not carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from render_service.http.app import create_app  # noqa: E402
from render_service.model import ModelBundle  # noqa: E402

from .reliability_support import ThreadServer, service_config  # noqa: E402


@pytest.fixture(scope="session")
def bundle() -> ModelBundle:
    return ModelBundle.load(service_config())


@pytest.fixture(scope="session")
def make_app(bundle: ModelBundle) -> Callable[..., Any]:
    """make_app(limits={...}, api_key=..., ...) -> a FastAPI app sharing the session's model."""
    cache: dict[str, Any] = {}

    def make(*, limits: dict[str, Any] | None = None, **overrides: Any) -> Any:
        key = repr((sorted((limits or {}).items()), sorted(overrides.items())))
        if key not in cache:
            cache[key] = create_app(service_config(limits=limits, **overrides), bundle=bundle)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def default_server(make_app: Callable[..., Any]) -> Iterator[ThreadServer]:
    """The default app (embedded Qwen3, qwen3 + hermes parsers) over real HTTP."""
    with ThreadServer(make_app()) as server:
        yield server


@pytest.fixture(scope="session")
def serve() -> Iterator[Callable[[Any], ThreadServer]]:
    """serve(app) -> a running ThreadServer, stopped at the end of the session."""
    servers: dict[int, ThreadServer] = {}

    def start(app: Any) -> ThreadServer:
        if id(app) not in servers:
            servers[id(app)] = ThreadServer(app).__enter__()
        return servers[id(app)]

    yield start
    for server in servers.values():
        server.__exit__(None, None, None)
