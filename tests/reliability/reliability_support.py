"""Shared pieces of the reliability tests and bench/soak.py.

- `ThreadServer`: a real uvicorn server for an in-process app on 127.0.0.1 (random port), so
  tests speak real HTTP (Content-Length, chunked bodies, timeouts) without another model load.
- `ProcessServer`: `render-service serve` as a child process (the soak test's two replicas),
  stopped by PID.
- Scripted engine outputs (reasoning, content, hermes tool calls, CJK/emoji) tokenized with
  the embedded Qwen3 tokenizer and cut into `generate_chunk` payloads shaped like vLLM's
  `GenerateTokensStreamResponse` (one choice per chunk, finish on the last).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.harness.ports import free_port

SECRET = "reliability-test-secret-0123456789"
PARSER_FLAGS = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes", "enable_auto_tool_choice": True}
EOS = 151645  # Qwen3 <|im_end|>
REPO = Path(__file__).resolve().parents[2]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]  # fmt: skip
_CALL_W = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "巴黎 😀"}}\n</tool_call>'
_CALL_T = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/東京"}}\n</tool_call>'
# What a Qwen3 model with the hermes tool format writes, by kind of turn.
SCRIPTED_OUTPUTS = {
    "reasoning+content": "<think>\nThe user greets; answer in 中文 and English 😀.\n</think>\n\n你好！Hello there, 42.",
    "reasoning+tools": f"<think>\nNeed the weather and the time.\n</think>\n\nChecking.\n{_CALL_W}\n{_CALL_T}",
    "tools-only": f"<think>\n\n</think>\n\n{_CALL_W}",
    "content-emoji": "<think>\nshort\n</think>\n\n🎉🎉 Ünïcödé ✓ — 日本語のテキスト、絵文字 👩‍👩‍👧‍👦 done.",
    "unterminated-think": "<think>\nstill thinking about 한국어 and more",
    "bad-tool-json": '<think>\nx\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {bad}\n</tool_call>',
}


def service_config(*, limits: dict[str, Any] | None = None, **overrides: Any) -> Any:
    """The embedded model's CLI configuration with test limits and options."""
    from render_service.config import Limits, ServiceConfig

    return ServiceConfig(stream_state_secret=SECRET, limits=Limits(**(limits or {})), **PARSER_FLAGS, **overrides)


def chat_request(index: int) -> dict[str, Any]:
    """A chat request; every other one offers tools."""
    request: dict[str, Any] = {"messages": [{"role": "user", "content": f"question {index}: 天気は? 🌧"}]}
    if index % 2 == 0:
        request["tools"] = TOOLS
    return request


def split_sizes(n: int, rng: random.Random, max_size: int = 6) -> list[int]:
    sizes = []
    while n > 0:
        size = min(rng.randint(1, max_size), n)
        sizes.append(size)
        n -= size
    return sizes


def stream_chunks(request_id: str, ids: list[int], sizes: list[int], *, finish: str = "stop") -> list[dict[str, Any]]:
    """`generate_chunk` payloads (GenerateTokensStreamResponse shape) covering `ids`."""
    chunks, pos = [], 0
    for k, size in enumerate(sizes):
        last = k == len(sizes) - 1
        chunks.append({
            "request_id": request_id,
            "choices": [{"index": 0, "token_ids": ids[pos:pos + size], "finish_reason": finish if last else None,
                         "stop_reason": None}],
        })  # fmt: skip
        pos += size
    return chunks


def batch_body(request_id: str, ids: list[int], chat: dict[str, Any], prompt_ids: list[int]) -> dict[str, Any]:
    return {
        "generate_response": {
            "request_id": request_id,
            "choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop", "stop_reason": None}],
        },
        "chat_request": chat,
        "prompt_token_ids": prompt_ids,
    }


def fold_chat_stream(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate streamed chat deltas into a message-like dict."""
    content = reasoning = ""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {"content": content, "reasoning": reasoning, "tool_calls": [calls[i] for i in sorted(calls)],
            "finish_reason": finish}  # fmt: skip


def batch_message(response: dict[str, Any]) -> dict[str, Any]:
    choice = response["choices"][0]
    message = choice["message"]
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or []]  # fmt: skip
    return {"content": message["content"] or "", "reasoning": message["reasoning"] or "", "tool_calls": calls,
            "finish_reason": choice["finish_reason"]}  # fmt: skip


class ThreadServer:
    """uvicorn serving `app` on 127.0.0.1 from a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                lifespan="off", timeout_graceful_shutdown=2)  # fmt: skip
        self.server = uvicorn.Server(config)
        self.url = f"http://127.0.0.1:{config.port}"
        self.thread = threading.Thread(target=self.server.run, name="reliability-uvicorn", daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start within 30 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ProcessServer:
    """`render-service serve` in a child process on 127.0.0.1; stopped by its PID."""

    def __init__(self, secret_file: Path, log_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "render_service.cli", "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--stream-state-secret-file", str(secret_file),
                "--log-level", "warning", *extra]  # fmt: skip
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server not ready within {timeout_s} s; see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


@contextmanager
def process_servers(count: int, workdir: Path, *extra: str, ready_timeout_s: float = 180) -> Iterator[list[ProcessServer]]:
    """`count` replicas sharing one stream-state secret file."""
    secret_file = workdir / "stream-state.secret"
    secret_file.write_text(SECRET)
    servers: list[ProcessServer] = []
    try:
        for k in range(count):
            servers.append(ProcessServer(secret_file, workdir / f"server-{k}.log", *extra))
        for server in servers:
            server.wait_ready(ready_timeout_s)
        yield servers
    finally:
        for server in servers:
            server.stop()
