"""`prompt_embeds` under `--enable-prompt-embeds`, as vLLM 0.33 validates them.

vLLM's `safe_load_prompt_embeds` (renderers/embed_utils.py): strict base64, then
`torch.load(weights_only=True)` (here `torch_file.load_weights_only`, no torch), a tensor
check, a bound on its dense size, the squeeze of a leading batch dimension, ndim == 2, the
model's hidden size, and a floating-point dtype. A render tier keeps only the token count:
the render server's output carries token ids, never the embeddings (a completion prompt
made of embeddings ends in vLLM's "No token_ids rendered"; a chat part becomes a span of
the placeholder token).
"""

from __future__ import annotations

import binascii
import re
import struct
import zipfile
from dataclasses import dataclass
from pickle import UnpicklingError
from typing import TYPE_CHECKING

from render_service.errors import BadRequestError
from render_service.protocol import vllm_validation_error
from render_service.render.torch_file import TensorHeader, UnsupportedTensorError, load_weights_only

if TYPE_CHECKING:  # model.py imports this module (for the placeholder token)
    from render_service.model import ModelBundle

__all__ = [
    "PLACEHOLDER_TOKEN",
    "EmbedsSpec",
    "embeds_spec",
    "embeds_token_count",
    "placeholder_marker",
]

# vLLM's PROMPT_EMBEDS_PLACEHOLDER_TOKEN (added to the tokenizer as a special token under the
# flag) and the per-part marker a chat template sees (content_parser.make_prompt_embeds_placeholder).
PLACEHOLDER_TOKEN = "<prompt_embeds>"
_MARKER_PREFIX = f"{PLACEHOLDER_TOKEN}__vllm_prompt_embed_"
# vLLM's VLLM_MAX_EMBED_DECODE_BYTES default (2 GiB of dense tensor).
MAX_EMBED_DECODE_BYTES = 2_147_483_648
_MAX_REASON_CHARS = 200  # vLLM embed_utils._MAX_EMBED_ERROR_REASON_CHARS
_BASE64 = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_PARAM = "prompt_embeds"
# What torch.load raises for a payload that is not a tensor file (vLLM answers all with 400).
_LOAD_ERRORS = (
    UnpicklingError, EOFError, KeyError, IndexError, ValueError, TypeError, AttributeError,
    AssertionError, RuntimeError, struct.error, UnicodeDecodeError, zipfile.BadZipFile,
)  # fmt: skip


def placeholder_marker(index: int) -> str:
    return f"{_MARKER_PREFIX}{index}__"


@dataclass(frozen=True, slots=True)
class EmbedsSpec:
    """What a model's embeddings must look like: its text hidden size and dtype."""

    hidden_size: int | None
    dtype: str


def embeds_spec(bundle: ModelBundle) -> EmbedsSpec:
    return EmbedsSpec(bundle.hidden_size, bundle.float_dtype)


def embeds_token_count(data: bytes, spec: EmbedsSpec) -> int:
    """The number of prompt positions one `prompt_embeds` payload fills (its first dimension).

    Raises:
        BadRequestError: vLLM's 400 for this payload (message and param as vLLM's).
    """
    payload = _b64decode_strict(data)
    tensor = _load_tensor(payload)
    shape = tensor.shape
    if len(shape) > 2 and shape[0] == 1:  # torch's squeeze(0) drops only a size-1 dim
        shape = shape[1:]
    if len(shape) != 2:
        raise vllm_validation_error(
            "`prompt_embeds` must be a 2D tensor of shape (num_tokens, hidden_size); "
            f"got shape {_torch_shape(shape)}.",
            parameter=_PARAM,
        )
    if spec.hidden_size is not None and shape[1] != spec.hidden_size:
        raise vllm_validation_error(
            f"`prompt_embeds` hidden_size {shape[1]} does not match the model's hidden_size {spec.hidden_size}.",
            parameter=_PARAM,
        )
    if tensor.dtype != spec.dtype and not tensor.is_floating_point:
        raise vllm_validation_error(
            f"`prompt_embeds` dtype torch.{tensor.dtype} is not a floating-point type, cannot "
            f"safely cast to the model's dtype torch.{spec.dtype}.",
            parameter=_PARAM,
        )
    return shape[0]


def _b64decode_strict(data: bytes) -> bytes:
    """pybase64.b64decode(validate=True): standard alphabet, padded, nothing else."""
    if _BASE64.fullmatch(data) is None:
        raise BadRequestError("Non-base64 digit found")
    try:
        return binascii.a2b_base64(data)
    except binascii.Error as exc:  # unreachable after the pattern; kept as vLLM's 400
        raise BadRequestError("Non-base64 digit found") from exc


def _load_tensor(payload: bytes) -> TensorHeader:
    try:
        loaded = load_weights_only(payload)
    except UnsupportedTensorError as exc:
        raise BadRequestError(
            f"`prompt_embeds` holds a tensor kind this render service does not read ({exc}); "
            "send a dense tensor saved with torch.save.",
            param=_PARAM,
        ) from exc
    except _LOAD_ERRORS as exc:
        raise vllm_validation_error(
            f"`prompt_embeds` could not be deserialized as a torch tensor: {_truncated_reason(exc)}",
            parameter=_PARAM,
        ) from exc
    if not isinstance(loaded, TensorHeader):
        raise vllm_validation_error("`prompt_embeds` payload did not deserialize to a torch.Tensor.", parameter=_PARAM)
    if loaded.nbytes > MAX_EMBED_DECODE_BYTES:
        raise vllm_validation_error(
            f"`prompt_embeds` declares shape {_torch_shape(loaded.shape)}, which would allocate "
            f"{loaded.nbytes} bytes ({loaded.nbytes / (1 << 20):.0f} MiB) once densified, exceeding the "
            f"{MAX_EMBED_DECODE_BYTES} byte limit. Set VLLM_MAX_EMBED_DECODE_BYTES to increase this limit.",
            parameter=_PARAM,
            value=loaded.nbytes,
        )
    return loaded


def _truncated_reason(exc: BaseException) -> str:
    """vLLM's _truncated_reason: torch's message, capped at 200 characters."""
    reason = str(exc).strip() or type(exc).__name__
    omitted = len(reason) - _MAX_REASON_CHARS
    if omitted <= 0:
        return reason
    return f"{reason[:_MAX_REASON_CHARS]}... ({omitted} more characters truncated)"


def _torch_shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))
