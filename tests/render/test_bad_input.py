"""Bad input never crashes or hangs the renderer: every case is a typed 4xx/5xx error.

Covers malformed bodies and types, oversized message lists, templates that raise, recurse,
loop for ever or produce huge output (render deadline and output budget), sandbox escapes,
per-request templates without --trust-request-chat-template, and multimodal parts.
"""

from __future__ import annotations

import re
import time

import pytest

from render_service.api import Renderer
from render_service.config import Limits, ServiceConfig
from render_service.errors import BadRequestError, NotFoundError
from render_service.protocol import RequestValidationError

USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def trusting_renderer(qwen3_renderer: Renderer) -> Renderer:
    """Per-request templates allowed, tight limits (shares the loaded tokenizer bundle)."""
    config = ServiceConfig(
        trust_request_chat_template=True,
        limits=Limits(render_timeout_s=0.5, max_template_output_chars=1_000_000, max_messages=100),
    )
    return Renderer(config, bundle=qwen3_renderer.bundle)


def render_with_template(renderer: Renderer, template: str) -> dict:
    return renderer.render_chat({"messages": [USER], "chat_template": template})


@pytest.mark.parametrize(
    "body,param",
    [
        ({"messages": "not a list"}, "body.messages"),
        ({"messages": [USER], "temperature": "hot"}, "body.temperature"),
        ({"messages": [USER], "max_tokens": "many"}, "body.max_tokens"),
        ({"messages": [USER], "stop": 5}, "body.stop"),
        ({}, "body.messages"),
    ],
)
def test_schema_errors_are_400_with_dotted_param(qwen3_renderer: Renderer, body: dict, param: str) -> None:
    """Schema failures are vLLM-style 400s: 'N validation error(s):' and param = location."""
    with pytest.raises(RequestValidationError) as info:
        qwen3_renderer.render_chat(body)
    assert info.value.status == 400 and info.value.param == param
    assert re.match(r"\d+ validation errors?:\n  \{'type': ", info.value.message)
    assert info.value.to_body()["error"]["type"] == "Bad Request"


def test_non_object_body_is_400(qwen3_renderer: Renderer) -> None:
    """A JSON array or string body is a 400, not a crash."""
    for body in ([1, 2], "text", None):
        with pytest.raises(BadRequestError):
            qwen3_renderer.render_chat(body)


def test_message_without_role_is_400(qwen3_renderer: Renderer) -> None:
    """Messages must be objects with a string role."""
    with pytest.raises(BadRequestError):
        qwen3_renderer.render_chat({"messages": [{"content": "no role"}]})
    with pytest.raises(BadRequestError):
        qwen3_renderer.render_chat({"messages": [5]})


def test_huge_messages_list_is_refused(trusting_renderer: Renderer) -> None:
    """More messages than limits.max_messages is a 400 naming the limit."""
    with pytest.raises(BadRequestError, match="Too many messages"):
        trusting_renderer.render_chat({"messages": [USER] * 101})


def test_unknown_model_is_404(qwen3_renderer: Renderer) -> None:
    """An unknown model name is vLLM's 404; an empty name is accepted."""
    with pytest.raises(NotFoundError, match="The model `nope` does not exist"):
        qwen3_renderer.render_chat({"messages": [USER], "model": "nope"})
    assert qwen3_renderer.render_chat({"messages": [USER], "model": ""})["token_ids"]


def test_untrusted_request_template_is_refused(qwen3_renderer: Renderer) -> None:
    """Without --trust-request-chat-template a per-request template is refused (vLLM text)."""
    for body in (
        {"messages": [USER], "chat_template": "{{ 'x' }}"},
        {"messages": [USER], "chat_template_kwargs": {"chat_template": "{{ 'x' }}"}},
    ):
        with pytest.raises(BadRequestError, match="--trust-request-chat-template is not set"):
            qwen3_renderer.render_chat(body)


