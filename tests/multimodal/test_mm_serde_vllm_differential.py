"""render_service.mm.serde vs vLLM 0.33's own decoder/encoder (ref venv subprocess).

For each item we encode, vLLM's `decode_mm_kwargs_item` must give the same keys, field kinds,
field arguments and tensors (dtype, shape, values); and vLLM's `encode_mm_kwargs_item` of that
decoded item must give back exactly our bytes (so the headers we pick are msgspec's).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from render_service.mm.serde import (
    BatchedField,
    BFloat16Tensor,
    FieldElem,
    FlatField,
    SharedField,
    encode_item_b64,
    to_bfloat16,
)

from .ref import run_ref_script

_REF_SCRIPT = r"""
import json, sys
import torch
from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item, encode_mm_kwargs_item

def describe_data(data):
    if data is None or isinstance(data, (int, float)):
        return data
    if isinstance(data, torch.Tensor):
        return {"dtype": str(data.dtype).removeprefix("torch."), "shape": list(data.shape),
                "values": data.flatten().tolist()}
    return [describe_data(d) for d in data]

def describe_slices(value):
    if isinstance(value, slice):
        return [value.start, value.stop, value.step]
    return [describe_slices(v) for v in value]

def describe_field(field):
    kind = type(field).__name__
    out = {"kind": kind, "keep_on_cpu": field.keep_on_cpu}
    if kind == "MultiModalFlatField":
        out["slices"] = describe_slices(field.slices)
        out["dim"] = field.dim
    if kind == "MultiModalSharedField":
        out["batch_size"] = field.batch_size
    return out

result = []
for b64 in json.load(sys.stdin):
    item = decode_mm_kwargs_item(b64)
    result.append({
        "keys": list(item.keys()),
        "elems": {k: {"data": describe_data(e.data), "field": describe_field(e.field)} for k, e in item.items()},
        "reencoded": encode_mm_kwargs_item(item),
    })
print(json.dumps(result))
"""


def _expected_data(data: Any) -> Any:
    if data is None or isinstance(data, (int, float)):
        return data
    if isinstance(data, BFloat16Tensor):
        values = (data.bits.astype(np.uint32) << 16).view(np.float32)
        return {
            "dtype": "bfloat16",
            "shape": list(data.bits.shape),
            "values": values.flatten().tolist(),
        }
    if isinstance(data, np.ndarray):
        return {
            "dtype": data.dtype.name,
            "shape": list(data.shape),
            "values": data.flatten().tolist(),
        }
    return [_expected_data(d) for d in data]


def _expected_field(field: Any) -> dict[str, Any]:
    if isinstance(field, BatchedField):
        return {"kind": "MultiModalBatchedField", "keep_on_cpu": field.keep_on_cpu}
    if isinstance(field, SharedField):
        return {
            "kind": "MultiModalSharedField",
            "keep_on_cpu": field.keep_on_cpu,
            "batch_size": field.batch_size,
        }
    return {
        "kind": "MultiModalFlatField",
        "keep_on_cpu": field.keep_on_cpu,
        "slices": json.loads(json.dumps(field.slices)),
        "dim": field.dim,
    }


def _items() -> list[dict[str, FieldElem]]:
    rng = np.random.default_rng(7)
    two_image_slices = [[(0, 4, None)], [(4, 12, None)]]
    qwen2_vl_image = {
        "pixel_values": FieldElem(
            rng.standard_normal((4, 1176), dtype=np.float32), FlatField(two_image_slices)
        ),
        "image_grid_thw": FieldElem(
            np.array([1, 2, 2], dtype=np.int64), BatchedField(keep_on_cpu=True)
        ),
    }
    metadata_only = {
        "image_grid_thw": FieldElem(np.array([1, 36, 52], dtype=np.int64), BatchedField(True))
    }
    big_endian = np.arange(6, dtype=">i4").reshape(2, 3)
    non_contiguous = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    odd_shapes = {
        "ext32": FieldElem(
            rng.standard_normal(20_000).astype(np.float32), BatchedField()
        ),  # 80000 B
        "ext16": FieldElem(np.arange(300, dtype=np.uint8), FlatField([(0, 300, None)], dim=-1)),
        "fixext4": FieldElem(np.array([7], dtype=np.int32), SharedField(batch_size=300)),
        "fixext16": FieldElem(
            np.array([1.5, -2.0], dtype=np.float64), SharedField(batch_size=70000)
        ),
        "scalar": FieldElem(np.array(3.25, dtype=np.float16), BatchedField()),
        "empty": FieldElem(np.zeros((0, 3), dtype=np.float32), BatchedField()),
        "bools": FieldElem(np.array([True, False, True]), BatchedField()),
        "big_endian": FieldElem(big_endian, BatchedField()),
        "non_contiguous": FieldElem(non_contiguous, BatchedField()),
        "nested": FieldElem(
            [np.ones(2, dtype=np.int16), [np.zeros(1, dtype=np.int8)]], BatchedField()
        ),
        "number_leaves": FieldElem([3, -200, 1.5, 2**40, -(2**40)], BatchedField()),
        "none": FieldElem(None, BatchedField()),
        "bfloat16": FieldElem(
            to_bfloat16(rng.standard_normal((3, 5), dtype=np.float32)), BatchedField()
        ),
        "negative_slices": FieldElem(
            np.ones((2, 2), dtype=np.float32), FlatField([[(None, -1, 2), (0, None, None)]])
        ),
    }
    many_keys = {
        f"k{i:02d}": FieldElem(np.array([i], dtype=np.int64), BatchedField()) for i in range(17)
    }
    return [qwen2_vl_image, metadata_only, odd_shapes, many_keys]


def _normalise(value: Any) -> Any:
    """JSON round trip so tuples/np scalars compare like the ref's JSON."""
    return json.loads(json.dumps(value))


def test_vllm_decodes_our_items_and_reencodes_them_byte_for_byte() -> None:
    items = _items()
    ours = [encode_item_b64(item) for item in items]
    decoded = run_ref_script(_REF_SCRIPT, ours)
    assert len(decoded) == len(items)
    for item, b64, ref in zip(items, ours, decoded, strict=True):
        assert ref["keys"] == list(item)
        for key, elem in item.items():
            want = {"data": _expected_data(elem.data), "field": _expected_field(elem.field)}
            assert ref["elems"][key] == _normalise(want), key
        assert ref["reencoded"] == b64


_CAST_SCRIPT = r"""
import json, sys
import torch
values = torch.tensor(json.load(sys.stdin), dtype=torch.float32)
print(json.dumps(values.to(torch.bfloat16).view(torch.int16).tolist()))
"""


def test_bfloat16_cast_matches_torch() -> None:
    rng = np.random.default_rng(11)
    values = np.concatenate(
        [
            rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-40, 36, 2000),
            np.array(
                [
                    0.0,
                    -0.0,
                    np.inf,
                    -np.inf,
                    np.nan,
                    -np.nan,
                    3.4028235e38,
                    -3.4028235e38,
                    1.0 + 2**-8,
                    1.0 + 3 * 2**-8,
                    1e-45,
                    -1e-45,
                    1.17549435e-38,
                ],
                dtype=np.float32,
            ),
        ]
    ).astype(np.float32)
    torch_bits = np.array(run_ref_script(_CAST_SCRIPT, values.tolist()), dtype=np.int16)
    ours = to_bfloat16(values).bits.view(np.int16)
    mismatches = np.flatnonzero(ours != torch_bits)
    assert mismatches.size == 0, [(values[i], ours[i], torch_bits[i]) for i in mismatches[:5]]
