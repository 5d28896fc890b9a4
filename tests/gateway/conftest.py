"""Gateway unit-test fixtures: the real gateway app over ScriptedEngine fakes and FakeCodec."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.config import GatewayConfig, HealthSettings, Timeouts
from render_service.gateway.gateway import Gateway
from render_service.gateway.testing import ScriptedEngine

from .gateway_fakes import FakeCodec

FAST_TIMEOUTS = Timeouts(connect_s=0.5, prefill_s=0.5, first_token_s=0.5, inter_token_s=0.5,
                         request_s=1.0)


@dataclass
class Harness:
    client: httpx.AsyncClient
    gateway: Gateway
    engines: dict[str, ScriptedEngine]
    app: object

    def engine(self, url: str) -> ScriptedEngine:
        return self.engines[url]

    async def settle(self) -> None:
        """Wait for background aborts, so tests can assert on them."""
        await self.gateway.aborter.drain()


def fake_engines(*urls: str, **kwargs: object) -> dict[str, ScriptedEngine]:
    return {url: ScriptedEngine(url, **kwargs) for url in urls}  # type: ignore[arg-type]


@asynccontextmanager
async def running_gateway(engines: dict[str, ScriptedEngine], **config: object
                          ) -> AsyncIterator[Harness]:
    options: dict[str, object] = dict(timeouts=FAST_TIMEOUTS, health=HealthSettings(interval_s=60))
    options.update(config)
    if "prefill" not in options and "engines" not in options:
        options["engines"] = tuple(engines)
    gateway_config = GatewayConfig(**options)  # type: ignore[arg-type]
    app = create_gateway_app(ServiceConfig(), gateway_config, codec=FakeCodec(),
                             client_factory=engines.__getitem__)
    gateway: Gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            yield Harness(client, gateway, engines, app)
        await gateway.aborter.drain()


@pytest.fixture
def engines() -> dict[str, ScriptedEngine]:
    return fake_engines("http://e0", "http://e1")


# -- end-to-end (real engines) ------------------------------------------------------------------
from tests.harness.fixtures import engine_fleet, pd_engines, tiny_model_dir, tokens_engine  # noqa: E402,F401

from .e2e_support import Scripts, service_config  # noqa: E402


@pytest.fixture(scope="session")
def e2e_config(tiny_model_dir):  # type: ignore[no-untyped-def]
    return service_config(tiny_model_dir)


@pytest.fixture(scope="session")
def e2e_codec(e2e_config):  # type: ignore[no-untyped-def]
    from render_service.gateway.codec import InProcessCodec

    return InProcessCodec(e2e_config)


@pytest.fixture(scope="session")
def scripts(tiny_model_dir):  # type: ignore[no-untyped-def]
    return Scripts(tiny_model_dir)
