"""Fixtures for derender tests: one embedded-Qwen3 Derenderer per server configuration.

Loading the tokenizer takes seconds, so the ModelBundle is loaded once per session and every
configuration shares it (a ModelBundle is immutable; only parser flags and secrets differ).
"""

from __future__ import annotations


import pytest


from render_service.config import ServiceConfig  # noqa: E402
from render_service.derender_api import Derenderer  # noqa: E402
from render_service.model import ModelBundle  # noqa: E402

SECRET = "test-secret"
PARSER_FLAGS = {
    "reasoning_parser": "qwen3",
    "tool_call_parser": "hermes",
    "enable_auto_tool_choice": True,
}


class _BundleRenderer:
    """The part of `render_service.api.Renderer` Derenderer reads."""

    def __init__(self, bundle: ModelBundle) -> None:
        self.bundle = bundle


@pytest.fixture(scope="session")
def bundle() -> ModelBundle:
    return ModelBundle.load(ServiceConfig(stream_state_secret=SECRET))


@pytest.fixture(scope="session")
def make_derenderer(bundle):  # noqa: ANN001, ANN201
    cache: dict[tuple, Derenderer] = {}

    def make(**overrides) -> Derenderer:  # noqa: ANN003
        key = tuple(sorted((k, repr(v)) for k, v in overrides.items()))
        if key not in cache:
            config = ServiceConfig(stream_state_secret=SECRET, **overrides)
            cache[key] = Derenderer(config, _BundleRenderer(bundle))
        return cache[key]

    return make


@pytest.fixture(scope="session")
def plain(make_derenderer) -> Derenderer:  # noqa: ANN001
    return make_derenderer()


@pytest.fixture(scope="session")
def tok(bundle):  # noqa: ANN001, ANN201
    return bundle.hf_tokenizer
