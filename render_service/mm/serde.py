"""vLLM 0.33's msgpack encoding of one `MultiModalKwargsItem` (the `features.kwargs_data` items).

vLLM encodes with `MsgpackEncoder(size_threshold=2**62)` (every tensor inline) and base64s the
single buffer (`entrypoints/scale_out/token_in_token_out/mm_serde.py`). The layout, from
docs/multimodal-design.md section 4:

    item   = map  {field_name: elem, ...}
    elem   = map  {"data": tensor | [nested...] | int | float | nil, "field": field}
    tensor = array [dtype_name, [dim, ...], ext(type 3, raw C-contiguous little-endian bytes)]
    field  = array ["batched", {"keep_on_cpu": bool}]
           | array ["flat", {"keep_on_cpu": bool, "slices": [[start, stop, step|nil] | [...]...], "dim": int}]
           | array ["shared", {"keep_on_cpu": bool, "batch_size": int}]

We write msgpack ourselves (only the handful of types above, with msgspec's smallest-header
choices) so the service needs neither torch nor a msgpack package; tensors are numpy arrays.
Byte equality with vLLM is checked in tests by decoding with vLLM and re-encoding with vLLM.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pybase64  # SIMD base64 (vLLM's choice too): payloads are megabytes per image

__all__ = [
    "BFloat16Tensor",
    "BatchedField",
    "FieldElem",
    "FlatField",
    "SharedField",
    "encode_item",
    "encode_item_b64",
    "to_bfloat16",
]

_EXT_RAW_VIEW = 3  # vLLM CUSTOM_TYPE_RAW_VIEW
# numpy dtype name -> the torch dtype name vLLM writes (str(torch.dtype) minus "torch.").
_DTYPE_NAMES = {
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "bool": "bool",
}


@dataclass(frozen=True, slots=True)
class BFloat16Tensor:
    """A bfloat16 tensor (numpy has no bfloat16): the raw 16-bit patterns and the shape."""

    bits: np.ndarray  # uint16, same shape as the tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self.bits.shape

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)


def to_bfloat16(array: np.ndarray) -> BFloat16Tensor:
    """torch's CPU float -> bfloat16 cast: round to nearest even, every NaN -> 0xFFFF.

    (ATen's vectorised CPU conversion writes 0xFFFF for NaN, checked against torch 2.13 in
    tests; c10's scalar path would write 0x7FC0. Pixel values are never NaN in practice.)

    vLLM casts every floating processor output to the model dtype (`_postprocess_output`),
    so a bfloat16 model gets bfloat16 `pixel_values` on the wire. In-place uint32 arithmetic:
    megapixel images make temporaries expensive. The add can wrap only for negative NaNs,
    which are overwritten.
    """
    as_float = np.ascontiguousarray(array, dtype=np.float32)
    work = as_float.view(np.uint32).copy()
    lsb = work >> 16
    lsb &= 1
    work += 0x7FFF
    work += lsb
    work >>= 16
    rounded = work.astype(np.uint16)
    nan = np.isnan(as_float)
    if nan.any():
        rounded[nan] = 0xFFFF
    return BFloat16Tensor(rounded)


@dataclass(frozen=True, slots=True)
class BatchedField:
    keep_on_cpu: bool = False


@dataclass(frozen=True, slots=True)
class FlatField:
    # One entry per item of the request: a (start, stop, step) triple, or a sequence of them.
    slices: Sequence[
        tuple[int | None, int | None, int | None]
        | Sequence[tuple[int | None, int | None, int | None]]
    ]
    dim: int = 0
    keep_on_cpu: bool = False


@dataclass(frozen=True, slots=True)
class SharedField:
    batch_size: int
    keep_on_cpu: bool = False


Field: TypeAlias = BatchedField | FlatField | SharedField
NestedData: TypeAlias = np.ndarray | BFloat16Tensor | int | float | Sequence["NestedData"] | None


@dataclass(frozen=True, slots=True)
class FieldElem:
    data: NestedData
    field: Field


def encode_item_b64(item: Mapping[str, FieldElem]) -> str:
    """The `kwargs_data` / `mm_metadata` string vLLM's `decode_mm_kwargs_item` reads."""
    return pybase64.b64encode(encode_item(item)).decode("ascii")


def encode_item(item: Mapping[str, FieldElem]) -> bytes:
    out: list[bytes] = [_map_header(len(item))]
    for key, elem in item.items():
        out.append(_str(key))
        out.append(_map_header(2))
        out.append(_str("data"))
        _nested(elem.data, out)
        out.append(_str("field"))
        _field(elem.field, out)
    return b"".join(out)


def _field(field: Field, out: list[bytes]) -> None:
    out.append(_array_header(2))
    if isinstance(field, BatchedField):
        out += [_str("batched"), _map_header(1), _str("keep_on_cpu"), _bool(field.keep_on_cpu)]
    elif isinstance(field, FlatField):
        out += [
            _str("flat"),
            _map_header(3),
            _str("keep_on_cpu"),
            _bool(field.keep_on_cpu),
            _str("slices"),
        ]
        _slices(field.slices, out)
        out += [_str("dim"), _int(field.dim)]
    elif isinstance(field, SharedField):
        out += [_str("shared"), _map_header(2), _str("keep_on_cpu"), _bool(field.keep_on_cpu)]
        out += [_str("batch_size"), _int(field.batch_size)]
    else:
        raise TypeError(f"unsupported field type {type(field).__name__}")


def _slices(value: object, out: list[bytes]) -> None:
    """A slice is a 3-array; anything else is a list of (lists of) slices."""
    assert isinstance(value, (list, tuple))
    if len(value) == 3 and all(v is None or isinstance(v, int) for v in value):
        out.append(_array_header(3))
        out += [_nil() if v is None else _int(v) for v in value]
        return
    out.append(_array_header(len(value)))
    for entry in value:
        _slices(entry, out)


def _nested(data: NestedData, out: list[bytes]) -> None:
    if data is None:
        out.append(_nil())
    elif isinstance(data, np.ndarray):
        _tensor(data, out)
    elif isinstance(data, BFloat16Tensor):
        _raw_tensor("bfloat16", data.bits, out)
    elif isinstance(data, bool):
        raise TypeError("bool is not a valid NestedTensors leaf")
    elif isinstance(data, int):
        out.append(_int(data))
    elif isinstance(data, float):
        out.append(b"\xcb" + struct.pack(">d", data))
    else:
        out.append(_array_header(len(data)))
        for entry in data:
            _nested(entry, out)


def _tensor(array: np.ndarray, out: list[bytes]) -> None:
    name = _DTYPE_NAMES.get(array.dtype.name)
    if name is None:
        raise TypeError(f"unsupported tensor dtype {array.dtype}")
    _raw_tensor(name, array, out)


def _raw_tensor(name: str, array: np.ndarray, out: list[bytes]) -> None:
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    raw = np.ascontiguousarray(array).tobytes()
    out += [_array_header(3), _str(name), _array_header(array.ndim)]
    out += [_int(int(dim)) for dim in array.shape]
    out.append(_ext(_EXT_RAW_VIEW, raw))


# --- msgpack primitives (msgspec's choice of the smallest header) ---------------------------------


def _nil() -> bytes:
    return b"\xc0"


def _bool(value: bool) -> bytes:
    return b"\xc3" if value else b"\xc2"


def _int(value: int) -> bytes:
    if 0 <= value <= 0x7F:
        return struct.pack("B", value)
    if -32 <= value < 0:
        return struct.pack("b", value)
    if value > 0:
        for code, fmt, limit in (
            (0xCC, ">B", 0xFF),
            (0xCD, ">H", 0xFFFF),
            (0xCE, ">I", 0xFFFFFFFF),
        ):
            if value <= limit:
                return bytes([code]) + struct.pack(fmt, value)
        return b"\xcf" + struct.pack(">Q", value)
    for code, fmt, limit in ((0xD0, ">b", 0x80), (0xD1, ">h", 0x8000), (0xD2, ">i", 0x80000000)):
        if value >= -limit:
            return bytes([code]) + struct.pack(fmt, value)
    return b"\xd3" + struct.pack(">q", value)


def _str(value: str) -> bytes:
    raw = value.encode("utf-8")
    size = len(raw)
    if size < 32:
        return bytes([0xA0 | size]) + raw
    if size <= 0xFF:
        return b"\xd9" + struct.pack(">B", size) + raw
    if size <= 0xFFFF:
        return b"\xda" + struct.pack(">H", size) + raw
    return b"\xdb" + struct.pack(">I", size) + raw


def _array_header(size: int) -> bytes:
    if size < 16:
        return bytes([0x90 | size])
    if size <= 0xFFFF:
        return b"\xdc" + struct.pack(">H", size)
    return b"\xdd" + struct.pack(">I", size)


def _map_header(size: int) -> bytes:
    if size < 16:
        return bytes([0x80 | size])
    if size <= 0xFFFF:
        return b"\xde" + struct.pack(">H", size)
    return b"\xdf" + struct.pack(">I", size)


_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def _ext(code: int, raw: bytes) -> bytes:
    size = len(raw)
    if size in _FIXEXT:
        return bytes([_FIXEXT[size], code]) + raw
    if size <= 0xFF:
        return b"\xc7" + struct.pack(">Bb", size, code) + raw
    if size <= 0xFFFF:
        return b"\xc8" + struct.pack(">Hb", size, code) + raw
    return b"\xc9" + struct.pack(">Ib", size, code) + raw
