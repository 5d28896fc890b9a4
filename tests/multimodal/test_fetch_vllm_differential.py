"""`http_image_urls` vs vLLM 0.33's own part parser and URL scheme rule (one ref venv subprocess).

For each content part, vLLM's `parse_chat_message_content_mm_part` says whether it is an image
and with which URL, and urllib3's `parse_url` (what `MediaConnector.load_from_url` uses) says
whether that URL is fetched over http(s). Our list must hold exactly the URLs vLLM would fetch
for parts vLLM accepts, and nothing for parts vLLM reads as another kind. Parts vLLM rejects
are unconstrained: listing one only costs a fetch before render rejects the request.
"""

from __future__ import annotations

from typing import Any

from render_service.http.media_fetch import http_image_urls

from .ref import run_ref_script

_REF_SCRIPT = r"""
import json, sys
from urllib3.util import parse_url
from vllm.renderers.chat_utils.chat_message import parse_chat_message_content_mm_part
out = []
for part in json.load(sys.stdin):
    try:
        kind, content = parse_chat_message_content_mm_part(part)
    except Exception as exc:
        out.append({"outcome": "rejected", "why": type(exc).__name__})
        continue
    url = content if isinstance(content, str) else None
    http = False
    if kind in ("image_url", "input_image") and url is not None:
        scheme = parse_url(url).scheme
        http = scheme in ("http", "https")
    out.append({"outcome": "accepted", "kind": kind, "url": url, "http": http})
print(json.dumps(out))
"""

A = "http://a.test/x.png"
PARTS: list[dict[str, Any]] = [
    {"type": "image_url", "image_url": {"url": A}},
    {"type": "image_url", "image_url": {"url": A, "detail": "high"}},
    {"type": "image_url", "image_url": {"url": "https://a.test/s.png"}},
    {"type": "image_url", "image_url": {"url": "HTTPS://A.test/upper.png"}},
    {"type": "image_url", "image_url": {"url": "Http://a.test/mixed.png"}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "image_url", "image_url": {"url": "file:///srv/a.png"}},
    {"type": "image_url", "image_url": {"url": "httpx://a.test/x.png"}},
    {"type": "image_url", "image_url": {"url": "ftp://a.test/x.png"}},
    {"type": "image_url", "image_url": {"url": A}, "uuid": "u1"},
    {"type": "image_url", "image_url": {"url": A}, "uuid": None},
    {"type": "image_url", "image_url": A},
    {"type": "image_url", "image_url": {"url": None}},
    {"type": "image_url", "image_url": {"url": 5}},
    {"type": "image_url"},
    {"type": "input_image", "image_url": A, "detail": "auto"},
    {"type": "input_image", "image_url": A},
    {"type": "input_image", "image_url": {"url": A}, "detail": "auto"},
    {"type": "input_image", "detail": "auto"},
    {"image_url": A},
    {"image_url": {"url": A}},
    {"image_url": {"url": 7}},
    {"image_url": None},
    {"type": "text", "text": "hi", "image_url": A},
    {"type": "text", "text": "hi", "image_url": A, "uuid": "u2"},
    {"type": "video_url", "video_url": {"url": "http://a.test/v.mp4"}, "image_url": A},
    {"type": "audio_url", "audio_url": {"url": "http://a.test/a.wav"}},
    {"type": 5, "image_url": A},
    {"type": "image_embeds", "image_embeds": "AAAA", "image_url": A},
]


def test_http_image_urls_agrees_with_vllm_on_which_parts_are_fetched() -> None:
    verdicts = run_ref_script(_REF_SCRIPT, PARTS)
    assert len(verdicts) == len(PARTS)
    checked = 0
    for part, verdict in zip(PARTS, verdicts, strict=True):
        ours = http_image_urls({"messages": [{"role": "user", "content": [part]}]})
        if verdict["outcome"] == "rejected":
            continue
        checked += 1
        expected = [verdict["url"]] if verdict["http"] else []
        assert ours == expected, (part, verdict)
    # Most cases must be ones vLLM accepts, or this test proves little.
    assert checked >= 20, verdicts
