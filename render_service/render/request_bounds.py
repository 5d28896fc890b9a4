"""Cheap bounds on a raw (still untrusted) chat body, checked before any costly work.

Templating cost grows with the number of messages and tools, and a body may name http(s)
images to fetch: both the render app and the gateway refuse an over-limit body before they
fetch anything or hand it to a render thread.
"""

from __future__ import annotations

from typing import Any

from render_service.config import Limits
from render_service.errors import BadRequestError

__all__ = ["check_counts"]


def check_counts(request: Any, limits: Limits) -> None:
    """--max-messages / --max-tools on a raw chat body (not a dict: left to validation)."""
    if not isinstance(request, dict):
        return
    for field, limit, flag in (
        ("messages", limits.max_messages, "--max-messages"),
        ("tools", limits.max_tools, "--max-tools"),
    ):
        items = request.get(field)
        if isinstance(items, list) and len(items) > limit:
            raise BadRequestError(
                f"The request has {len(items)} {field}; the limit is {limit} ({flag}).", param=field
            )
