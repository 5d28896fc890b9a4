"""Fetch the http(s) image URLs of a chat request, with strict limits (off by default).

Theory of operation. The render core is sans-IO and synchronous, so fetching happens before it,
in the async HTTP layer:

1. `http_image_urls(body)` collects the distinct http(s) URLs of the image parts of a raw chat
   request body. It never raises: a malformed body is render's to reject, with render's message.
2. `fetch_images(urls, policy, client)` checks *every* URL against the `FetchPolicy` before any
   network traffic (fetching enabled, http/https scheme, no credentials in the URL, an allowed
   host), then downloads them concurrently (at most `max_concurrency` at a time). The first
   failure cancels the other downloads and is raised as a `BadRequestError` (400).
3. The renderer gets a `Mapping[str, bytes]` (URL as written in the request -> encoded bytes)
   and decodes them like data URIs.

`MediaFetcher` bundles the three for a server (one policy, one pooled client, the per-request
image count limit); the render app and the gateway both use it before rendering.

Per URL, one deadline (`timeout_s`) covers the connection, every redirect hop and the whole
body. Redirects are followed by hand (`follow_redirects=False`) so each hop's target passes the
same scheme and domain checks as the first URL; at most `max_redirects` hops. The body is read
as raw network chunks and reading stops as soon as the URL's bytes exceed `max_bytes` or the
request's bytes exceed `max_total_bytes`, so no more than the limit plus one network read
(64 KiB in httpcore) is ever held. `Accept-Encoding: identity` is requested and compressed
responses are refused: httpx would inflate a whole compressed chunk at once, so one 64 KiB
gzip chunk could become tens of MB before any limit is checked.

Client (`make_client`): `trust_env=False`, so HTTP(S)_PROXY / NO_PROXY / SSL_CERT_FILE and
`~/.netrc` of the server's environment play no part (no netrc credentials sent to user-chosen
hosts, no proxy deciding where "allowed" hosts really are), and a cookie jar that stores
nothing, so one request's fetch never replays cookies set during another's.

Not protected against: DNS answers. An allowed name that resolves to a private or link-local
address is fetched; the allowlist is the control, and `"*"` (any host) also allows the
cluster's internal services. Use it only where that is acceptable.

Differences from vLLM 0.33 (`vllm/multimodal/media/connector.py`, `vllm/connections.py`,
`vllm/envs.py`); ours is stricter everywhere:

- Off by default. vLLM fetches from any host when `--allowed-media-domains` is unset; here an
  empty allowlist disables fetching and `"*"` is the explicit "any host".
- Matching: vLLM compares the hostname exactly with the list entries. Ours is case-insensitive,
  ignores a trailing dot, and also accepts `*.example.com` entries (subdomains only, not
  `example.com` itself).
- Redirects: vLLM lets aiohttp follow up to 10 redirects (`VLLM_MEDIA_URL_ALLOW_REDIRECTS=1`
  by default) and checks the domain of the first URL only, so an open redirect on an allowed
  host reaches any host. Ours checks every hop, at most `max_redirects` (3) hops.
- Size: vLLM allows 256 MiB per download (`VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB`) and 256 MiB per
  request (`VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB`, retries included); ours 32 MiB per image
  and 128 MiB per request. Both reject an oversized Content-Length before reading.
- Time: vLLM's 5 s (`VLLM_IMAGE_FETCH_TIMEOUT`) is per attempt and it retries timeouts,
  connection errors and 5xx up to `VLLM_MEDIA_FETCH_MAX_RETRIES=3` times with 4x longer
  timeouts (5, 20, 80 s) and sleeps (1, 4 s) in between: about 110 s worst case per image. Ours
  makes one attempt bounded by `timeout_s` in total; the client may retry.
- Compression: aiohttp inflates gzip/deflate bodies; ours asks for identity and refuses
  encoded bodies. vLLM's session has `trust_env=True` (proxies, .netrc); ours does not.
- Caching and duplicates: vLLM can cache downloads on disk (`VLLM_MEDIA_CACHE`) and downloads
  a URL repeated in one request once per occurrence; ours has no cache and downloads each
  distinct URL once per request.
- Errors: vLLM answers 400 for a refused domain or scheme, 422 (UnprocessableEntityError,
  param "image_url") for 4xx answers other than 408/429 and for oversized downloads, and lets
  timeouts, connection errors and 5xx escape as 500s. Ours is always 400 (param "messages").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from render_service import __version__
from render_service.errors import BadRequestError, ConfigError

__all__ = ["FetchPolicy", "MediaFetcher", "fetch_images", "http_image_urls", "make_client"]

MiB = 1024 * 1024
_PARAM = "messages"
_HTTP_SCHEMES = ("http", "https")
# Requested on every hop: the raw bytes are the image (and what vLLM's mm_hash is taken over).
_REQUEST_HEADERS = {"accept": "image/*, */*;q=0.5", "accept-encoding": "identity"}
_IDENTITY_ENCODINGS = ("", "identity")
_SHOWN_URL_CHARS = 120


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """What http(s) image fetching may do; the default fetches nothing."""

    # Hostnames that may be fetched from: exact (case-insensitive), `*.example.com` for its
    # subdomains, or a single "*" for any host. Empty: fetching is disabled.
    allowed_domains: tuple[str, ...] = ()
    # Total per URL: connect, every redirect hop and the whole body (vLLM's
    # VLLM_IMAGE_FETCH_TIMEOUT default).
    timeout_s: float = 5.0
    max_bytes: int = 32 * MiB
    # Across all URLs of one request.
    max_total_bytes: int = 128 * MiB
    # Each hop's target passes the same checks as the first URL; 0 refuses any redirect.
    max_redirects: int = 3
    # Downloads in flight at once for one request.
    max_concurrency: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.allowed_domains, str):  # type: ignore[unreachable]  # callers are untyped
            raise ConfigError("allowed_domains must be a tuple of hostnames, not a string")
        # A list from a CLI parser is fine; keep a tuple so the policy stays hashable.
        object.__setattr__(self, "allowed_domains", tuple(self.allowed_domains))
        for entry in self.allowed_domains:
            _check_domain_entry(entry)
        if not self.timeout_s > 0:
            raise ConfigError(f"The image fetch timeout must be positive; got {self.timeout_s}")
        if self.max_bytes < 1 or self.max_total_bytes < 1:
            raise ConfigError("The image fetch byte limits must be at least 1")
        if self.max_redirects < 0:
            raise ConfigError(f"max_redirects must be >= 0; got {self.max_redirects}")
        if self.max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1; got {self.max_concurrency}")

    @property
    def enabled(self) -> bool:
        return bool(self.allowed_domains)

    def allows_host(self, host: str) -> bool:
        """Whether `host` (as in a URL, any case) matches the allowlist."""
        host = _normalized_host(host)
        if not host:
            return False
        for entry in self.allowed_domains:
            entry = _normalized_host(entry)
            if entry == "*" or entry == host:
                return True
            if entry.startswith("*.") and host.endswith(entry[1:]):
                return True
        return False


def _check_domain_entry(entry: object) -> None:
    if not isinstance(entry, str) or not _normalized_host(entry):
        raise ConfigError(f"Invalid allowed media domain {entry!r}: expected a hostname")
    name = entry.strip().lower()
    if name == "*":
        return
    base = _normalized_host(name.removeprefix("*."))
    if not base or "*" in base:
        raise ConfigError(
            f"Invalid allowed media domain {entry!r}: a wildcard is only allowed as a whole "
            "entry ('*') or as the first label ('*.example.com')"
        )
    bracketed = entry.strip().startswith("[")
    if any(char in base for char in "/@ ") or (":" in base and not bracketed):
        raise ConfigError(
            f"Invalid allowed media domain {entry!r}: expected a bare hostname (no scheme, "
            "port or path; write IPv6 addresses in brackets, e.g. [::1])"
        )


def _normalized_host(host: str) -> str:
    # "Example.COM." and "example.com" name the same host; IPv6 entries may come bracketed.
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


# --- which URLs a request needs -----------------------------------------------------------------


def http_image_urls(body: Any) -> list[str]:
    """The distinct http(s) URLs of the image parts of a raw chat request body, in order.

    Image parts are found as vLLM 0.33 `parse_chat_message_content_mm_part` finds them:
    `type` "image_url" or "input_image", or no `type` (or a `uuid`) with an `image_url` key;
    the URL is `image_url.url` or `image_url` itself. Never raises: anything malformed is left
    for render to reject.
    """
    urls: dict[str, None] = {}
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            url = _image_url_of(part)
            if url is not None and _is_http_url(url):
                urls[url] = None
    return list(urls)


def _image_url_of(part: Any) -> str | None:
    if not isinstance(part, dict):
        return None
    part_type = part.get("type")
    typed_image = part_type in ("image_url", "input_image") and part.get("uuid") is None
    untyped = part_type is None or part.get("uuid") is not None
    if not (typed_image or untyped):
        return None
    value = part.get("image_url")
    if isinstance(value, dict):
        value = value.get("url")
    return value if isinstance(value, str) else None


def _is_http_url(url: str) -> bool:
    scheme, sep, _rest = url.partition(":")
    return bool(sep) and scheme.lower() in _HTTP_SCHEMES


# --- the client ---------------------------------------------------------------------------------


def make_client(policy: FetchPolicy) -> httpx.AsyncClient:
    """The pooled client for image fetches; one per process, closed at shutdown.

    `trust_env=False` and a cookie jar that keeps nothing: see the module docstring.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(policy.timeout_s),
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        follow_redirects=False,
        trust_env=False,
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        headers={"user-agent": f"render-service/{__version__}"},
    )


