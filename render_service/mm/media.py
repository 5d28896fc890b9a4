"""OpenAI `image_url` content parts -> decoded, guarded Pillow images (sans-IO, synchronous).

Theory of operation (mirrors vLLM 0.33 `MediaConnector.load_from_url` + `ImageMediaIO.load_bytes`,
see docs/multimodal-design.md section 5):

1. The URL is classified: `data:` (base64 only), `file:` (only under an allowed media folder,
   checked on the fully resolved path so `..` and symlinks cannot escape), `http(s):` (the bytes
   the HTTP layer fetched beforehand under its policy, `http.media_fetch`; the core does no network IO)
   and anything else (refused).
2. The bytes are opened with Pillow restricted to vLLM's format allowlist. `Image.open` reads
   only the header, so the pixel count is checked *before* the pixels are decoded; Pillow's own
   decompression-bomb error (for sizes far beyond its default limit) becomes the same 400.
3. `load()` decodes fully; truncated or corrupt data fails here. EXIF orientation is applied and
   the image converted to RGB (transparent images composited on white), as vLLM does.
4. The original encoded bytes are kept next to the image: vLLM's `mm_hash` is computed over
   them (plus `io_config` when the mode conversion changed the image), not over pixels.

Every failure is a `BadRequestError` (400) with a message that says what to fix.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from PIL import Image, ImageOps, UnidentifiedImageError

from render_service.errors import BadRequestError

__all__ = [
    "ALLOWED_IMAGE_FORMATS",
    "DEFAULT_MAX_IMAGE_BYTES",
    "LoadedImage",
    "MediaSource",
    "background_color",
    "decode_image",
    "load_image_url",
]

# vLLM 0.33 `vllm.multimodal.image.ALLOWED_IMAGE_FORMATS`: the same set, so a client of
# `vllm launch render` sees the same formats accepted.
ALLOWED_IMAGE_FORMATS: tuple[str, ...] = (
    "AVIF", "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF",
    "ICNS", "ICO", "IM", "IMT", "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP", "PCD", "PCX",
    "PIXAR", "PNG", "PPM", "PSD", "QOI", "SGI", "SPIDER", "SUN", "TGA", "TIFF", "WEBP", "XBM",
    "XPM", "XVTHUMB",
)  # fmt: skip
# Encoded size of one local image file (data URIs are already bounded by the body limit).
DEFAULT_MAX_IMAGE_BYTES = 32 * 1024 * 1024
# vLLM ImageMediaIO defaults: target mode and the background for transparent pixels.
IMAGE_MODE = "RGB"
RGBA_BACKGROUND = (255, 255, 255)
_PARAM = "messages"


@dataclass(frozen=True, slots=True)
class LoadedImage:
    """A decoded RGB image plus what vLLM hashes it by."""

    image: Image.Image
    original_bytes: bytes
    # Set when the RGB conversion changed the image (vLLM adds it to the hash input).
    io_config: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class MediaSource:
    """Where one request's image bytes may come from, and the limits on them."""

    max_image_pixels: int
    allowed_media_dir: Path | None = None
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    fetched: Mapping[str, bytes] | None = None  # http(s) URL -> bytes the HTTP layer fetched
    background: tuple[int, int, int] = RGBA_BACKGROUND


def load_image_url(url: str, source: MediaSource) -> LoadedImage:
    """Decode the image behind one `image_url` (data URI, allowed local file or fetched URL)."""
    if url[:5].lower() == "data:":
        data = _data_url_bytes(url)
    else:
        scheme = urlsplit(url).scheme.lower()
        if scheme in ("http", "https"):
            data = _fetched_bytes(url, source.fetched)
        elif scheme == "file":
            data = _file_url_bytes(url, source.allowed_media_dir, source.max_image_bytes)
        else:
            raise BadRequestError("The URL must be either a HTTP, data or file URL.", param=_PARAM)
    return decode_image(data, max_image_pixels=source.max_image_pixels, background=source.background)


def _fetched_bytes(url: str, fetched: Mapping[str, bytes] | None) -> bytes:
    data = (fetched or {}).get(url)
    if data is None:
        raise BadRequestError(
            "Fetching http(s) image URLs is not enabled on this render service; send the image "
            "as a base64 data URI (or start the server with --allowed-media-domains).",
            param=_PARAM,
        )
    return data


