"""Soak: mixed render and streaming-derender traffic over two replicas sharing a state secret.

Two `render-service serve` processes (embedded Qwen3, qwen3 + hermes parsers) run on
127.0.0.1 with random ports and one `--stream-state-secret-file`. The driver keeps several
streams open at once and interleaves:

- chat renders (random conversations, with and without tools) on a random replica;
- streams: a scripted engine output (reasoning, content, hermes tool calls, CJK/emoji),
  tokenized by the server's /tokenize, cut into random `generate_chunk` payloads (vLLM's
  GenerateTokensStreamResponse shape); **each chunk goes to a random replica** with the
  previous `stream_state`. When a stream ends, its concatenated deltas must equal the batch
  derender of the same output.

RSS of both servers is read after a warm-up and at the end; growth must stay under
--max-rss-growth-mib. Bounded in requests and seconds; loopback only; servers stopped by PID.
The last stdout line is one JSON object.

    .venv/bin/python bench/soak.py [--requests 5000] [--max-seconds 900] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.reliability_support import (  # noqa: E402
    EOS,
    SCRIPTED_OUTPUTS,
    batch_body,
    batch_message,
    chat_request,
    fold_chat_stream,
    process_servers,
    split_sizes,
    stream_chunks,
)

MIB = 1024 * 1024


@dataclass
class Stream:
    name: str
    request_id: str
    chat: dict[str, Any]
    prompt_ids: list[int]
    chunks: list[dict[str, Any]]
    expected: dict[str, Any]
    next_chunk: int = 0
    state: Any = None
    deltas: list[dict[str, Any]] = field(default_factory=list)
    replicas_used: set[int] = field(default_factory=set)


@dataclass
class SoakResult:
    requests: int = 0
    renders: int = 0
    stream_chunks: int = 0
    streams_done: int = 0
    streams_crossing_replicas: int = 0
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss_warm_mib: list[float] = field(default_factory=list)
    rss_end_mib: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rss_growth_mib(self) -> float:
        return max((end - warm for warm, end in zip(self.rss_warm_mib, self.rss_end_mib, strict=True)), default=0.0)

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "renders": self.renders,
            "stream_chunks": self.stream_chunks,
            "streams_done": self.streams_done,
            "streams_crossing_replicas": self.streams_crossing_replicas,
            "mismatches": len(self.mismatches),
            "errors": len(self.errors),
            "rss_warm_mib": [round(x, 1) for x in self.rss_warm_mib],
            "rss_end_mib": [round(x, 1) for x in self.rss_end_mib],
            "rss_growth_mib": round(self.rss_growth_mib, 1),
            "seconds": round(self.seconds, 1),
            "first_problems": (self.mismatches + self.errors)[:3],
        }


class Soak:
    """Drives the traffic against `urls`; `pids` are the server processes whose RSS is read."""

    def __init__(self, urls: list[str], pids: list[int], seed: int, open_streams: int = 8) -> None:
        self.urls = urls
        self.pids = pids
        self.rng = random.Random(seed)
        self.open_streams = open_streams
        self.clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
        self.result = SoakResult()
        self.output_ids: dict[str, list[int]] = {}
        self.serial = 0

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def rss_mib(self) -> list[float]:
        return [psutil.Process(pid).memory_info().rss / MIB for pid in self.pids]

    def _post(self, replica: int, path: str, body: dict[str, Any]) -> dict[str, Any] | list[Any] | None:
        self.result.requests += 1
        response = self.clients[replica].post(path, json=body)
        if response.status_code != 200:
            self.result.errors.append(f"{path} on replica {replica}: {response.status_code} {response.text[:200]}")
            return None
        return response.json()

    def _replica(self) -> int:
        return self.rng.randrange(len(self.clients))

    def _tokenize_outputs(self) -> None:
        for name, text in SCRIPTED_OUTPUTS.items():
            reply = self._post(0, "/tokenize", {"prompt": text, "add_special_tokens": False})
            assert reply is not None, self.result.errors
            self.output_ids[name] = reply["tokens"]

    def _render(self) -> None:
        self.serial += 1
        request = chat_request(self.serial)
        if self.rng.random() < 0.5:
            request["messages"] = [
                {"role": "system", "content": "Be brief. 简短。"},
                *request["messages"],
                {"role": "assistant", "content": "好的 👍"},
                {"role": "user", "content": "and tomorrow? " * self.rng.randint(1, 30)},
            ]
        reply = self._post(self._replica(), "/v1/chat/completions/render", request)
        self.result.renders += 1
        if reply is not None and not reply["token_ids"]:
            self.result.errors.append("render returned no token_ids")

    def _open_stream(self) -> Stream | None:
        self.serial += 1
        name = self.rng.choice(sorted(SCRIPTED_OUTPUTS))
        chat = chat_request(self.serial)
        if "tool" in name:
            chat["tools"] = chat_request(0)["tools"]
        rendered = self._post(self._replica(), "/v1/chat/completions/render", chat)
        if rendered is None:
            return None
        request_id = f"generate-tokens-chatcmpl-soak-{self.serial}"
        ids = self.output_ids[name] + ([EOS] if self.rng.random() < 0.8 else [])
        batch = self._post(self._replica(), "/v1/chat/completions/derender",
                           batch_body(request_id, ids, chat, rendered["token_ids"]))  # fmt: skip
        if batch is None:
            return None
        chunks = stream_chunks(request_id, ids, split_sizes(len(ids), self.rng))
        return Stream(name, request_id, chat, rendered["token_ids"], chunks, batch_message(batch))

    def _advance(self, stream: Stream) -> bool:
        """Send the stream's next chunk to a random replica; True when the stream is over."""
        replica = self._replica()
        body: dict[str, Any] = {"stream": True, "generate_chunk": stream.chunks[stream.next_chunk],
                                "stream_state": stream.state}  # fmt: skip
        if stream.next_chunk == 0:
            body |= {"chat_request": stream.chat, "prompt_token_ids": stream.prompt_ids}
        reply = self._post(replica, "/v1/chat/completions/derender", body)
        self.result.stream_chunks += 1
        if reply is None:
            return True
        stream.replicas_used.add(replica)
        stream.deltas.append(reply["chunk"])
        stream.state = reply["stream_state"]
        stream.next_chunk += 1
        if stream.next_chunk < len(stream.chunks) and not reply.get("abort_engine_request"):
            return False
        self._finish(stream)
        return True

    def _finish(self, stream: Stream) -> None:
        got = fold_chat_stream(stream.deltas)
        if got != stream.expected:
            self.result.mismatches.append(f"{stream.name} {stream.request_id}: stream {got} != batch {stream.expected}")
        self.result.streams_done += 1
        if len(stream.replicas_used) > 1:
            self.result.streams_crossing_replicas += 1

    def run(self, total_requests: int, max_seconds: float, warmup_fraction: float = 0.2) -> SoakResult:
        started = time.monotonic()
        self._tokenize_outputs()
        streams: list[Stream] = []
        warm_at = int(total_requests * warmup_fraction)
        while self.result.requests < total_requests and time.monotonic() - started < max_seconds:
            if not self.result.rss_warm_mib and self.result.requests >= warm_at:
                self.result.rss_warm_mib = self.rss_mib()
            roll = self.rng.random()
            if roll < 0.2:
                self._render()
            elif len(streams) < self.open_streams and roll < 0.35:
                stream = self._open_stream()
                if stream is not None:
                    streams.append(stream)
            elif streams:
                stream = self.rng.choice(streams)
                if self._advance(stream):
                    streams.remove(stream)
        for stream in streams:  # drain: every opened stream is checked
            while not self._advance(stream):
                pass
        if not self.result.rss_warm_mib:
            self.result.rss_warm_mib = self.rss_mib()
        self.result.rss_end_mib = self.rss_mib()
        self.result.seconds = time.monotonic() - started
        return self.result


def run_soak(requests: int, max_seconds: float, seed: int, workdir: Path, ready_timeout_s: float = 240) -> SoakResult:
    """Start two replicas sharing a secret, drive `requests` requests, stop them."""
    with process_servers(2, workdir, ready_timeout_s=ready_timeout_s) as servers:
        soak = Soak([s.url for s in servers], [s.proc.pid for s in servers], seed)
        try:
            return soak.run(requests, max_seconds)
        finally:
            soak.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="render-service-soak-") as tmp:
        result = run_soak(args.requests, args.max_seconds, args.seed, Path(tmp))
    summary = result.summary()
    summary["ok"] = (not result.mismatches and not result.errors and result.rss_growth_mib <= args.max_rss_growth_mib)
    summary["max_rss_growth_mib"] = args.max_rss_growth_mib
    print(json.dumps(summary, ensure_ascii=False))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
