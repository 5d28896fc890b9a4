"""render_service.mm.media: image_url loading and its guards (every failure is a clear 400)."""

from __future__ import annotations

import base64
import struct
import zlib
from io import BytesIO
from pathlib import Path

import pytest
from PIL import Image

from render_service.errors import BadRequestError
from render_service.mm.media import MediaSource, load_image_url

BIG = 64 * 1024 * 1024


def _encode(image: Image.Image, fmt: str, **save_kwargs: object) -> bytes:
    buffer = BytesIO()
    image.save(buffer, fmt, **save_kwargs)
    return buffer.getvalue()


def _data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _gradient(size: tuple[int, int] = (9, 7), mode: str = "RGB") -> Image.Image:
    width, height = size
    image = Image.new("RGB", size)
    image.putdata(
        [
            ((x * 29) % 256, (y * 37) % 256, (x * y) % 256)
            for y in range(height)
            for x in range(width)
        ]
    )
    return image.convert(mode)


def _load(url: str, *, pixels: int = BIG, folder: Path | None = None):
    return load_image_url(url, MediaSource(max_image_pixels=pixels, allowed_media_dir=folder))


def _png_claiming_size(width: int, height: int) -> bytes:
    """A 1x1 PNG whose IHDR (with a valid CRC) claims width x height: a header-only bomb."""
    png = bytearray(_encode(Image.new("L", (1, 1)), "PNG"))
    ihdr = 8  # after the signature: length(4) "IHDR"(4) data(13) crc(4)
    png[ihdr + 8 : ihdr + 16] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(png[ihdr + 4 : ihdr + 21])) & 0xFFFFFFFF
    png[ihdr + 21 : ihdr + 25] = struct.pack(">I", crc)
    return bytes(png)


# --- success paths ------------------------------------------------------------------------------


def test_png_data_uri_decodes_to_the_same_pixels_and_keeps_the_original_bytes() -> None:
    source = _gradient()
    data = _encode(source, "PNG")
    loaded = _load(_data_uri(data))
    assert loaded.image.mode == "RGB"
    assert loaded.image.size == (9, 7)
    assert loaded.image.tobytes() == source.tobytes()
    assert loaded.original_bytes == data
    assert loaded.io_config is None


def test_jpeg_data_uri_with_extra_media_type_params() -> None:
    data = _encode(_gradient((16, 16)), "JPEG", quality=90)
    loaded = _load(f"data:image/jpeg;name=x.jpg;base64,{base64.b64encode(data).decode()}")
    assert loaded.image.size == (16, 16)
    assert loaded.original_bytes == data


def test_transparent_png_is_composited_on_white_and_records_io_config() -> None:
    rgba = Image.new("RGBA", (2, 1))
    rgba.putdata([(10, 20, 30, 0), (10, 20, 30, 255)])
    loaded = _load(_data_uri(_encode(rgba, "PNG")))
    assert loaded.image.tobytes() == bytes([255, 255, 255, 10, 20, 30])
    assert loaded.io_config == {"image_mode": "RGB", "rgba_background_color": (255, 255, 255)}


def test_grayscale_is_converted_to_rgb() -> None:
    loaded = _load(_data_uri(_encode(_gradient(mode="L"), "PNG")))
    assert loaded.image.mode == "RGB"
    assert loaded.io_config is not None


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    data = _encode(_gradient((8, 4)), "JPEG", exif=exif)
    assert _load(_data_uri(data, "image/jpeg")).image.size == (4, 8)



# --- data URI errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:image/png;base64", "missing ','"),
        ("data:image/png,rawbytes", "Only base64 data URLs"),
        ("data:image/png;base64,@@not base64@@", "Invalid base64"),
    ],
)
def test_malformed_data_uris_are_400(url: str, message: str) -> None:
    with pytest.raises(BadRequestError, match=message) as info:
        _load(url)
    assert info.value.status == 400


# --- decoding guards ----------------------------------------------------------------------------


def test_bytes_that_are_not_an_image_are_400() -> None:
    with pytest.raises(BadRequestError, match="unrecognised or unsupported image format"):
        _load(_data_uri(b"this is plain text, not an image"))


def test_a_format_pillow_reads_but_vllm_does_not_allow_is_400() -> None:
    data = _encode(_gradient(), "EPS")
    assert Image.open(BytesIO(data)).format == "EPS"  # Pillow alone would accept it
    with pytest.raises(BadRequestError, match="unsupported image format"):
        _load(_data_uri(data, "application/postscript"))


