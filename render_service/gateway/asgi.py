"""ASGI pieces that notice a client hanging up *while we wait on an engine*.

Starlette's StreamingResponse (ASGI spec >= 2.4) only notices a disconnect when a send fails,
i.e. at the next token; a client that leaves during a long prefill or a slow decode would keep
the engine busy. Both helpers here race the work against `receive()` returning
`http.disconnect` (the pre-2.4 Starlette approach) and cancel the work when the client is
gone; the work's own `finally` blocks then abort the engine requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["SSEResponse", "ClientDisconnected", "until_disconnect"]

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the response was complete."""


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise ClientDisconnected."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()


class SSEResponse(Response):
    """A streaming `text/event-stream` response (a Starlette Response, so FastAPI passes it on)."""

    media_type = "text/event-stream"
    _content_type = b"text/event-stream; charset=utf-8"

    def __init__(self, body: AsyncGenerator[bytes, None], *,
                 on_close: Callable[[], Awaitable[None]] | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.body_iterator = body
        self.on_close = on_close
        self.extra_headers = headers or []
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", self._content_type), *self.extra_headers]})

        async def pump() -> None:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        pump_task = asyncio.ensure_future(pump())
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait({pump_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not pump_task.done():
                pump_task.cancel()
            await asyncio.gather(pump_task, return_exceptions=True)
            await self.body_iterator.aclose()
            if self.on_close is not None:
                await self.on_close()
        if not pump_task.cancelled() and pump_task.exception() is not None:
            exc = pump_task.exception()
            if not isinstance(exc, OSError):  # a send to a gone client is not our error
                raise exc  # type: ignore[misc]
