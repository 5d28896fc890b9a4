"""A request's images, from `ImageRef`s to `features` (sans-IO, synchronous, per worker).

Order (as vLLM 0.33): count check, load + decode every image (bad ones fail before any
processing), hash each one, process each one through the model family (or take it from the
processed-image cache), then expand the template's image tokens and build `features`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from render_service.errors import BadRequestError
from render_service.mm.cache import ProcessedImageCache
from render_service.mm.family import ImageFamily, ProcessedImage, in_model_dtype
from render_service.mm.features import build_features, expand_placeholders
from render_service.mm.hashing import hash_image
from render_service.mm.media import LoadedImage, MediaSource, background_color, load_image_url
from render_service.mm.refs import ImageRef, ImageSlots

__all__ = ["ImagePipeline", "ImageSettings", "PreparedImages", "processor_kwargs_for_images"]

# vLLM _HF_MODALITY_PROCESSOR_KWARGS: per-modality scoped processor kwargs.
_OTHER_MODALITY_KWARGS = ("videos_kwargs", "audio_kwargs")


@dataclass(frozen=True, slots=True)
class ImageSettings:
    model_id: str  # the model path as given: part of every mm_hash (vLLM model_config.model)
    hasher: str
    float_dtype: str
    max_images: int
    max_image_pixels: int
    max_image_bytes: int
    allowed_media_dir: Path | None
    interleave_strings: bool = False


@dataclass(frozen=True, slots=True)
class PreparedImages:
    hashes: list[str]
    processed: list[ProcessedImage]


class ImagePipeline:
    def __init__(self, family: ImageFamily, settings: ImageSettings, cache: ProcessedImageCache) -> None:
        self.family = family
        self.settings = settings
        self.cache = cache

    @property
    def slots(self) -> ImageSlots:
        return ImageSlots(self.family.placeholder, self.settings.interleave_strings)

    def prepare(
        self,
        refs: Sequence[ImageRef],
        *,
        fetched: Mapping[str, bytes] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> PreparedImages:
        settings = self.settings
        if len(refs) > settings.max_images:
            raise BadRequestError(
                f"At most {settings.max_images} image(s) may be provided in one prompt; got {len(refs)}.",
                param="messages",
            )
        source = MediaSource(
            max_image_pixels=settings.max_image_pixels,
            allowed_media_dir=settings.allowed_media_dir,
            max_image_bytes=settings.max_image_bytes,
            fetched=fetched,
            background=background_color(media_io_kwargs),
        )
        loaded = [load_image_url(ref.url, source) for ref in refs]
        hash_args = {"media_io_kwargs": media_io_kwargs, "mm_processor_kwargs": mm_processor_kwargs}
        hashes = [self._mm_hash(image, ref.uuid, hash_args) for image, ref in zip(loaded, refs, strict=True)]
        processor_kwargs = processor_kwargs_for_images(mm_processor_kwargs)
        processed = [
            self._processed(image, mm_hash if ref.uuid is None else self._mm_hash(image, None, hash_args), processor_kwargs)
            for image, ref, mm_hash in zip(loaded, refs, hashes, strict=True)
        ]
        return PreparedImages(hashes, processed)

    def expand(self, token_ids: Sequence[int], prepared: PreparedImages) -> tuple[list[int], list[dict[str, int]]]:
        replacements = [self.family.replacement(item) for item in prepared.processed]
        return expand_placeholders(token_ids, self.family.image_token_id, replacements)

    def features(
        self, prepared: PreparedImages, ranges: Sequence[Mapping[str, int]], *, with_tensors: bool
    ) -> dict[str, Any]:
        items = self.family.kwargs_items(prepared.processed, self.settings.float_dtype) if with_tensors else None
        return build_features(prepared.hashes, ranges, items, self.family.metadata_keys)

    def _mm_hash(self, image: LoadedImage, uuid: str | None, hash_args: Mapping[str, Any]) -> str:
        try:
            return hash_image(
                image, model_id=self.settings.model_id, algorithm=self.settings.hasher, uuid=uuid, **hash_args
            )
        except (TypeError, ValueError) as exc:  # e.g. an integer too large for int64 in the kwargs
            raise BadRequestError(f"Cannot hash the multimodal kwargs: {exc}", param="mm_processor_kwargs") from exc

    def _processed(self, image: LoadedImage, content_key: str, kwargs: Mapping[str, Any]) -> ProcessedImage:
        """The processed image, from the cache when this content was processed before.

        `content_key` is a hash of the image bytes and the processing kwargs (never the
        client's uuid), so equal keys mean equal processing results.
        """
        cached = self.cache.get(content_key)
        if cached is not None:
            return cached
        try:
            processed = self.family.process(image.image, kwargs)
        except TypeError as exc:  # an mm_processor_kwargs key the processor does not take
            raise BadRequestError(f"Invalid mm_processor_kwargs: {exc}", param="mm_processor_kwargs") from exc
        processed = in_model_dtype(processed, self.settings.float_dtype)
        self.cache.put(content_key, processed)
        return processed


def processor_kwargs_for_images(mm_processor_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Flat kwargs for the image processor: shared keys plus the `images_kwargs` scope."""
    kwargs = dict(mm_processor_kwargs or {})
    scoped = kwargs.pop("images_kwargs", None) or {}
    for key in _OTHER_MODALITY_KWARGS:
        kwargs.pop(key, None)
    if not isinstance(scoped, dict):
        raise BadRequestError("mm_processor_kwargs.images_kwargs must be an object.", param="mm_processor_kwargs")
    return {**kwargs, **scoped}