def test_truncated_png_is_400() -> None:
    data = _encode(_gradient((64, 64)), "PNG")
    with pytest.raises(BadRequestError, match="Failed to load image"):
        _load(_data_uri(data[: len(data) // 2]))


def test_truncated_jpeg_is_400() -> None:
    data = _encode(_gradient((64, 64)), "JPEG")
    with pytest.raises(BadRequestError, match="Failed to load image"):
        _load(_data_uri(data[: len(data) // 2], "image/jpeg"))


def test_pixel_limit_is_checked_from_the_header() -> None:
    with pytest.raises(BadRequestError, match=r"9x7 \(63 pixels\) exceeds the maximum of 62"):
        _load(_data_uri(_encode(_gradient(), "PNG")), pixels=62)
    assert _load(_data_uri(_encode(_gradient(), "PNG")), pixels=63).image.size == (9, 7)


def test_header_only_bomb_is_refused_without_decoding() -> None:
    # 9000 x 9000 = 81e6 pixels claimed by a tiny file: above our 64 Mi limit, below the size
    # where Pillow itself refuses, so only our header check stops it.
    bomb = _png_claiming_size(9000, 9000)
    with pytest.raises(BadRequestError, match=r"9000x9000 \(81000000 pixels\) exceeds"):
        _load(_data_uri(bomb))


def test_pillow_decompression_bomb_error_becomes_a_400_even_with_a_huge_limit() -> None:
    # 1e10 pixels: Pillow's own DecompressionBombError fires inside Image.open.
    bomb = _png_claiming_size(100_000, 100_000)
    with pytest.raises(BadRequestError, match="Image too large"):
        _load(_data_uri(bomb), pixels=10**12)


# --- schemes and local files --------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://example.com/a.png", "HTTPS://example.com/a.png"])
def test_http_urls_are_refused_unless_fetched(url: str) -> None:
    with pytest.raises(BadRequestError, match="http\\(s\\) image URLs is not enabled"):
        _load(url)


@pytest.mark.parametrize("url", ["ftp://host/a.png", "/etc/passwd", "a.png"])
def test_other_schemes_are_refused(url: str) -> None:
    with pytest.raises(BadRequestError, match="must be either a HTTP, data or file URL"):
        _load(url)


def test_file_inside_the_allowed_folder_loads(tmp_path: Path) -> None:
    data = _encode(_gradient(), "PNG")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cat.png").write_bytes(data)
    loaded = _load(f"file://{tmp_path}/sub/cat.png", folder=tmp_path)
    assert loaded.original_bytes == data


def test_files_need_a_configured_folder(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(_encode(_gradient(), "PNG"))
    with pytest.raises(BadRequestError, match="no allowed media folder"):
        _load(f"file://{tmp_path}/cat.png")


def test_files_outside_the_folder_are_refused(tmp_path: Path) -> None:
    allowed = tmp_path / "media"
    allowed.mkdir()
    (tmp_path / "secret.png").write_bytes(_encode(_gradient(), "PNG"))
    (allowed / "link.png").symlink_to(tmp_path / "secret.png")
    for url in (
        f"file://{tmp_path}/secret.png",
        f"file://{allowed}/../secret.png",
        f"file://{allowed}/link.png",
        f"file://{allowed}",
    ):
        with pytest.raises(BadRequestError, match="must be inside the allowed media folder"):
            _load(url, folder=allowed)


def test_missing_file_and_directory_are_400(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    for name in ("missing.png", "dir"):
        with pytest.raises(BadRequestError, match="Cannot read image file"):
            _load(f"file://{tmp_path}/{name}", folder=tmp_path)


def test_oversized_file_is_400(tmp_path: Path) -> None:
    data = _encode(_gradient(), "PNG")
    (tmp_path / "cat.png").write_bytes(data)
    with pytest.raises(BadRequestError, match="larger than the limit"):
        load_image_url(
            f"file://{tmp_path}/cat.png",
            MediaSource(max_image_pixels=BIG, allowed_media_dir=tmp_path, max_image_bytes=len(data) - 1),
        )


def test_empty_url_is_an_unknown_scheme() -> None:
    with pytest.raises(BadRequestError, match="must be either a HTTP, data or file URL"):
        _load("")


def test_fetched_http_bytes_are_decoded() -> None:
    """The HTTP layer fetches http(s) images beforehand; the core decodes the bytes it got."""
    data = _encode(_gradient(), "PNG")
    url = "https://images.example/cat.png"
    loaded = load_image_url(url, MediaSource(max_image_pixels=BIG, fetched={url: data}))
    assert loaded.original_bytes == data and loaded.image.size == (9, 7)
