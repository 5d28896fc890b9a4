"""vLLM 0.33's multimodal item hash (`features.mm_hashes`), for images loaded by `media`.

PROTOTYPE (issue 7, slice 1): not wired into render yet.

vLLM (`multimodal/processing/inputs.py::get_mm_hashes`, `multimodal/hasher.py`) hashes, per item,
the keyword set {modality: item, model_id: <--model as given>, plus the non-empty of
media_io_kwargs={modality: {...}} and mm_processor_kwargs={...}} in sorted key order, as a
uniquely decodable byte stream (docs/multimodal-design.md section 2):

    K(key, v)  = F(key) V(v)                 F(b) = len(b) as 8 bytes little-endian, then b
    V(None)    = 00
    V(seq)     = 01 len8 V(e)...             (lists and tuples)
    V(dict)    = 02 len8 (F(str(k)) V(v))... (dict order)
    V(leaf)    = 03 S(leaf)
    S(bytes) = F(b); S(str) = F(utf8); S(int|float|bool) = F(numpy.array(x).tobytes())
    S(image) = K("image", original_bytes)                          no mode conversion
             | K("image", {"io_config": {...}, "data": original_bytes}) converted to RGB
             | F(uuid.bytes)                                       EXIF ImageID is a UUID

Default algorithm is blake3 (needs the `blake3` package); sha256/sha512 come from hashlib.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from PIL import ExifTags, Image

from render_service.mm.media import LoadedImage

__all__ = ["hash_image", "hash_kwargs"]

_NONE, _SEQUENCE, _MAPPING, _LEAF = b"\x00", b"\x01", b"\x02", b"\x03"
# vLLM _HF_MODALITY_PROCESSOR_KWARGS: per-modality scoped processor kwargs.
_SCOPED_KWARGS = {"image": "images_kwargs", "video": "videos_kwargs", "audio": "audio_kwargs"}


def hash_image(
    image: LoadedImage,
    *,
    model_id: str,
    algorithm: str = "blake3",
    media_io_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
    uuid: str | None = None,
) -> str:
    """The `mm_hashes["image"][i]` vLLM computes for this image and these request kwargs.

    A client `uuid` stands for the image: it is the hash itself when no kwargs factor in,
    else it replaces the image in the hashed input.
    """
    factors: dict[str, Any] = {}
    image_io = dict((media_io_kwargs or {}).get("image") or {})
    if image_io:
        factors["media_io_kwargs"] = {"image": image_io}
    processor_kwargs = {
        key: value
        for key, value in (mm_processor_kwargs or {}).items()
        if key not in _SCOPED_KWARGS.values() or key == _SCOPED_KWARGS["image"]
    }
    if processor_kwargs:
        factors["mm_processor_kwargs"] = processor_kwargs
    if uuid is not None and not factors:
        return uuid
    return hash_kwargs(algorithm, model_id=model_id, image=image if uuid is None else uuid, **factors)


def hash_kwargs(algorithm: str, /, **kwargs: Any) -> str:
    hasher = _hasher(algorithm)
    for key, value in sorted(kwargs.items(), key=lambda kv: kv[0]):
        for chunk in _keyed(key, value):
            hasher.update(chunk)
    digest: str = hasher.hexdigest()
    return digest


def _hasher(algorithm: str) -> Any:
    factories: dict[str, Callable[[], Any]] = {"sha256": hashlib.sha256, "sha512": hashlib.sha512}
    if algorithm == "blake3":
        from blake3 import blake3  # optional dependency: only when blake3 hashing is configured

        return blake3()
    if algorithm not in factories:
        raise ValueError(f"Unsupported hash algorithm: {algorithm}")
    return factories[algorithm]()


def _framed(chunk: bytes) -> Iterator[bytes]:
    yield len(chunk).to_bytes(8, "little")
    yield chunk


def _keyed(key: str, value: Any) -> Iterator[bytes]:
    yield from _framed(key.encode("utf-8"))
    yield from _value(value)


def _value(value: Any) -> Iterator[bytes]:
    if value is None:
        yield _NONE
    elif isinstance(value, (list, tuple)):
        yield _SEQUENCE
        yield len(value).to_bytes(8, "little")
        for entry in value:
            yield from _value(entry)
    elif isinstance(value, dict):
        yield _MAPPING
        yield len(value).to_bytes(8, "little")
        for key, entry in value.items():
            yield from _framed(str(key).encode("utf-8"))
            yield from _value(entry)
    else:
        yield _LEAF
        yield from _leaf(value)


def _leaf(value: Any) -> Iterator[bytes]:
    if isinstance(value, bytes):
        yield from _framed(value)
    elif isinstance(value, str):
        yield from _framed(value.encode("utf-8"))
    elif isinstance(value, (int, float)):  # bool included: numpy gives it one byte
        array = np.array(value)
        if array.dtype == object:
            raise ValueError(f"number out of range for hashing: {value!r}")
        yield from _framed(array.tobytes())
    elif isinstance(value, LoadedImage):
        image_id = _exif_image_id(value.image)
        if image_id is not None:
            yield from _framed(image_id)
        elif value.io_config:
            yield from _keyed("image", {"io_config": value.io_config, "data": value.original_bytes})
        else:
            yield from _keyed("image", value.original_bytes)
    else:
        raise TypeError(f"cannot hash {type(value).__name__}")


def _exif_image_id(image: Image.Image) -> bytes | None:
    """vLLM uses the EXIF ImageID as the item's identity when it is a UUID object.

    Pillow returns EXIF values as str/bytes/ints, never `uuid.UUID`, so in practice this is
    always None; kept so the rule is visible and shared with vLLM.
    """
    try:
        image_id = image.getexif().get(ExifTags.Base.ImageID)
    except (OSError, SyntaxError, ValueError, KeyError, TypeError):
        return None
    return image_id.bytes if isinstance(image_id, uuid.UUID) else None