# --- per server -----------------------------------------------------------------------------------


class MediaFetcher:
    """Fetches the http(s) images of chat bodies under one policy, with one pooled client.

    Fetching is off (nothing fetched, render then refuses http(s) image parts with its own
    message) when the policy allows no domain.
    """

    def __init__(self, policy: FetchPolicy, max_images: int) -> None:
        self.policy = policy
        self.max_images = max_images
        self._client = make_client(policy) if policy.enabled else None

    @classmethod
    def from_config(cls, config: Any) -> MediaFetcher:
        """From a `ServiceConfig` (its --allowed-media-domains and image limits)."""
        limits = config.limits
        policy = FetchPolicy(
            allowed_domains=config.allowed_media_domains,
            timeout_s=limits.media_fetch_timeout_s,
            max_bytes=limits.max_image_bytes,
        )
        return cls(policy, limits.max_images)

    async def fetch(self, body: Any) -> dict[str, bytes]:
        """URL -> bytes for every http(s) image URL of a raw chat body (empty when off)."""
        if self._client is None:
            return {}
        urls = http_image_urls(body)
        if not urls:
            return {}
        if len(urls) > self.max_images:
            raise BadRequestError(
                f"At most {self.max_images} image(s) may be provided in one prompt; "
                f"got {len(urls)}.",
                param=_PARAM,
            )
        return await fetch_images(urls, self.policy, self._client)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


