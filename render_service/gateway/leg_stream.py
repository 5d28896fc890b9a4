"""One leg's engine stream as the responders read it, and each choice's derender state.

Each engine event carries one choice; its `stream_state` is kept per (leg, choice index) and
threaded through the in-process streaming derenderer (`StepDerenderer`). When derender
reports a stop-string match (`abort_engine_request`) that choice is done; once every choice
of a leg is done `LegStream.iterate` closes the engine stream, which aborts the engine request
at once (stages.DecodeStage). Token counts are kept here (tokens fed to derender up to each
choice's end), so usage is exact even when the engine was cut short.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field
from typing import Any

from render_service.gateway.codec import Codec
from render_service.gateway.context import Leg, RequestContext
from render_service.gateway.reasoning_usage import ChoiceReasoning

__all__ = ["ChoiceState", "LegStream", "StepDerenderer", "replayed_events"]


@dataclass
class ChoiceState:
    stream_state: Any = None
    tokens: int = 0  # engine tokens of this choice so far
    finished: bool = False
    stop_hit: bool = False
    first_sent: bool = False  # a chunk of this choice went to the client
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[Any] | None = None
    finish_reason: str | None = None
    stop_reason: Any = None
    weight_versions: Any = None
    reasoning: ChoiceReasoning | None = None  # running reasoning-token count (usage)


@dataclass
class LegStream:
    leg: Leg
    events: AsyncGenerator[dict[str, Any], None]
    first: dict[str, Any]
    choices: list[ChoiceState]

    async def iterate(self) -> AsyncGenerator[dict[str, Any], None]:
        """The events; stops (closing the engine stream, which aborts it) once every choice is
        done and one of them hit a stop string. Finished naturally: read on to [DONE]."""
        event = self.first
        while True:
            yield event
            if self.done() and any(c.stop_hit for c in self.choices):
                self.leg.close_reason = "stop_string"
                await self.events.aclose()
                return
            try:
                event = await anext(self.events)
            except StopAsyncIteration:
                return

    def done(self) -> bool:
        return all(c.finished for c in self.choices)

    def choice(self, event: dict[str, Any]) -> tuple[dict[str, Any], ChoiceState] | None:
        """The event's engine choice and its state; None for a usage-only event."""
        if not event.get("choices"):
            return None
        engine_choice = event["choices"][0]
        return engine_choice, self.choices[engine_choice["index"]]


class StepDerenderer:
    """One engine event of one choice -> its derendered choice (the codec's stream step)."""

    def __init__(self, codec: Codec, model_name: str) -> None:
        self.codec = codec
        self.model_name = model_name

    def step(self, ctx: RequestContext, leg: Leg, event: dict[str, Any], state: ChoiceState
             ) -> dict[str, Any] | None:
        engine_choice = event["choices"][0]
        state.tokens += len(engine_choice.get("token_ids") or [])
        body: dict[str, Any] = {"stream": True, "model": self.model_name,
                                "generate_chunk": event, "stream_state": state.stream_state,
                                "prompt_tokens": len(leg.token_ids)}
        if state.stream_state is None:
            # Only the first step needs the request and prompt: the state carries what they
            # settle (derender_api contract), and re-validating them per chunk costs ~0.4 ms.
            body["prompt_token_ids"] = leg.token_ids
            body["chat_request" if ctx.endpoint == "chat" else "completion_request"] = ctx.body
        started = time.perf_counter()
        if ctx.endpoint == "chat":
            result = self.codec.derender_chat(body)
        else:
            result = self.codec.derender_completion(body)
        ctx.add_phase("derender", time.perf_counter() - started)
        state.stream_state = result.get("stream_state")
        choices = (result.get("chunk") or {}).get("choices") or []
        out = choices[0] if choices else None
        state.stop_hit = bool(result.get("abort_engine_request"))
        if state.stop_hit or engine_choice.get("finish_reason") is not None or (
                out is not None and out.get("finish_reason") is not None):
            state.finished = True
            state.finish_reason = ((out or {}).get("finish_reason")
                                   or engine_choice.get("finish_reason"))
            state.stop_reason = (out or {}).get("stop_reason")
        return out


def replayed_events(response: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """A JSON GenerateTokensResponse as the one-token stream events it could have been sent as
    (so the stop-string scan can run over an answer that had to come as JSON)."""
    rid = response.get("request_id")
    for choice in response.get("choices") or []:
        ids = list(choice.get("token_ids") or [])
        content = (choice.get("logprobs") or {}).get("content")
        for k in range(max(len(ids), 1)):
            last = k >= len(ids) - 1
            yield {"request_id": rid, "choices": [{
                "index": choice["index"], "token_ids": ids[k:k + 1],
                "logprobs": None if content is None else {"content": content[k:k + 1]},
                "finish_reason": choice.get("finish_reason") if last else None,
                "stop_reason": choice.get("stop_reason") if last else None,
                "weight_versions": choice.get("weight_versions") if last else None}]}
