"""Placeholder expansion and the `features` object of a GenerateRequest (vLLM 0.33 layout).

`features` = {"mm_hashes": {modality: [hash]}, "mm_placeholders": {modality: [{offset, length}]},
"kwargs_data": {modality: [b64]} | null, "mm_metadata": {modality: [b64 | null]} | null};
with `mm_payload: "none"` only hashes and placeholders are sent (docs/multimodal-design.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from render_service.errors import BadRequestError
from render_service.mm.family import metadata_item
from render_service.mm.serde import FieldElem, encode_item_b64

__all__ = ["build_features", "expand_placeholders"]

MODALITY = "image"


def expand_placeholders(
    token_ids: Sequence[int], image_token_id: int, replacements: Sequence[Sequence[int]]
) -> tuple[list[int], list[dict[str, int]]]:
    """Replace the i-th `image_token_id` by replacements[i]; return ids and placeholder ranges."""
    positions = [i for i, token in enumerate(token_ids) if token == image_token_id]
    if len(positions) != len(replacements):
        raise BadRequestError(
            f"The rendered prompt has {len(positions)} image placeholder tokens but the request has "
            f"{len(replacements)} images (does the chat template emit one per image part?).",
            param="messages",
        )
    expanded: list[int] = []
    ranges: list[dict[str, int]] = []
    previous = 0
    for position, replacement in zip(positions, replacements, strict=True):
        expanded.extend(token_ids[previous:position])
        ranges.append({"offset": len(expanded), "length": len(replacement)})
        expanded.extend(replacement)
        previous = position + 1
    expanded.extend(token_ids[previous:])
    return expanded, ranges


def build_features(
    hashes: Sequence[str],
    ranges: Sequence[Mapping[str, int]],
    items: Sequence[Mapping[str, FieldElem]] | None,
    metadata_keys: frozenset[str],
) -> dict[str, Any]:
    """The features dict; `items` None means `mm_payload: "none"` (hashes and placeholders only)."""
    kwargs_data = metadata = None
    if items is not None:
        kwargs_data = {MODALITY: [encode_item_b64(item) for item in items]}
        subs = [metadata_item(item, metadata_keys) for item in items]
        if any(sub is not None for sub in subs):
            metadata = {MODALITY: [None if sub is None else encode_item_b64(sub) for sub in subs]}
    return {
        "mm_hashes": {MODALITY: list(hashes)},
        "mm_placeholders": {MODALITY: [dict(r) for r in ranges]},
        "kwargs_data": kwargs_data,
        "mm_metadata": metadata,
    }