# --- fetching -----------------------------------------------------------------------------------


async def fetch_images(
    urls: Iterable[str], policy: FetchPolicy, client: httpx.AsyncClient
) -> dict[str, bytes]:
    """Download every distinct URL (concurrently, within the policy): URL -> encoded bytes.

    Raises:
        BadRequestError: fetching disabled, a refused URL or redirect, a non-2xx answer, a
            timeout, a body over the limits, a compressed body or a connection failure.
    """
    unique = list(dict.fromkeys(urls))
    if not unique:
        return {}
    if not policy.enabled:
        raise BadRequestError(
            "Fetching http(s) image URLs is not enabled on this render service; send a data "
            "URI or start with --allowed-media-domains.",
            param=_PARAM,
        )
    targets = [_checked_url(url, policy) for url in unique]
    gate = asyncio.Semaphore(policy.max_concurrency)
    budget = _Budget(policy.max_total_bytes)

    async def fetch(target: httpx.URL) -> bytes:
        async with gate:
            return await _fetch_one(target, policy, client, budget)

    tasks = [asyncio.create_task(fetch(target)) for target in targets]
    try:
        bodies = await asyncio.gather(*tasks)
    finally:
        # After the first failure the others are useless: stop them and free their connections.
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    return dict(zip(unique, bodies, strict=True))


