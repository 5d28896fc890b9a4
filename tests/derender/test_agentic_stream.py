"""An agent writing a file: one tool call whose arguments are 100,000 characters, streamed one
token per chunk through signed streaming derender with 30 tools declared (the embedded Qwen3
configuration: qwen3 reasoning, hermes tools). The echoed state stays under 1 KB at every
chunk, the first argument fragment arrives within 16 tokens of the arguments' start, and the
assembled arguments equal the batch result's."""

from __future__ import annotations

import json
import random

import pytest

from .conftest import PARSER_FLAGS
from .helpers import EOS, REQUEST_ID

# Source code with the characters JSON escapes (quotes, backslashes, tabs, newlines) and a
# little non-ASCII; 100,000 characters fit Qwen3's 40,960-token window as ~28k tokens.
FILE = "".join(
    random.Random(3).choice(["def handle_request(self, request):\n", "    return self.process(request.body)\n",
                             '    print("processing the héllo request")\n', "\tvalues = {'a': [1, 2]}\n",
                             '    # a \\ backslash and a " quote in a comment\n'])
    for _ in range(4000)
)[:100_000]  # fmt: skip


def agent_tools(n: int = 30) -> list[dict]:
    rng = random.Random(5)
    words = "read write list search fetch update delete create move copy run query".split()
    tools = [{"type": "function", "function": {"name": "write_file", "description": "Write a file " * 40,
              "parameters": {"type": "object", "properties": {
                  "path": {"type": "string", "description": "where"},
                  "content": {"type": "string", "description": "what " * 50}}}}}]  # fmt: skip
    for i in range(n - 1):
        props = {f"{rng.choice(words)}_{j}": {"type": rng.choice(["string", "integer", "boolean"]),
                                              "description": " ".join(rng.choices(words, k=60))}
                 for j in range(rng.randint(2, 6))}  # fmt: skip
        tools.append({"type": "function", "function": {
            "name": f"{rng.choice(words)}_{i}", "description": " ".join(rng.choices(words, k=200)),
            "parameters": {"type": "object", "properties": props}}})  # fmt: skip
    return tools


@pytest.mark.timeout(1800)
def test_a_file_sized_argument_streams_in_fragments_with_a_small_state(make_derenderer, tok) -> None:  # noqa: ANN001
    tools = agent_tools()
    assert len(json.dumps(tools)) > 45_000
    arguments = json.dumps({"path": "src/app.py", "content": FILE}, ensure_ascii=False)
    prefix = '<think>\nI will write the file.\n</think>\n\n<tool_call>\n{"name": "write_file", "arguments": '
    text = prefix + arguments + "}\n</tool_call>"
    ids = tok.encode(text, add_special_tokens=False) + [EOS]
    args_start = len(tok.encode(prefix, add_special_tokens=False))
    d = make_derenderer(**PARSER_FLAGS)
    chat = {"messages": [{"role": "user", "content": "write it"}], "tools": tools}

    state, largest, first_fragment, assembled = None, 0, None, []
    for k, tid in enumerate(ids):
        body = {"stream": True, "stream_state": state, "generate_chunk": {"request_id": REQUEST_ID,
                "choices": [{"index": 0, "token_ids": [tid], "finish_reason": "stop" if k == len(ids) - 1 else None}]}}  # fmt: skip
        if k == 0:
            body |= {"chat_request": chat, "prompt_token_ids": [1, 2]}
        step = d.derender_chat(body)
        state = step["stream_state"]
        largest = max(largest, len(json.dumps(state)))
        for call in step["chunk"]["choices"][0]["delta"].get("tool_calls") or []:
            fragment = (call.get("function") or {}).get("arguments")
            if fragment:
                first_fragment = k if first_fragment is None else first_fragment
                assembled.append(fragment)
    assert largest < 1024, largest
    assert first_fragment is not None and first_fragment - args_start <= 16, (first_fragment, args_start)

    gen = {"request_id": REQUEST_ID, "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop"}]}
    batch = d.derender_chat({"generate_response": gen, "chat_request": chat, "prompt_token_ids": [1, 2]})
    (call,) = batch["choices"][0]["message"]["tool_calls"]
    assert "".join(assembled) == call["function"]["arguments"] == arguments
