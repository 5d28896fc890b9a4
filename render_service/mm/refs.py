"""How a request names its images and how a model takes them: the plain values render's
message normalisation hands to the image pipeline (so mm needs nothing from render)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ImageRef", "ImageSlots"]


@dataclass(frozen=True, slots=True)
class ImageRef:
    """One image part, in request order: its URL and the client's optional `uuid`."""

    url: str
    uuid: str | None


@dataclass(frozen=True, slots=True)
class ImageSlots:
    """How a model takes images in a conversation (None: the model takes no images)."""

    placeholder: str  # the text "string" templates get per image
    interleave_strings: bool = False