def _checked_url(url: str | httpx.URL, policy: FetchPolicy) -> httpx.URL:
    """Parse one URL (the request's or a redirect's) and apply the scheme, userinfo, host checks."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise BadRequestError(f"Invalid image URL {_shown_raw(url)}: {exc}", param=_PARAM) from exc
    if parsed.scheme not in _HTTP_SCHEMES:
        raise BadRequestError(
            f"Image URL {_shown_raw(url)} must use http or https to be fetched.", param=_PARAM
        )
    if parsed.userinfo:
        raise BadRequestError(
            f"Image URL {_shown(parsed)} must not contain credentials.", param=_PARAM
        )
    if not parsed.host:
        raise BadRequestError(f"Image URL {_shown_raw(url)} has no host.", param=_PARAM)
    # Entries may name an internationalised host in Unicode or in its IDNA (xn--) form.
    ascii_host = parsed.raw_host.decode("ascii")
    if not (policy.allows_host(parsed.host) or policy.allows_host(ascii_host)):
        raise BadRequestError(
            f"The URL must be from one of the allowed domains: {list(policy.allowed_domains)}. "
            f"Input URL domain: {parsed.host}",
            param=_PARAM,
        )
    return parsed


@dataclass(slots=True)
class _Budget:
    """Bytes received by all downloads of one request (one event loop: no lock needed)."""

    limit: int
    used: int = 0

    def charge(self, size: int) -> None:
        self.used += size
        if self.used > self.limit:
            raise BadRequestError(
                f"The images of this request total more than {self.limit} bytes.", param=_PARAM
            )


async def _fetch_one(
    url: httpx.URL, policy: FetchPolicy, client: httpx.AsyncClient, budget: _Budget
) -> bytes:
    try:
        async with asyncio.timeout(policy.timeout_s):
            return await _follow(url, policy, client, budget)
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise BadRequestError(
            f"Timed out after {policy.timeout_s:g} s fetching image URL {_shown(url)}.",
            param=_PARAM,
        ) from exc
    except httpx.TransportError as exc:
        raise BadRequestError(
            f"Could not fetch image URL {_shown(url)}: {exc or type(exc).__name__}",
            param=_PARAM,
        ) from exc


async def _follow(
    url: httpx.URL, policy: FetchPolicy, client: httpx.AsyncClient, budget: _Budget
) -> bytes:
    redirects = 0
    while True:
        request = client.build_request("GET", url, headers=_REQUEST_HEADERS)
        response = await client.send(request, stream=True, follow_redirects=False)
        try:
            if response.next_request is None:
                _check_status(response, url)
                return await _read_body(response, url, policy, budget)
            if redirects == policy.max_redirects:
                raise _too_many_redirects(response, url, policy.max_redirects)
            redirects += 1
            url = _redirect_target(response.next_request.url, url, policy)
        finally:
            await response.aclose()


def _redirect_target(target: httpx.URL, source: httpx.URL, policy: FetchPolicy) -> httpx.URL:
    try:
        return _checked_url(target, policy)
    except BadRequestError as exc:
        raise BadRequestError(
            f"Image URL {_shown(source)} redirected to a refused URL: {exc.message}", param=_PARAM
        ) from exc


def _too_many_redirects(response: httpx.Response, url: httpx.URL, limit: int) -> BadRequestError:
    if limit == 0:
        detail = "redirects are not followed on this render service"
    else:
        detail = f"more than {limit} redirects"
    return BadRequestError(
        f"Image URL {_shown(url)} answered HTTP {response.status_code} (a redirect): {detail}.",
        param=_PARAM,
    )


def _check_status(response: httpx.Response, url: httpx.URL) -> None:
    if not response.is_success:
        raise BadRequestError(
            f"Failed to fetch image URL {_shown(url)}: HTTP {response.status_code} "
            f"{response.reason_phrase}".rstrip(),
            param=_PARAM,
        )


async def _read_body(
    response: httpx.Response, url: httpx.URL, policy: FetchPolicy, budget: _Budget
) -> bytes:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in _IDENTITY_ENCODINGS:
        raise BadRequestError(
            f"Image URL {_shown(url)} answered with Content-Encoding {encoding!r}; only "
            "uncompressed (identity) responses are accepted.",
            param=_PARAM,
        )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > policy.max_bytes:
        raise _too_large(url, policy.max_bytes)
    chunks: list[bytes] = []
    received = 0
    # Raw network reads (at most 64 KiB each in httpcore), so the limit is checked per read.
    async for chunk in response.aiter_raw():
        received += len(chunk)
        if received > policy.max_bytes:
            raise _too_large(url, policy.max_bytes)
        budget.charge(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(url: httpx.URL, limit: int) -> BadRequestError:
    return BadRequestError(
        f"Image at {_shown(url)} is larger than the limit of {limit} bytes.", param=_PARAM
    )


def _shown(url: httpx.URL) -> str:
    """The URL for messages, without credentials, query or fragment (signed tokens live there)."""
    return _shortened(str(url.copy_with(userinfo=b"", query=None, fragment=None)))


def _shown_raw(url: str | httpx.URL) -> str:
    """`_shown` for a URL httpx may not parse."""
    text = str(url).split("?", 1)[0].split("#", 1)[0]
    scheme, sep, rest = text.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        text = f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
    return _shortened(text)


def _shortened(text: str) -> str:
    if len(text) > _SHOWN_URL_CHARS:
        text = text[: _SHOWN_URL_CHARS - 3] + "..."
    return repr(text)
