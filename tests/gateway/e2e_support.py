"""End-to-end support: the real render/derender core, the gateway on uvicorn, token scripts.

The gateway runs in-process (uvicorn on 127.0.0.1, a free port, its own thread and event
loop); clients are the official `openai` SDK. The render/derender core is built once per
session for the tiny Qwen3 model the engines serve (same tokenizer, same max_model_len).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import uvicorn
from tokenizers import Tokenizer

from render_service.config import ServiceConfig
from render_service.gateway.app import create_gateway_app
from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import GatewayConfig, HealthSettings, Timeouts
from render_service.gateway.gateway import Gateway
from tests.harness.ports import free_port

ENGINE_MAX_MODEL_LEN = 2048  # tests/harness/engines.py MAX_MODEL_LEN
STARTUP_TIMEOUT_S = 30.0


def service_config(model_dir: Path) -> ServiceConfig:
    return ServiceConfig(model=str(model_dir), reasoning_parser="qwen3", tool_call_parser="hermes",
                         enable_auto_tool_choice=True, max_model_len=ENGINE_MAX_MODEL_LEN,
                         served_model_name=("tiny-qwen3",), stream_state_secret="e2e-secret-" * 4)


class Scripts:
    """Token scripts for the scripted logits processor, from the model's own tokenizer."""

    def __init__(self, model_dir: Path) -> None:
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def xargs(self, text: str, *, thinking: bool = False) -> dict[str, Any]:
        """extra_body forcing `text`. Qwen3 thinks by default (output before </think> is
        reasoning), so unless asked the template's non-thinking mode is used."""
        body: dict[str, Any] = {"vllm_xargs": {"rs_script": self.ids(text)}}
        if not thinking:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        return body


class RunningGateway:
    """A gateway app served by uvicorn in a background thread."""

    def __init__(self, config: ServiceConfig, gateway_config: GatewayConfig,
                 codec: InProcessCodec) -> None:
        self.app = create_gateway_app(config, gateway_config, codec=codec)
        self.gateway: Gateway = self.app.state.gateway
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="gateway-uvicorn", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                             timeout=kwargs.pop("timeout", 60.0), **kwargs)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Until no request is in flight and every background abort was sent."""
        deadline = time.monotonic() + timeout_s
        while self.gateway.admission.active or self.gateway.aborter._tasks:
            if time.monotonic() > deadline:
                raise AssertionError("gateway requests still in flight")
            time.sleep(0.02)


@contextlib.contextmanager
def running(config: ServiceConfig, codec: InProcessCodec, **gateway_options: Any
            ) -> Iterator[RunningGateway]:
    options: dict[str, Any] = dict(
        health=HealthSettings(interval_s=0.5, timeout_s=1.0, failure_threshold=1),
        timeouts=Timeouts(connect_s=2.0, prefill_s=60.0, first_token_s=60.0, inter_token_s=30.0,
                          request_s=120.0))
    options.update(gateway_options)
    gateway = RunningGateway(config, GatewayConfig(**options), codec)
    gateway.start()
    try:
        yield gateway
    finally:
        gateway.stop()


class HangingEngine:
    """An engine stand-in whose /health is fine but whose generate never answers (bounded by
    HANG_LIMIT_S so a broken test cannot leave a thread behind). Records abort_requests."""

    HANG_LIMIT_S = 60.0

    def __init__(self) -> None:
        self.aborted: list[str] = []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.endswith("abort_requests"):
                    owner.aborted.extend(json.loads(body)["request_ids"])
                    self.do_GET()
                    return
                owner.release.wait(owner.HANG_LIMIT_S)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def dead_url() -> str:
    """A loopback URL nothing listens on (a prefill engine that is down)."""
    return f"http://127.0.0.1:{free_port()}"


class CuttableProxy:
    """A loopback TCP forwarder to an engine whose connections can be cut at once.

    `cut()` resets every open connection and closes the listener, so the gateway sees what it
    sees when an engine process dies mid-stream (the stream breaks, then connects are refused),
    while the shared session engine stays up for the other tests (its side sees a client
    disconnect and aborts the request itself).
    """

    def __init__(self, target_url: str) -> None:
        host, port = target_url.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.is_cut = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # listener closed by cut()
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                if self.is_cut:  # accepted just before cut(): it must not outlive it
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:  # the other side (or cut()) closed the socket: this pump is done
            return
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() thread; close alone would not
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.lock:
            self.is_cut = True
            for sock in self.sockets:
                # shutdown wakes the pump threads blocked in recv (a bare close would wait for
                # them) and ends both TCP streams mid-response.
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
