"""Render's top-level `render_fingerprint` is what derender checks, end to end in-process."""

from __future__ import annotations

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.derender_api import Derenderer
from render_service.errors import ConfigMismatchError

PARSERS = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes", "enable_auto_tool_choice": True}


@pytest.fixture(scope="module")
def qwen_renderer() -> Renderer:
    return Renderer(ServiceConfig(stream_state_secret="s" * 32, **PARSERS))


def _batch_body(rendered: dict, ids: list[int]) -> dict:
    return {
        "generate_response": {
            "request_id": "generate-tokens-" + rendered["request_id"],
            "choices": [{"index": 0, "finish_reason": "stop", "token_ids": ids}],
        },
        "prompt_token_ids": rendered["token_ids"],
        "chat_request": {"messages": [{"role": "user", "content": "hi"}]},
        "render_fingerprint": rendered["render_fingerprint"],
    }


def test_same_configuration_accepts_its_own_fingerprint(qwen_renderer: Renderer) -> None:
    """A derenderer built from the render configuration accepts what that renderer stamped."""
    rendered = qwen_renderer.render_chat({"messages": [{"role": "user", "content": "hi"}]})
    ids = qwen_renderer.bundle.encoder.encode("ok</think>fine")
    derenderer = Derenderer(qwen_renderer.config, qwen_renderer)
    message = derenderer.derender_chat(_batch_body(rendered, ids))["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == ("ok", "fine")


def test_other_parser_settings_reject_the_fingerprint(qwen_renderer: Renderer) -> None:
    """A derenderer with other parser flags answers 400 instead of splitting differently."""
    rendered = qwen_renderer.render_chat({"messages": [{"role": "user", "content": "hi"}]})
    ids = qwen_renderer.bundle.encoder.encode("ok</think>fine")
    other_config = qwen_renderer.config.replace(reasoning_parser="deepseek_r1")
    other = Derenderer(other_config, Renderer(other_config, bundle=None))
    with pytest.raises(ConfigMismatchError):
        other.derender_chat(_batch_body(rendered, ids))