def background_color(media_io_kwargs: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """The `rgba_background_color` of trusted `media_io_kwargs["image"]` (vLLM ImageMediaIO)."""
    image_kwargs = dict((media_io_kwargs or {}).get("image") or {})
    unknown = set(image_kwargs) - {"rgba_background_color"}
    if unknown:
        raise BadRequestError(
            f"Unsupported media_io_kwargs for images: {sorted(unknown)}; only "
            "rgba_background_color is supported.",
            param="media_io_kwargs",
        )
    color = image_kwargs.get("rgba_background_color", RGBA_BACKGROUND)
    if isinstance(color, list):
        color = tuple(color)
    if not (
        isinstance(color, tuple)
        and len(color) == 3
        and all(type(c) is int and 0 <= c <= 255 for c in color)
    ):
        raise BadRequestError(
            "rgba_background_color must be a list or tuple of 3 integers in the range [0, 255].",
            param="media_io_kwargs",
        )
    return color


def _data_url_bytes(url: str) -> bytes:
    # RFC 2397: data:[<mediatype>][;<param>=<value>]*[;base64],<data>
    spec, sep, payload = url[5:].partition(",")
    if not sep:
        raise BadRequestError(
            f"Invalid data URL {url[:32]!r}: missing ',' separator.", param=_PARAM
        )
    _media_type, sep, encoding = spec.rpartition(";")
    if not sep or encoding != "base64":
        raise BadRequestError("Only base64 data URLs are supported for now.", param=_PARAM)
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise BadRequestError(f"Invalid base64 in image data URL: {exc}", param=_PARAM) from exc


def _file_url_bytes(url: str, allowed_media_dir: Path | None, max_bytes: int) -> bytes:
    if allowed_media_dir is None:
        raise BadRequestError(
            "Cannot load local files: no allowed media folder is configured on this server.",
            param=_PARAM,
        )
    parts = urlsplit(url)
    path = Path(url2pathname(parts.netloc + parts.path))
    allowed = allowed_media_dir.resolve()
    # resolve() follows symlinks, so a link inside the folder that points out is refused too.
    resolved = path.resolve()
    if allowed not in resolved.parents:
        raise BadRequestError(
            f"The file path {path} must be inside the allowed media folder.", param=_PARAM
        )
    try:
        with resolved.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise BadRequestError(
            f"Cannot read image file {path}: {exc.strerror}", param=_PARAM
        ) from exc
    if len(data) > max_bytes:
        raise BadRequestError(
            f"Image file {path} is larger than the limit of {max_bytes} bytes.", param=_PARAM
        )
    return data


def decode_image(
    data: bytes, *, max_image_pixels: int, background: tuple[int, int, int] = RGBA_BACKGROUND
) -> LoadedImage:
    """Pillow-decode encoded image bytes with the pixel, format and truncation guards."""
    try:
        image: Image.Image = Image.open(BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)
    except Image.DecompressionBombError as exc:
        raise _too_many_pixels(str(exc), max_image_pixels) from exc
    except UnidentifiedImageError as exc:
        raise BadRequestError(
            "Failed to load image: unrecognised or unsupported image format "
            f"(supported: {', '.join(ALLOWED_IMAGE_FORMATS)}).",
            param=_PARAM,
        ) from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadRequestError(f"Failed to load image: {exc}", param=_PARAM) from exc
    width, height = image.size
    if width * height > max_image_pixels:
        raise _too_many_pixels(f"{width}x{height} ({width * height} pixels)", max_image_pixels)
    try:
        image = _exif_transposed(image)
        image.load()
    except Image.DecompressionBombError as exc:
        raise _too_many_pixels(str(exc), max_image_pixels) from exc
    # Pillow raises SyntaxError (not OSError) for some broken PNG chunks.
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadRequestError(
            f"Failed to load image (corrupt or truncated?): {exc}", param=_PARAM
        ) from exc
    converted = _to_rgb(image, background)
    io_config = None
    if converted is not image:
        io_config = {"image_mode": IMAGE_MODE, "rgba_background_color": background}
    return LoadedImage(converted, data, io_config)


def _too_many_pixels(detail: str, limit: int) -> BadRequestError:
    return BadRequestError(
        f"Image too large: {detail} exceeds the maximum of {limit} pixels.", param=_PARAM
    )


def _exif_transposed(image: Image.Image) -> Image.Image:
    """Apply EXIF orientation; malformed EXIF is ignored (vLLM suppresses it too)."""
    try:
        return ImageOps.exif_transpose(image)
    except (SyntaxError, ValueError, KeyError, TypeError, struct.error):
        return image


def _to_rgb(image: Image.Image, background_rgb: tuple[int, int, int]) -> Image.Image:
    """vLLM convert_image_mode(image, "RGB"): composite transparency on white, else convert."""
    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        rgba = image if image.mode == "RGBA" else image.convert("RGBA")
        background = Image.new("RGB", rgba.size, background_rgb)
        background.paste(rgba, mask=rgba.split()[3])
        return background
    if image.mode == IMAGE_MODE:
        return image
    return image.convert(IMAGE_MODE)
