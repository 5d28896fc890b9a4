"""Our chat render output is accepted by vLLM 0.33's own `GenerateRequest` model, in both
output modes an engine may run: "tokens" and "derender". The second refuses unknown
`parse_context` keys, so this is what keeps our additions out of vLLM's schema.
"""

from __future__ import annotations

from typing import Any

from render_service.api import Renderer
from render_service.config import ServiceConfig

from ..multimodal.ref import run_ref_script

_VALIDATE_SCRIPT = r"""
import json, sys
from pydantic import ValidationError
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest
results = []
for body in json.load(sys.stdin):
    try:
        parsed = GenerateRequest.model_validate(body)
        results.append({"ok": True, "parse_context": parsed.parse_context.model_dump(mode="json")})
    except ValidationError as exc:
        results.append({"ok": False, "error": str(exc)[:2000]})
print(json.dumps(results))
"""

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _rendered() -> list[dict[str, Any]]:
    # The embedded Qwen3 with the CLI's default parsers (qwen3 reasoning, hermes tools).
    renderer = Renderer(ServiceConfig(reasoning_parser="qwen3", tool_call_parser="hermes",
                                      enable_auto_tool_choice=True))
    user = {"role": "user", "content": "Weather in Paris?"}
    requests = [
        {"messages": [user]},
        {"messages": [user], "tools": [WEATHER]},
        {"messages": [user], "tools": [WEATHER], "tool_choice": "required"},
        {"messages": [user], "chat_template_kwargs": {"enable_thinking": False}},
    ]
    return [renderer.render_chat(request) for request in requests]


def test_chat_render_output_validates_in_vllm_generate_request_both_modes() -> None:
    rendered = _rendered()
    bodies = [{**body, "output_mode": mode} for body in rendered for mode in ("tokens", "derender")]
    results = run_ref_script(_VALIDATE_SCRIPT, bodies)
    for body, result in zip(bodies, results):
        assert result["ok"], (body["output_mode"], result.get("error"))
        # vLLM reads back exactly the parse_context we sent: nothing of ours hides inside it.
        assert result["parse_context"] == body["parse_context"]
