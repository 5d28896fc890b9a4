"""render_service.http.media_fetch: http(s) image fetching against a real loopback HTTP server.

One threaded `http.server` on 127.0.0.1 (random port) serves PNGs, slow and endless bodies,
redirect chains and error statuses for the whole module; it is stopped at the end. Every server
wait is bounded and interruptible, and the client timeouts are tenths of a second.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from render_service.errors import BadRequestError, ConfigError
from render_service.http.media_fetch import FetchPolicy, fetch_images, http_image_urls, make_client
from render_service.mm.media import decode_image

from .tiny_vlm import png

PNG = png((9, 7), seed=1)
OTHER_PNG = png((5, 11), seed=2)
LOOPBACK = ("127.0.0.1",)
MAX_SERVER_WAIT_S = 2.0


# --- the loopback server ------------------------------------------------------------------------


@dataclass
class ServerState:
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (Host header, path) of every request received.
    requests: list[tuple[str, str]] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0


class Handler(BaseHTTPRequestHandler):
    state: ServerState  # set on the subclass made per server

    def log_message(self, format: str, *args: object) -> None:
        return  # keep test output clean

    def do_GET(self) -> None:
        with self.state.lock:
            self.state.requests.append((self.headers.get("Host", ""), self.path))
        parts = urlsplit(self.path)
        route = ROUTES.get(parts.path.split("/")[1])
        if route is None:
            self._send(404, b"not found")
            return
        try:
            route(self, parts.path, parse_qs(parts.query))
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up (a limit or timeout under test)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "image/png", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_headers_only(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()


def _png(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(200, PNG)


def _other_png(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(200, OTHER_PNG)


def _status(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(int(path.split("/")[2]), b"error page", {"Content-Type": "text/plain"})


def _redirect_chain(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """/chain/N: N relative redirects, then the PNG."""
    hops = int(path.split("/")[2])
    if hops == 0:
        handler._send(200, PNG)
    else:
        handler._send(302, b"", {"Location": f"/chain/{hops - 1}"})


def _redirect_to(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """/to?loc=URL: one redirect to an absolute URL."""
    handler._send(307, b"", {"Location": query["loc"][0]})


def _slow_headers(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler.state.stop.wait(MAX_SERVER_WAIT_S)
    handler._send(200, PNG)


def _trickle(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """Headers at once, then one byte every 50 ms for 2 s: no single read is slow."""
    handler._send_headers_only(200, {"Content-Type": "image/png"})
    deadline = time.monotonic() + MAX_SERVER_WAIT_S
    while time.monotonic() < deadline and not handler.state.stop.wait(0.05):
        handler.wfile.write(b"x")
        handler.wfile.flush()


def _endless(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """A body with no Content-Length that goes on until the client hangs up (capped at 256 MiB)."""
    handler._send_headers_only(200, {"Content-Type": "image/png"})
    chunk = b"\0" * 65536
    for _ in range(4096):
        if handler.state.stop.is_set():
            return
        handler.wfile.write(chunk)


def _lying_length(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """Announces 10 GiB, sends 10 bytes: only the Content-Length check can refuse it."""
    handler._send_headers_only(200, {"Content-Length": str(10 * 1024**3)})
    handler.wfile.write(b"0123456789")


def _gzip(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(200, gzip.compress(PNG), {"Content-Encoding": "gzip"})


def _set_cookie(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(200, PNG, {"Set-Cookie": "session=secret; Path=/"})


def _echo_cookie(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    handler._send(200, handler.headers.get("Cookie", "").encode(), {"Content-Type": "text/plain"})


def _counted(handler: Handler, path: str, query: dict[str, list[str]]) -> None:
    """Holds the request 200 ms while counting how many are in flight at once."""
    state = handler.state
    with state.lock:
        state.in_flight += 1
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
    state.stop.wait(0.2)
    with state.lock:
        state.in_flight -= 1
    handler._send(200, PNG)


ROUTES = {
    "png": _png,
    "other.png": _other_png,
    "status": _status,
    "chain": _redirect_chain,
    "to": _redirect_to,
    "slow-headers": _slow_headers,
    "trickle": _trickle,
    "endless": _endless,
    "lying-length": _lying_length,
    "gzip": _gzip,
    "set-cookie": _set_cookie,
    "echo-cookie": _echo_cookie,
    "counted": _counted,
}


@dataclass
class Server:
    port: int
    state: ServerState

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def hits(self, path_prefix: str) -> list[tuple[str, str]]:
        with self.state.lock:
            return [hit for hit in self.state.requests if hit[1].startswith(path_prefix)]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    state = ServerState()
    handler = type("BoundHandler", (Handler,), {"state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    httpd.block_on_close = False
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Server(httpd.server_address[1], state)
    finally:
        state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(FetchPolicy(LOOPBACK)) as fetch_client:
        yield fetch_client


def _policy(**overrides: object) -> FetchPolicy:
    return FetchPolicy(**{"allowed_domains": LOOPBACK, "timeout_s": 2.0, **overrides})


async def _refused(urls: list[str], policy: FetchPolicy, client: httpx.AsyncClient) -> str:
    with pytest.raises(BadRequestError) as caught:
        await fetch_images(urls, policy, client)
    assert caught.value.status == 400
    assert caught.value.param == "messages"
    return caught.value.message


# --- successful fetches -------------------------------------------------------------------------


async def test_fetches_exact_bytes_of_each_distinct_url_keyed_by_the_url_as_written(
    server: Server, client: httpx.AsyncClient
) -> None:
    png_url, other_url = server.url("/png?v=1"), server.url("/other.png")
    before = len(server.hits("/png?v=1"))

    fetched = await fetch_images([png_url, other_url, png_url], _policy(), client)

    assert fetched == {png_url: PNG, other_url: OTHER_PNG}
    assert len(server.hits("/png?v=1")) == before + 1  # a repeated URL is downloaded once
    assert decode_image(fetched[png_url], max_image_pixels=10**6).image.size == (9, 7)


async def test_nothing_to_fetch_needs_no_policy(client: httpx.AsyncClient) -> None:
    assert await fetch_images([], FetchPolicy(), client) == {}


async def test_follows_relative_redirects_up_to_the_limit(
    server: Server, client: httpx.AsyncClient
) -> None:
    url = server.url("/chain/3")
    assert await fetch_images([url], _policy(max_redirects=3), client) == {url: PNG}


async def test_follows_a_redirect_to_another_allowed_host(
    server: Server, client: httpx.AsyncClient
) -> None:
    target = server.url("/png?via=redirect", host="localhost")
    url = server.url(f"/to?loc={target}")
    policy = _policy(allowed_domains=("127.0.0.1", "LOCALHOST"))
    assert await fetch_images([url], policy, client) == {url: PNG}
    assert (f"localhost:{server.port}", "/png?via=redirect") in server.hits("/png?via=redirect")


async def test_downloads_run_concurrently_but_at_most_max_concurrency_at_once(
    server: Server, client: httpx.AsyncClient
) -> None:
    urls = [server.url(f"/counted?i={i}") for i in range(4)]
    server.state.peak_in_flight = 0
    fetched = await fetch_images(urls, _policy(max_concurrency=2), client)
    assert fetched == dict.fromkeys(urls, PNG)
    assert server.state.peak_in_flight == 2


# --- policy refusals (checked before any network traffic) ---------------------------------------


async def test_disabled_by_default_with_a_message_that_says_how_to_enable(
    server: Server, client: httpx.AsyncClient
) -> None:
    url = server.url("/png?disabled")
    message = await _refused([url], FetchPolicy(), client)
    assert "not enabled" in message
    assert "send a data URI or start with --allowed-media-domains" in message
    assert server.hits("/png?disabled") == []


async def test_host_outside_the_allowlist_is_refused_without_a_request(
    server: Server, client: httpx.AsyncClient
) -> None:
    allowed, refused = server.url("/png?ok"), server.url("/png?refused", host="localhost")
    message = await _refused([allowed, refused], _policy(), client)
    assert message == (
        "The URL must be from one of the allowed domains: ['127.0.0.1']. "
        "Input URL domain: localhost"
    )
    assert server.hits("/png?ok") == [] and server.hits("/png?refused") == []


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://127.0.0.1/x.png", "must use http or https"),
        ("file:///etc/passwd", "must use http or https"),
        ("data:image/png;base64,AAAA", "must use http or https"),
        ("http://user:secret@127.0.0.1/x.png", "must not contain credentials"),
        ("http:///x.png", "has no host"),
    ],
)
async def test_unfetchable_urls_are_refused(
    url: str, expected: str, client: httpx.AsyncClient
) -> None:
    message = await _refused([url], _policy(allowed_domains=("*",)), client)
    assert expected in message
    assert "secret" not in message


# --- redirects ----------------------------------------------------------------------------------


async def test_too_many_redirects(server: Server, client: httpx.AsyncClient) -> None:
    url = server.url("/chain/3")
    message = await _refused([url], _policy(max_redirects=2), client)
    assert (
        message
        == f"Image URL '{server.url('/chain/1')}' answered HTTP 302 (a redirect): more than 2 redirects."
    )


async def test_redirects_can_be_switched_off(server: Server, client: httpx.AsyncClient) -> None:
    url = server.url("/chain/1")
    before = len(server.hits("/chain/0"))
    message = await _refused([url], _policy(max_redirects=0), client)
    assert "redirects are not followed on this render service" in message
    assert len(server.hits("/chain/0")) == before


async def test_each_redirect_hop_passes_the_domain_check(
    server: Server, client: httpx.AsyncClient
) -> None:
    target = server.url("/png?hop-refused", host="localhost")
    url = server.url(f"/to?loc={target}")
    message = await _refused([url], _policy(), client)
    assert message.startswith(f"Image URL '{server.url('/to')}' redirected to a refused URL: ")
    assert message.endswith("Input URL domain: localhost")
    assert server.hits("/png?hop-refused") == []


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("file:///etc/passwd", "must use http or https"),
        ("http://user:secret@127.0.0.1/x.png", "must not contain credentials"),
    ],
)
async def test_redirects_to_other_schemes_or_credentials_are_refused(
    server: Server, client: httpx.AsyncClient, location: str, expected: str
) -> None:
    message = await _refused([server.url(f"/to?loc={location}")], _policy(), client)
    assert "redirected to a refused URL" in message and expected in message


# --- answers and transport failures -------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 403, 500])
async def test_non_2xx_status(server: Server, client: httpx.AsyncClient, status: int) -> None:
    url = server.url(f"/status/{status}?sig=token")
    message = await _refused([url], _policy(), client)
    assert message.startswith(
        f"Failed to fetch image URL '{server.url(f'/status/{status}')}': HTTP {status} "
    )
    assert "token" not in message  # query strings may carry signed credentials


async def test_slow_answer_times_out(server: Server, client: httpx.AsyncClient) -> None:
    url = server.url("/slow-headers")
    started = time.monotonic()
    message = await _refused([url], _policy(timeout_s=0.3), client)
    assert message == f"Timed out after 0.3 s fetching image URL '{url}'."
    assert time.monotonic() - started < 1.5


async def test_the_timeout_bounds_the_whole_body_not_each_read(
    server: Server, client: httpx.AsyncClient
) -> None:
    # Every byte arrives within 50 ms, so only a total deadline can stop this download.
    url = server.url("/trickle")
    started = time.monotonic()
    message = await _refused([url], _policy(timeout_s=0.3), client)
    assert message == f"Timed out after 0.3 s fetching image URL '{url}'."
    assert time.monotonic() - started < 1.5


async def test_endless_body_stops_at_max_bytes(server: Server, client: httpx.AsyncClient) -> None:
    url = server.url("/endless")
    message = await _refused([url], _policy(max_bytes=300_000, timeout_s=5.0), client)
    assert message == f"Image at '{url}' is larger than the limit of 300000 bytes."


async def test_oversized_content_length_is_refused_before_reading(
    server: Server, client: httpx.AsyncClient
) -> None:
    url = server.url("/lying-length")
    message = await _refused([url], _policy(max_bytes=1000), client)
    assert message == f"Image at '{url}' is larger than the limit of 1000 bytes."


async def test_the_request_total_is_bounded_too(server: Server, client: httpx.AsyncClient) -> None:
    urls = [server.url("/png?total=1"), server.url("/other.png?total=2")]
    limit = max(len(PNG), len(OTHER_PNG)) + 1
    assert limit < len(PNG) + len(OTHER_PNG)
    message = await _refused(urls, _policy(max_total_bytes=limit), client)
    assert message == f"The images of this request total more than {limit} bytes."


async def test_compressed_answers_are_refused(server: Server, client: httpx.AsyncClient) -> None:
    message = await _refused([server.url("/gzip")], _policy(), client)
    assert "Content-Encoding 'gzip'" in message


async def test_connection_refused(client: httpx.AsyncClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{closed_port}/x.png"
    message = await _refused([url], _policy(), client)
    assert message.startswith(f"Could not fetch image URL '{url}': ")


async def test_first_failure_cancels_the_other_downloads(
    server: Server, client: httpx.AsyncClient
) -> None:
    started = time.monotonic()
    message = await _refused(
        [server.url("/trickle?cancelled"), server.url("/status/404?first")],
        _policy(timeout_s=5.0),
        client,
    )
    assert "HTTP 404" in message
    assert time.monotonic() - started < 1.5  # did not wait for the 2 s trickle


# --- buffering bound (exact chunk accounting with an in-memory transport) ------------------------


class _CountingStream(httpx.AsyncByteStream):
    """A streamed body of `count` chunks that counts how many were pulled."""

    def __init__(self, chunk: int, count: int, fill: bytes | None = None) -> None:
        self.data = fill if fill is not None else b"\0" * chunk
        self.count, self.pulled = count, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            self.pulled += 1
            yield self.data


async def test_reading_stops_at_the_first_chunk_past_the_limit() -> None:
    stream = _CountingStream(chunk=65536, count=1000)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=stream))
    async with httpx.AsyncClient(transport=transport) as mock_client:
        with pytest.raises(BadRequestError, match="larger than the limit of 200000 bytes"):
            await fetch_images(
                ["http://img.test/a.png"],
                FetchPolicy(("img.test",), max_bytes=200_000),
                mock_client,
            )
    assert stream.pulled == 4  # 3 chunks (196608 bytes) fit; the 4th crosses the limit


# --- the client ---------------------------------------------------------------------------------


async def test_client_keeps_no_cookies_between_fetches(server: Server) -> None:
    set_url, echo_url = server.url("/set-cookie"), server.url("/echo-cookie")
    policy = _policy()
    async with make_client(policy) as fetch_client:
        await fetch_images([set_url], policy, fetch_client)
        assert await fetch_images([echo_url], policy, fetch_client) == {echo_url: b""}
    # Control: a default httpx client would replay the cookie to the next fetch.
    async with httpx.AsyncClient() as default_client:
        await fetch_images([set_url], policy, default_client)
        assert await fetch_images([echo_url], policy, default_client) == {
            echo_url: b"session=secret"
        }


async def test_client_ignores_proxy_environment(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    url = server.url("/png?proxy-env")
    policy = _policy()
    async with make_client(policy) as fetch_client:
        assert await fetch_images([url], policy, fetch_client) == {url: PNG}
    # Control: a client that trusts the environment goes to the (dead) proxy.
    async with httpx.AsyncClient() as env_client:
        await _refused([url], policy, env_client)


async def test_make_client_settings() -> None:
    async with make_client(FetchPolicy(LOOPBACK, timeout_s=1.5)) as fetch_client:
        assert fetch_client.follow_redirects is False
        assert fetch_client.timeout == httpx.Timeout(1.5)
        assert fetch_client.headers["user-agent"].startswith("render-service/")


# --- policy -------------------------------------------------------------------------------------


def test_policy_defaults() -> None:
    policy = FetchPolicy()
    assert not policy.enabled
    assert (policy.timeout_s, policy.max_bytes, policy.max_redirects, policy.max_concurrency) == (
        5.0, 32 * 1024 * 1024, 3, 8,
    )  # fmt: skip
    assert FetchPolicy(["a.example"]).allowed_domains == ("a.example",)
    assert FetchPolicy(["a.example"]).enabled


@pytest.mark.parametrize(
    ("domains", "host", "allowed"),
    [
        (("example.com",), "example.com", True),
        (("example.com",), "EXAMPLE.com", True),
        (("Example.COM.",), "example.com", True),
        (("example.com",), "example.com.", True),
        (("example.com",), "img.example.com", False),
        (("example.com",), "example.com.evil.net", False),
        (("example.com",), "notexample.com", False),
        (("*.example.com",), "img.example.com", True),
        (("*.example.com",), "a.b.example.com", True),
        (("*.example.com",), "example.com", False),
        (("*.example.com",), "evilexample.com", False),
        (("*.example.com",), "example.com.evil.net", False),
        (("*",), "anything.at.all", True),
        (("*",), "10.0.0.1", True),
        (("a.test", "b.test"), "b.test", True),
        (("127.0.0.1",), "127.0.0.1", True),
        (("127.0.0.1",), "127.0.0.2", False),
        (("[::1]",), "::1", True),
        (("*",), "", False),
    ],
)
def test_allows_host(domains: tuple[str, ...], host: str, allowed: bool) -> None:
    assert FetchPolicy(domains).allows_host(host) is allowed


async def test_internationalised_hosts_match_in_unicode_or_idna_form() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_CountingStream(chunk=len(PNG), count=1, fill=PNG))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as mock_client:
        for entry in ("münchen.example", "xn--mnchen-3ya.example"):
            url = "http://MÜNCHEN.example/a.png"
            assert await fetch_images([url], FetchPolicy((entry,)), mock_client) == {url: PNG}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"allowed_domains": "example.com"}, "not a string"),
        ({"allowed_domains": ("",)}, "expected a hostname"),
        ({"allowed_domains": ("http://example.com",)}, "bare hostname"),
        ({"allowed_domains": ("example.com:443",)}, "bare hostname"),
        ({"allowed_domains": ("example.com/images",)}, "bare hostname"),
        ({"allowed_domains": ("::1",)}, "IPv6 addresses in brackets"),
        ({"allowed_domains": ("img.*.com",)}, "wildcard"),
        ({"allowed_domains": ("*.",)}, "wildcard"),
        ({"allowed_domains": ("**.example.com",)}, "wildcard"),
        ({"timeout_s": 0}, "timeout must be positive"),
        ({"max_bytes": 0}, "byte limits"),
        ({"max_total_bytes": 0}, "byte limits"),
        ({"max_redirects": -1}, "max_redirects"),
        ({"max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_policies_are_config_errors(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FetchPolicy(**overrides)


# --- which URLs a request needs -----------------------------------------------------------------


def _body(*parts: object, more_messages: tuple[object, ...] = ()) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": list(parts)}, *more_messages]}


def test_http_image_urls_finds_every_accepted_part_shape_in_order_without_duplicates() -> None:
    body = _body(
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "https://a.test/1.png"}},
        {"type": "input_image", "image_url": "http://a.test/2.png", "detail": "auto"},
        {"image_url": "https://a.test/3.png"},
        {"image_url": {"url": "https://a.test/4.png"}},
        {"type": "image_url", "image_url": {"url": "https://a.test/1.png"}},
        {"type": "image_url", "image_url": {"url": "HTTPS://a.test/5.png"}},
        more_messages=(
            {"role": "assistant", "content": "text only"},
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "http://b.test/6.png"}}],
            },
        ),
    )
    assert http_image_urls(body) == [
        "https://a.test/1.png",
        "http://a.test/2.png",
        "https://a.test/3.png",
        "https://a.test/4.png",
        "HTTPS://a.test/5.png",
        "http://b.test/6.png",
    ]


def test_http_image_urls_skips_other_schemes_and_non_image_parts() -> None:
    body = _body(
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "file:///srv/media/a.png"}},
        {"type": "image_url", "image_url": {"url": "httpx://a.test/a.png"}},
        {"type": "image_url", "image_url": {"url": "ftp://a.test/a.png"}},
        {"type": "text", "text": "hi", "image_url": "http://a.test/text.png"},
        {
            "type": "video_url",
            "video_url": {"url": "http://a.test/v.mp4"},
            "image_url": "http://a.test/v.png",
        },
        {"type": "audio_url", "audio_url": {"url": "http://a.test/a.wav"}},
    )
    assert http_image_urls(body) == []


def test_http_image_urls_follows_vllm_uuid_rule() -> None:
    # vLLM reads `image_url` of any part that carries a uuid, whatever its type.
    body = _body({"type": "text", "text": "hi", "image_url": "http://a.test/u.png", "uuid": "u1"})
    assert http_image_urls(body) == ["http://a.test/u.png"]


@pytest.mark.parametrize(
    "body",
    [
        None,
        "text",
        [],
        {},
        {"messages": None},
        {"messages": "hi"},
        {"messages": [None, 3, "x", {"role": "user"}, {"content": "hi"}, {"content": {"a": 1}}]},
        _body(None, 3, "text", [], {"type": "image_url"}, {"type": "image_url", "image_url": None}),
        _body({"type": "image_url", "image_url": {"url": 5}}, {"image_url": {"url": None}}),
        _body({"type": 5, "image_url": "http://a.test/x.png"}),
    ],
)
def test_http_image_urls_never_raises_on_malformed_bodies(body: object) -> None:
    assert http_image_urls(body) == []