def test_template_raise_exception_is_400(trusting_renderer: Renderer) -> None:
    """raise_exception() in a template is a 400 carrying the template's message."""
    with pytest.raises(BadRequestError, match="^only user messages$"):
        render_with_template(trusting_renderer, "{{ raise_exception('only user messages') }}")


@pytest.mark.parametrize(
    "template",
    [
        "{{ messages[0].nope.deeper }}",
        "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{% set ns = namespace(_secret=1) %}",
        "{{ 1 / 0 }}",
        "{% for %}",
    ],
    ids=["undefined", "recursion", "sandbox_escape", "underscore_namespace", "zero_division", "syntax"],
)
def test_failing_templates_are_400(trusting_renderer: Renderer, template: str) -> None:
    """Template errors of every kind become BadRequestError, never another exception."""
    with pytest.raises(BadRequestError):
        render_with_template(trusting_renderer, template)


@pytest.mark.parametrize(
    "template",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = i * j %}{% endfor %}{% endfor %}",
    ],
    ids=["empty_nested_loops", "busy_nested_loops"],
)
def test_endless_template_hits_render_deadline(trusting_renderer: Renderer, template: str) -> None:
    """Loops that would run for hours stop at limits.render_timeout_s with a 400."""
    start = time.monotonic()
    with pytest.raises(BadRequestError, match="timed out after 0.5s"):
        render_with_template(trusting_renderer, template)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'a' * 100000000 }}",
        "{{ 'ab' * 10 ** 9 }}",
        "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
        "{{ 'x' | center(500000000) }}",
        "{{ 'x\\n' * 1000 | indent(1000000) }}",
        "{{ '%900000000d' % 1 }}",
        "{{ 7 ** 100000000 }}",
        "{{ '{:>900000000}'.format(1) }}",
        "{{ '%*d' | format(900000000, 1) }}",
    ],
    ids=["repeat", "power_repeat", "loop_output", "center", "indent", "percent_width", "huge_power",
         "str_format_width", "format_filter_star"],
)
def test_huge_output_is_refused(trusting_renderer: Renderer, template: str) -> None:
    """Output over limits.max_template_output_chars is a 400, refused before allocating it."""
    start = time.monotonic()
    with pytest.raises(BadRequestError):
        render_with_template(trusting_renderer, template)
    assert time.monotonic() - start < 10


def test_trusted_template_renders(trusting_renderer: Renderer) -> None:
    """A trusted per-request template is used (and loops under the limits render fine)."""
    out = render_with_template(
        trusting_renderer, "{% for m in messages %}{% for i in range(3) %}{{ m.content }}{% endfor %}{% endfor %}"
    )
    assert trusting_renderer.bundle.hf_tokenizer.decode(out["token_ids"]) == "hihihi"


def test_image_parts_for_a_text_only_model_are_refused_clearly(qwen3_renderer: Renderer) -> None:
    """A text-only model takes no images: a clear 400, before anything is fetched or decoded."""
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}
    with pytest.raises(BadRequestError, match="does not take image inputs"):
        qwen3_renderer.render_chat(body)


def test_audio_and_video_parts_are_refused_clearly(qwen3_renderer: Renderer) -> None:
    for part in ({"type": "audio_url", "audio_url": {"url": "data:x"}}, {"type": "video_url", "video_url": {"url": "x"}}):
        body = {"messages": [{"role": "user", "content": [part]}]}
        with pytest.raises(BadRequestError, match="is not supported by this render service"):
            qwen3_renderer.render_chat(body)


def test_unknown_content_part_type_is_400(qwen3_renderer: Renderer) -> None:
    """Unknown part types are refused with vLLM's message."""
    body = {"messages": [{"role": "user", "content": [{"type": "hologram", "data": 1}]}]}
    with pytest.raises(BadRequestError, match="Unsupported chat content part type: 'hologram'"):
        qwen3_renderer.render_chat(body)
