"""Read the header of a `torch.save` file without torch: what `torch.load(weights_only=True)`
would build, reduced to the shape and dtype of a tensor.

Both formats torch writes are read: the zip archive (`<name>/data.pkl` plus one record per
storage under `<name>/data/`) and the legacy stream of pickles (magic number, protocol,
system info, the object, the storage keys, then the raw storages). The pickles run through
`_WeightsOnlyUnpickler`, a port of torch's `_weights_only_unpickler.Unpickler`: the same
opcodes, the same allowlist of globals and the same refusals, so an unsafe payload fails
here for the reason it fails in torch (nothing in it is ever imported or called). The
errors are the Python exceptions torch would raise (`UnpicklingError`, `KeyError`,
`EOFError`, ...) with torch's messages where the message is torch's own; vLLM quotes them.

Tensors are `TensorHeader`s; storages are checked for size as torch's `set_` does. Sparse
COO tensors are read with their invariants checked (indices read from their record), as
vLLM loads them before densifying. Tensor kinds torch allows but a render tier has no use
for (compressed sparse layouts, quantized, nested, meta, subclass wrappers, numpy rebuilds)
raise `UnsupportedTensorError`.
"""

from __future__ import annotations

import codecs
import io
import pickle
import re
import struct
import zipfile
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pickle import UnpicklingError
from typing import Any

__all__ = [
    "DTYPE_SIZES",
    "TensorHeader",
    "UnsupportedTensorError",
    "load_weights_only",
    "weights_only_message",
]

# torch dtype name -> element size in bytes (torch._utils._element_size).
DTYPE_SIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex128": 16, "complex64": 8,
    "complex32": 4, "qint8": 1, "qint32": 4, "quint8": 1, "quint4x2": 1, "quint2x4": 1,
    "uint16": 2, "uint32": 4, "uint64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "bits1x8": 1, "bits2x4": 1, "bits4x2": 1, "bits8": 1, "bits16": 2,
    "uint1": 1, "uint2": 1, "uint3": 1, "uint4": 1, "uint5": 1, "uint6": 1, "uint7": 1,
    "int1": 1, "int2": 1, "int3": 1, "int4": 1, "int5": 1, "int6": 1, "int7": 1,
}  # fmt: skip
FLOAT_DTYPES = frozenset(
    {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
     "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"}
)  # fmt: skip
# torch.storage._dtype_to_storage_type_map(): the typed storage classes of torch.save.
_STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}  # fmt: skip
_DENSE_KINDS = ("Double", "Float", "Long", "Int", "Short", "Char", "Byte", "Bool", "Half", "BFloat16")
_SPARSE_KINDS = ("Double", "Float", "Long", "Int", "Short", "Char", "Byte", "Half", "BFloat16")
_CUDA_STORAGES = ("Double", "ComplexDouble", "ComplexFloat", "Long", "Byte", "BFloat16", "Char",
                  "Float", "Half", "Short", "Int", "Bool")  # fmt: skip
_INT64_LIMIT = 1 << 63
_PLAIN_CODECS = ("latin1", "latin-1", "iso-8859-1", "ascii", "utf-8", "utf8")
# A zip record is inflated only up to this (torch writes them stored; a deflated one could
# be a bomb).
_MAX_INFLATED_RECORD = 64 * 1024 * 1024
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_BLOCKED_MODULES = ("sys", "os", "posix", "nt")
# Allowed by torch but not something a prompt embedding can be (see the module docstring).
_UNSUPPORTED_REBUILDS = (
    "_rebuild_qtensor", "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor", "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_parameter_with_state",
)  # fmt: skip
_NJT_GLOBALS = (
    "torch.nested._internal.nested_tensor.NestedTensor",
    "torch.nested._internal.nested_tensor._rebuild_njt",
    "torch._dynamo.decorators._DimRange",
)
_DTENSOR_GLOBALS = (
    "torch.distributed.device_mesh.DeviceMesh",
    "torch.distributed.tensor._dtensor_spec.DTensorSpec",
    "torch.distributed.tensor._dtensor_spec.TensorMeta",
    "torch.distributed.tensor.DTensor",
    "torch.distributed.tensor.placement_types.Partial",
    "torch.distributed.tensor.placement_types.Replicate",
    "torch.distributed.tensor.placement_types.Shard",
)
# torch.serialization's texts, which torch.load puts around an UnpicklingError.
_UNSAFE_MESSAGE = (
    "In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` "
    "from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, "
    "but it can result in arbitrary code execution. Do it only if you got the file from a "
    "trusted source."
)
_DOCS_MESSAGE = (
    "\n\nCheck the documentation of torch.load to learn more about types accepted by default with "
    "weights_only https://pytorch.org/docs/stable/generated/torch.load.html."
)


# What torch's zip reader (caffe2 PyTorchStreamReader, over miniz) appends to its errors.
_MINIZ_HINT = (
    ". This is an internal miniz error. If you are seeing this error, there is a high likelihood "
    "that your checkpoint file is corrupted. This can happen if the checkpoint was not saved "
    "properly, was transferred incorrectly, or the file was modified after saving."
)


class UnsupportedTensorError(Exception):
    """A payload torch would load but this service does not read (sparse, quantized, ...)."""


@dataclass(frozen=True, slots=True)
class TensorHeader:
    """What a render needs of a loaded tensor."""

    shape: tuple[int, ...]
    dtype: str
    # Where its elements are (read only for the indices of a sparse tensor).
    storage: _Storage | None = field(default=None, compare=False, repr=False)
    offset: int = field(default=0, compare=False, repr=False)
    stride: tuple[int, ...] = field(default=(), compare=False, repr=False)

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_SIZES[self.dtype]

    @property
    def is_floating_point(self) -> bool:
        return self.dtype in FLOAT_DTYPES


@dataclass(frozen=True, slots=True)
class _Global:
    """An allowlisted global, by torch's dotted name (never imported), and the name of the
    type torch's object has (for torch's messages that print it)."""

    name: str
    kind: str

    def __repr__(self) -> str:
        """repr() of torch's object, for torch's messages that print it (an address of the
        usual width stands in for a function's)."""
        if self.kind in ("torch.dtype", "torch.qscheme"):
            return self.name
        if self.kind == "function":
            return f"<function {self.name.rsplit('.', 1)[-1]} at 0x7f0000000000>"
        if self.kind == "builtin_function_or_method":
            return f"<built-in function {self.name.rsplit('.', 1)[-1]}>"
        return f"<class '{self.name.removeprefix('builtins.')}'>"


@dataclass(frozen=True, slots=True)
class _StorageType:
    dtype: str | None  # None: torch.storage.UntypedStorage (bytes)

    def __repr__(self) -> str:
        if self.dtype is None:
            return "<class 'torch.storage.UntypedStorage'>"
        return "<torch.serialization.StorageType object at 0x7f0000000000>"


@dataclass(slots=True)
class _Storage:
    dtype: str
    nbytes: int
    # Legacy-format storages are allocated by torch.load and grow when a tensor needs more
    # (the data read later must then match); zip-format ones are the record, fixed.
    resizable: bool = False
    # The zip record's bytes, read on demand (None: legacy, its data comes after the pickle).
    read: Callable[[], bytes] | None = None
    little_endian: bool = True


@dataclass(frozen=True, slots=True)
class _Layout:
    """A torch.layout, by name (torch.serialization._get_layout)."""

    name: str

    def __repr__(self) -> str:
        return self.name  # as repr(torch.sparse_coo)


class _OrderedDict(dict[Any, Any]):
    """collections.OrderedDict as torch's unpickler builds it (BUILD updates its __dict__)."""


def _allowed_globals() -> dict[str, Any]:
    """torch's `_get_allowed_globals()`, by name, each with the type torch's object has."""
    kinds = {
        "type": ["collections.OrderedDict", "collections.Counter", "torch.Size", "torch.device",
                 "builtins.bytearray", "builtins.set", "builtins.complex"],
        "torch.nn.parameter._ParameterMeta": ["torch.nn.parameter.Parameter"],
        "torch._C._TensorMeta": ["torch.Tensor"],
        "builtin_function_or_method": ["_codecs.encode"],
        "function": ["torch.serialization._get_layout", "torch._tensor._rebuild_from_type_v2",
                     "torch._utils._rebuild_parameter", "torch._utils._rebuild_tensor",
                     "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
                     "torch._utils._rebuild_sparse_tensor",
                     *(f"torch._utils.{name}" for name in _UNSUPPORTED_REBUILDS)],
        "torch.qscheme": ["torch.per_tensor_affine", "torch.per_tensor_symmetric", "torch.per_channel_affine",
                          "torch.per_channel_symmetric", "torch.per_channel_affine_float_qparams"],
        "torch.dtype": [f"torch.{dtype}" for dtype in DTYPE_SIZES],
        "torch.tensortype": [f"{module}.{kind}Tensor" for module in ("torch", "torch.cuda") for kind in _DENSE_KINDS]
        + [f"{module}.{kind}Tensor" for module in ("torch.sparse", "torch.cuda.sparse") for kind in _SPARSE_KINDS],
    }  # fmt: skip
    table: dict[str, Any] = {name: _Global(name, kind) for kind, names in kinds.items() for name in names}
    for storage, dtype in _STORAGE_DTYPES.items():
        table[f"torch.{storage}"] = _StorageType(dtype)
    for kind in _CUDA_STORAGES:
        table[f"torch.cuda.{kind}Storage"] = _StorageType(_STORAGE_DTYPES[f"{kind}Storage"])
    table["torch.storage.UntypedStorage"] = _StorageType(None)
    table["torch.storage.TypedStorage"] = _Global("torch.storage.TypedStorage", "type")
    return table


_ALLOWED = _allowed_globals()
_ALLOWED_VALUES = frozenset(id(value) for value in _ALLOWED.values())
# Python 2 module names torch maps (torch._utils IMPORT_MAPPING / NAME_MAPPING, the ones that
# can reach an allowlisted name).
_IMPORT_MAPPING = {"__builtin__": "builtins", "copy_reg": "copyreg"}


def _unsupported_global(full_path: str) -> UnpicklingError:
    if full_path.startswith("builtins"):
        rest = full_path[len("builtins"):]
        full_path = rest[1:] if rest.startswith(".") else "builtins" + rest
    return UnpicklingError(
        f"Unsupported global: GLOBAL {full_path} was not an allowed global by default. "
        f"Please use `torch.serialization.add_safe_globals([{full_path}])` or the "
        f"`torch.serialization.safe_globals([{full_path}])` context manager to allowlist this global "
        "if you trust this class/function."
    )


def _type_name(value: Any) -> str:
    """Python's `<class '...'>` for the types a weights-only pickle can hold."""
    if isinstance(value, _OrderedDict):
        return "<class 'collections.OrderedDict'>"
    if isinstance(value, TensorHeader):
        return "<class 'torch.Tensor'>"
    if isinstance(value, _Global):
        return f"<class '{value.kind}'>"
    if isinstance(value, _StorageType):
        return "<class 'torch.serialization.StorageType'>" if value.dtype else "<class 'type'>"
    if isinstance(value, _Storage):
        return "<class 'torch.storage.TypedStorage'>"
    if isinstance(value, _Layout):
        return "<class 'torch.layout'>"
    return str(type(value))


class _WeightsOnlyUnpickler:
    """torch's weights-only Unpickler, with storages and tensors as headers."""

    def __init__(self, file: io.BytesIO, persistent_load: Callable[[Any], Any]) -> None:
        self.read = file.read
        self.readline = file.readline
        self.persistent_load = persistent_load
        self.memo: dict[int, Any] = {}

    def load(self) -> Any:
        self.metastack: list[list[Any]] = []
        self.stack: list[Any] = []
        while True:
            key = self.read(1)
            if not key:
                raise EOFError
            op = key[0]
            if op == pickle.STOP[0]:
                return self.stack.pop()
            handler = _OPCODES.get(op)
            if handler is None:
                raise UnpicklingError(f"Unsupported operand {op}")
            handler(self)

    # -- opcodes, as torch's Unpickler.load handles them -----------------------------------------

    def _global(self) -> None:
        module = self.readline()[:-1].decode("utf-8")
        name = self.readline()[:-1].decode("utf-8")
        module = _IMPORT_MAPPING.get(module, module)
        full_path = f"{module}.{name}"
        if module in _BLOCKED_MODULES:
            raise UnpicklingError(
                f"Trying to load unsupported GLOBAL {full_path} whose module {module} is blocked."
            )
        if full_path in _ALLOWED:
            self.stack.append(_ALLOWED[full_path])
        elif full_path in _NJT_GLOBALS:
            raise UnpicklingError(
                "``torch.nested`` and ``torch._dynamo`` must be imported to load nested jagged tensors (NJTs)"
            )
        elif full_path in _DTENSOR_GLOBALS:
            raise UnpicklingError("``torch.distributed.tensor`` must be imported to load DTensors")
        else:
            raise _unsupported_global(full_path)

    def _newobj(self) -> None:
        self.stack.pop()
        cls = self.stack.pop()
        if isinstance(cls, _Global) and cls.kind == "function":
            raise TypeError("function.__new__(X): X is not a type object (function)")
        if isinstance(cls, (_Global, _StorageType)):
            raise UnsupportedTensorError(f"creating {_describe(cls)} objects")
        raise UnpicklingError(
            "Can only create new object for nn.Parameter or classes allowlisted "
            f"via `add_safe_globals` but got {cls}"
        )

    def _reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if id(func) not in _ALLOWED_VALUES:
            raise UnpicklingError(f"Trying to call reduce for unrecognized function {func}")
        self.stack[-1] = _call(func, args)

    def _build(self) -> None:
        self.stack.pop()  # the state
        inst = self.stack[-1]
        if isinstance(inst, _OrderedDict):
            return  # torch updates the OrderedDict's __dict__: attributes, not items
        if isinstance(inst, TensorHeader):
            raise UnsupportedTensorError("tensor state set by BUILD")
        raise UnpicklingError(
            "Can only build Tensor, Parameter, OrderedDict or types allowlisted "
            f"via `add_safe_globals`, but got {_type_name(inst)}"
        )

    def _append(self) -> None:
        item = self.stack.pop()
        target = self.stack[-1]
        if type(target) is not list:
            raise UnpicklingError(f"Can only append to lists, but got {_type_name(target)}")
        target.append(item)

    def _appends(self) -> None:
        items = self._pop_mark()
        target = self.stack[-1]
        if type(target) is not list:
            raise UnpicklingError(f"Can only extend lists, but got {_type_name(target)}")
        target.extend(items)

    def _setitem(self) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self._check_set_item_target("SETITEM")
        self.stack[-1][key] = value

    def _setitems(self) -> None:
        items = self._pop_mark()
        self._check_set_item_target("SETITEMS")
        for index in range(0, len(items), 2):
            self.stack[-1][items[index]] = items[index + 1]

    def _mark(self) -> None:
        self.metastack.append(self.stack)
        self.stack = []

    def _tuple(self) -> None:
        items = self._pop_mark()  # replaces self.stack: append after it
        self.stack.append(tuple(items))

    def _tuple1(self) -> None:
        self.stack[-1] = (self.stack[-1],)

    def _tuple2(self) -> None:
        self.stack[-2:] = [(self.stack[-2], self.stack[-1])]

    def _tuple3(self) -> None:
        self.stack[-3:] = [(self.stack[-3], self.stack[-2], self.stack[-1])]

    def _binint(self) -> None:
        self.stack.append(struct.unpack("<i", self.read(4))[0])

    def _binint1(self) -> None:
        self.stack.append(self.read(1)[0])

    def _binint2(self) -> None:
        self.stack.append(struct.unpack("<H", self.read(2))[0])

    def _binfloat(self) -> None:
        self.stack.append(struct.unpack(">d", self.read(8))[0])

    def _binunicode(self) -> None:
        size = struct.unpack("<I", self.read(4))[0]
        self.stack.append(str(self.read(size), "utf-8", "surrogatepass"))

    def _short_binstring(self) -> None:
        size = self.read(1)[0]
        self.stack.append(self.read(size).decode("utf-8", "strict"))  # torch.load's encoding

    def _binpersid(self) -> None:
        pid = self.stack.pop()
        if type(pid) is not tuple and type(pid) is not int:
            raise UnpicklingError(f"persistent_load id must be tuple or int, but got {_type_name(pid)}")
        if type(pid) is tuple and len(pid) > 0 and _ascii(pid[0]) != "storage":
            raise UnpicklingError(f"Only persistent_load of storage is allowed, but got {_type_name(pid[0])}")
        self.stack.append(self.persistent_load(pid))

    def _binget(self) -> None:
        self.stack.append(self.memo[self.read(1)[0]])

    def _long_binget(self) -> None:
        self.stack.append(self.memo[struct.unpack("<I", self.read(4))[0]])

    def _binput(self) -> None:
        index = self.read(1)[0]  # read before the stack is looked at, as torch does
        self.memo[index] = self.stack[-1]

    def _long_binput(self) -> None:
        index = struct.unpack("<I", self.read(4))[0]
        self.memo[index] = self.stack[-1]

    def _long1(self) -> None:
        size = self.read(1)[0]
        self.stack.append(pickle.decode_long(self.read(size)))

    def _proto(self) -> None:
        self.read(1)[0]  # noqa: B018 -- torch indexes it: an empty read is its IndexError

    def _pop_mark(self) -> list[Any]:
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def _check_set_item_target(self, opcode: str) -> None:
        if type(self.stack[-1]) not in (dict, _OrderedDict):
            raise UnpicklingError(
                f"Can only {opcode} for dict, collections.OrderedDict, "
                f"collections.Counter, but got {_type_name(self.stack[-1])}"
            )


def _push(value: Any) -> Callable[[_WeightsOnlyUnpickler], None]:
    """An opcode that pushes a constant (a fresh one for list, dict and set)."""

    def push(self: _WeightsOnlyUnpickler) -> None:
        self.stack.append(value() if callable(value) else value)

    return push


_U = _WeightsOnlyUnpickler
_OPCODES: dict[int, Callable[[_WeightsOnlyUnpickler], None]] = {
    pickle.GLOBAL[0]: _U._global, pickle.NEWOBJ[0]: _U._newobj, pickle.REDUCE[0]: _U._reduce,
    pickle.BUILD[0]: _U._build, pickle.APPEND[0]: _U._append, pickle.APPENDS[0]: _U._appends,
    pickle.SETITEM[0]: _U._setitem, pickle.SETITEMS[0]: _U._setitems, pickle.MARK[0]: _U._mark,
    pickle.TUPLE[0]: _U._tuple, pickle.TUPLE1[0]: _U._tuple1, pickle.TUPLE2[0]: _U._tuple2,
    pickle.TUPLE3[0]: _U._tuple3, pickle.NONE[0]: _push(None),
    pickle.NEWFALSE[0]: _push(False), pickle.NEWTRUE[0]: _push(True),
    pickle.EMPTY_TUPLE[0]: _push(()), pickle.EMPTY_LIST[0]: _push(list),
    pickle.EMPTY_DICT[0]: _push(dict), pickle.EMPTY_SET[0]: _push(set),
    pickle.BININT[0]: _U._binint, pickle.BININT1[0]: _U._binint1, pickle.BININT2[0]: _U._binint2,
    pickle.BINFLOAT[0]: _U._binfloat, pickle.BINUNICODE[0]: _U._binunicode,
    pickle.SHORT_BINSTRING[0]: _U._short_binstring, pickle.BINPERSID[0]: _U._binpersid,
    pickle.BINGET[0]: _U._binget, pickle.LONG_BINGET[0]: _U._long_binget,
    pickle.BINPUT[0]: _U._binput, pickle.LONG_BINPUT[0]: _U._long_binput,
    pickle.LONG1[0]: _U._long1, pickle.PROTO[0]: _U._proto,
}  # fmt: skip


def _ascii(value: Any) -> Any:
    """torch.serialization._maybe_decode_ascii."""
    return value.decode("ascii") if isinstance(value, bytes) else value


def _describe(value: Any) -> str:
    return value.name if isinstance(value, _Global) else "storage"


def _call(func: Any, args: Any) -> Any:
    """An allowlisted REDUCE: `func(*args)` as torch makes it. The plain-tensor rebuilds and
    the containers a payload may hold are Python stand-ins with torch's signatures and
    names, so a wrong argument list fails with Python's own message, as in torch."""
    if isinstance(func, _StorageType):
        raise UnsupportedTensorError("storages built by REDUCE")
    call = _CALLABLES.get(func.name)
    if call is None:
        raise UnsupportedTensorError(func.name)
    return call(*args)


def _torch_named(module: str) -> Callable[[Any], Any]:
    """Give a stand-in torch's module, for Python's `module.name()` in call errors."""

    def name(target: Any) -> Any:
        target.__module__ = module
        return target

    return name


@_torch_named("torch._utils")
def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any) -> TensorHeader:
    return _rebuild(storage, storage_offset, size, stride, _typed_dtype(storage, "dtype"))


@_torch_named("torch._utils")
def _rebuild_tensor_v2(
    storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any, backward_hooks: Any, metadata: Any = None
) -> TensorHeader:
    tensor = _rebuild(storage, storage_offset, size, stride, _typed_dtype(storage, "dtype"))
    if type(requires_grad) is not bool:  # torch assigns tensor.requires_grad
        raise TypeError("requires_grad must be a bool")
    return _with_grad(_without_metadata(tensor, metadata), requires_grad)


@_torch_named("torch._utils")
def _rebuild_tensor_v3(
    storage: Any,
    storage_offset: Any,
    size: Any,
    stride: Any,
    requires_grad: Any,
    backward_hooks: Any,
    dtype: Any,
    metadata: Any = None,
) -> TensorHeader:
    _typed_dtype(storage, "_untyped_storage")
    if not (isinstance(dtype, _Global) and dtype.kind == "torch.dtype"):
        raise UnsupportedTensorError("_rebuild_tensor_v3 without a dtype")
    tensor = _rebuild(storage, storage_offset, size, stride, dtype.name.removeprefix("torch."))
    return _with_grad(_without_metadata(tensor, metadata), requires_grad)


@_torch_named("torch._utils")
def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> TensorHeader:
    if not isinstance(data, TensorHeader):
        raise UnsupportedTensorError("a Parameter that wraps no tensor")
    return _with_grad(data, requires_grad)


_LAYOUTS = ("torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr",
            "torch.sparse_bsc", "torch._mkldnn", "torch.jagged")  # fmt: skip


@_torch_named("torch.serialization")
def _get_layout(name: Any) -> _Layout:
    if name not in _LAYOUTS:
        raise KeyError(name)
    return _Layout(name)


@_torch_named("torch._utils")
def _rebuild_sparse_tensor(layout: Any, data: Any) -> TensorHeader:
    """COO tensors as torch builds and then validates them (vLLM loads under
    check_sparse_tensor_invariants); the compressed layouts are not read here."""
    if layout == _Layout("torch.sparse_coo"):
        if len(data) == 3:
            indices, values, size = data
            is_coalesced = None
        else:
            indices, values, size, is_coalesced = data
        return _sparse_coo(indices, values, size, is_coalesced)
    if isinstance(layout, _Layout) and layout.name in ("torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc"):
        raise UnsupportedTensorError(f"{layout.name} tensors")
    raise NotImplementedError(f"rebuilding sparse tensor for layout {layout.name if isinstance(layout, _Layout) else layout}")


def _sparse_coo(indices: Any, values: Any, size: Any, is_coalesced: Any) -> TensorHeader:
    """torch.sparse_coo_tensor(indices, values, size) and its invariants, with torch's texts
    for the malformations a writer can make; oddities torch tolerates (non-int64 indices,
    0-d values, ...) are refused as unsupported."""
    if not (isinstance(indices, TensorHeader) and isinstance(values, TensorHeader) and _int_sequence(size)):
        raise UnsupportedTensorError("a sparse COO tensor without index and value tensors")
    if is_coalesced not in (None, False, True) or indices.dtype != "int64" or not values.shape:
        raise UnsupportedTensorError("a sparse COO tensor of unusual types")
    if len(indices.shape) != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices.shape)}")
    sparse_dim, nnz = indices.shape
    dense_dim = len(values.shape) - 1
    if len(size) != sparse_dim + dense_dim:
        raise RuntimeError(
            f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) = {len(size)}, "
            f"sparse_dim = {sparse_dim}, dense_dim = {dense_dim}"
        )
    if values.shape[0] != nnz:
        raise RuntimeError(
            f"indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from values: {values.shape[0]}"
        )
    expected = [nnz, *size[sparse_dim:]]
    if list(values.shape) != expected:
        raise RuntimeError(f"values has incorrect size, expected {expected}, got {list(values.shape)}")
    if any(dim < 0 for dim in size):
        raise RuntimeError("numel: integer multiplication overflow")
    rows = _index_rows(indices)
    for dim, row in enumerate(rows):
        if row and min(row) < 0:
            raise RuntimeError(f"found negative index {min(row)} for dim {dim}")
        if row and max(row) >= size[dim]:
            raise RuntimeError(
                f"size is inconsistent with indices: for dim {dim}, size is {size[dim]} but found index {max(row)}"
            )
    if is_coalesced and not _strictly_increasing(rows):
        raise RuntimeError("cannot set is_coalesced to true if indices correspond to uncoalesced COO tensor")
    return TensorHeader(tuple(size), values.dtype)


def _strictly_increasing(rows: list[Any]) -> bool:
    """Whether the index columns are sorted and distinct (a coalesced tensor's)."""
    columns = zip(*rows, strict=True)
    previous = next(columns, None)
    for column in columns:
        if previous is not None and column <= previous:
            return False
        previous = column
    return True


def _index_rows(indices: TensorHeader) -> list[Any]:
    """The int64 elements of a 2-D index tensor, one array per sparse dimension."""
    storage = indices.storage
    if storage is None or storage.read is None:
        raise UnsupportedTensorError("sparse tensors of the legacy format")
    data = storage.read()
    values = array("q", data[: len(data) - len(data) % 8])
    if not storage.little_endian:
        values.byteswap()
    dims, nnz = indices.shape
    row_step, column_step = indices.stride
    rows: list[Any] = []
    for dim in range(dims):
        start = indices.offset + dim * row_step
        if not nnz:
            rows.append(array("q"))
        elif column_step == 0:  # an expanded index tensor: one element repeated
            rows.append(array("q", [values[start]]) * nnz)
        else:
            rows.append(values[start : start + (nnz - 1) * column_step + 1 : column_step])
    return rows


@_torch_named("torch")
class _Size(tuple[Any, ...]):
    """torch.Size: a tuple."""

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


def _encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """_codecs.encode as torch's `bytes` pickles use it (latin-1 text, "latin1"). Only the
    byte-per-character codecs: others (punycode is quadratic) are not worth the risk here."""
    if not isinstance(encoding, str) or encoding.lower().replace("_", "-") not in _PLAIN_CODECS:
        raise UnsupportedTensorError(f"_codecs.encode with the {encoding!r} codec")
    encoded: bytes = codecs.encode(text, encoding, errors)
    return encoded


_OrderedDict.__module__, _OrderedDict.__qualname__, _Size.__qualname__ = "collections", "OrderedDict", "Size"
_CALLABLES: dict[str, Callable[..., Any]] = {
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_sparse_tensor": _rebuild_sparse_tensor,
    "torch.serialization._get_layout": _get_layout,
    "collections.OrderedDict": _OrderedDict,
    "torch.Size": _Size,
    "builtins.set": set,
    "builtins.complex": complex,
    "_codecs.encode": _encode,
}


def _typed_dtype(storage: Any, attribute: str) -> str:
    """The storage's dtype; a non-storage fails on the attribute torch reads first."""
    if not isinstance(storage, _Storage):
        raise AttributeError(f"'{_short_type(storage)}' object has no attribute '{attribute}'")
    return storage.dtype


def _without_metadata(tensor: TensorHeader, metadata: Any) -> TensorHeader:
    """torch's set_tensor_metadata: a dict of str -> bool flags; only "neg" (a sign bit, no
    change of shape or dtype) is read here."""
    if not metadata:
        return tensor
    if not isinstance(metadata, dict):
        raise AssertionError(f"expected dict, got {_short_type(metadata)}")
    flags_ok = all(isinstance(key, str) and isinstance(value, bool) for key, value in metadata.items())
    if not flags_ok or metadata.get("conj"):
        raise UnsupportedTensorError("tensor metadata other than the neg bit")
    return tensor


def _with_grad(tensor: TensorHeader, requires_grad: Any) -> TensorHeader:
    if requires_grad and not (tensor.is_floating_point or tensor.dtype.startswith("complex")):
        raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
    return tensor


def _short_type(value: Any) -> str:
    """type(value).__name__ of torch's object for a value here."""
    return _type_name(value)[len("<class '"):-2].rsplit(".", 1)[-1]


def _set_args_error(offset: Any, size: Any, stride: Any) -> TypeError:
    """torch's TypeError for Tensor.set_(storage, offset, size, stride) with wrong types."""

    def describe(value: Any, ok: bool) -> str:  # torch's text for an argument, "!...!" if refused
        text = _short_type(value)
        if isinstance(value, tuple):
            items = [_short_type(item) for item in value]
            text = "tuple of (" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return text if ok else f"!{text}!"

    got = ", ".join(["torch.storage.UntypedStorage", *(_short_type(v) for v in (offset, size, stride))])
    marks = ", ".join([
        "!torch.storage.UntypedStorage!",
        describe(offset, type(offset) is int),
        describe(size, False),  # torch marks both sequences whenever the call fails
        describe(stride, False),
    ])  # fmt: skip
    mismatch = f"      didn't match because some of the arguments have invalid types: ({marks})\n"
    return TypeError(
        f"set_() received an invalid combination of arguments - got ({got}), but expected one of:\n"
        " * ()\n * (torch.Storage source)\n"
        " * (torch.Storage source, int storage_offset, tuple of ints size, tuple of ints stride = None)\n"
        + mismatch
        + " * (Tensor source)\n"
        " * (Tensor source, int storage_offset, tuple of ints size, tuple of ints stride = None)\n"
        + mismatch
    )


def _int_sequence(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(type(item) is int for item in value)


def _rebuild(storage: _Storage, offset: Any, size: Any, stride: Any, dtype: str) -> TensorHeader:
    """torch.empty((0,), dtype).set_(storage, offset, size, stride), with set_'s refusals."""
    if type(offset) is not int or not _int_sequence(size) or not _int_sequence(stride):
        raise _set_args_error(offset, size, stride)
    if size and not stride:  # set_'s stride defaults to contiguous
        stride = [1] * len(size)
        for dim in range(len(size) - 2, -1, -1):
            stride[dim] = stride[dim + 1] * max(size[dim + 1], 1)
    if len(size) != len(stride):
        raise RuntimeError(f"unequal size length ({len(size)}) and stride length ({len(stride)})")
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    shape = tuple(size)
    numel = 1
    for dim in shape:
        numel *= dim
    if any(dim < 0 for dim in shape) or numel >= _INT64_LIMIT:
        raise RuntimeError("numel: integer multiplication overflow")
    item = DTYPE_SIZES[dtype]
    extent = 0 if numel == 0 else offset + sum((dim - 1) * step for dim, step in zip(shape, stride, strict=True)) + 1
    if any(step < 0 for step in stride) or extent * item >= _INT64_LIMIT:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)} and strides={list(stride)}")
    if extent * item > storage.nbytes:
        if not storage.resizable:
            raise RuntimeError("Trying to resize storage that is not resizable")
        storage.nbytes = extent * item
    return TensorHeader(shape, dtype, storage, offset, tuple(stride))


def _storage_dtype(storage_type: Any) -> str:
    if not isinstance(storage_type, _StorageType):
        raise AttributeError(f"'{type(storage_type).__name__}' object has no attribute 'dtype'")
    return storage_type.dtype or "uint8"


# -- the two file formats --------------------------------------------------------------------------


def load_weights_only(payload: bytes) -> Any:
    """`torch.load(BytesIO(payload), weights_only=True)`, tensors as `TensorHeader`s.

    Raises what torch would (see the module docstring); an UnpicklingError carries torch's
    wrapped text (`weights_only_message`).
    """
    try:
        if payload[:4] == b"PK\x03\x04":
            return _load_zip(payload)
        return _load_legacy(io.BytesIO(payload))
    except UnpicklingError as exc:
        raise UnpicklingError(weights_only_message(str(exc))) from None


def _load_zip(payload: bytes) -> Any:
    try:
        archive = zipfile.ZipFile(io.BytesIO(payload))
        names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise RuntimeError(
            "PytorchStreamReader failed reading zip archive: failed finding central directory" + _MINIZ_HINT
        ) from exc
    prefix = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
    if f"{prefix}constants.pkl" in names:
        raise RuntimeError(
            "Cannot use ``weights_only=True`` with TorchScript archives passed to ``torch.load``. "
            + _UNSAFE_MESSAGE
        )

    def record(name: str) -> bytes:
        try:
            info = archive.getinfo(prefix + name)
        except KeyError:
            raise _missing_record(name) from None
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > _MAX_INFLATED_RECORD:
            raise UnsupportedTensorError(f"a compressed record of {info.file_size} bytes")
        return archive.read(info)

    byteorder = record("byteorder") if f"{prefix}byteorder" in names else b"little"
    if byteorder not in (b"little", b"big"):
        raise ValueError("Unknown endianness type: " + byteorder.decode())
    loaded: dict[Any, _Storage] = {}

    def persistent_load(pid: Any) -> _Storage:
        if not isinstance(pid, tuple):
            raise AssertionError(f"saved_id must be a tuple, got {type(pid).__name__}")
        storage_type, key, _location, numel = pid[1:]
        if key not in loaded:
            dtype = _storage_dtype(storage_type)
            nbytes = _storage_bytes(numel, dtype)
            record_name = f"data/{key}".split("\0", 1)[0]  # torch looks the name up as a C string
            if f"{prefix}{record_name}" not in names:
                raise _missing_record(record_name)
            size = archive.getinfo(f"{prefix}{record_name}").file_size
            if size != nbytes:  # torch reads the record as bytes (UntypedStorage)
                raise RuntimeError(
                    f"record size ({size} bytes) does not match expected size ({nbytes} bytes = "
                    f"{nbytes} elements * 1 bytes/element) for dtype Byte"
                )
            loaded[key] = _Storage(dtype, nbytes, read=lambda: record(record_name), little_endian=byteorder == b"little")
        return loaded[key]

    return _WeightsOnlyUnpickler(io.BytesIO(record("data.pkl")), persistent_load).load()


def _storage_bytes(numel: Any, dtype: str) -> int:
    """numel * element size, as torch computes it; a non-integer count (torch would repeat a
    string by it before failing) is refused first."""
    if type(numel) is not int:
        raise UnsupportedTensorError("a storage whose size is not an integer")
    return numel * DTYPE_SIZES[dtype]


def _missing_record(name: str) -> RuntimeError:
    return RuntimeError(f"PytorchStreamReader failed locating file {name}: file not found" + _MINIZ_HINT)


def _load_legacy(file: io.BytesIO) -> Any:
    def no_storage(pid: Any) -> Any:
        raise UnpicklingError("unsupported persistent id encountered")

    def load_one() -> Any:
        return _WeightsOnlyUnpickler(file, no_storage).load()

    if load_one() != _LEGACY_MAGIC:
        raise RuntimeError("Invalid magic number; corrupt file?")
    protocol = load_one()
    if protocol != _LEGACY_PROTOCOL:
        raise RuntimeError(f"Invalid protocol version: {protocol}")
    load_one()  # system info
    storages: dict[Any, _Storage] = {}

    def persistent_load(pid: Any) -> _Storage:
        if not isinstance(pid, tuple):
            raise AssertionError(f"saved_id must be a tuple, got {type(pid).__name__}")
        if _ascii(pid[0]) != "storage":
            raise RuntimeError(f"Unknown saved id type: {pid[0]}")
        storage_type, root_key, _location, numel, view = pid[1:]
        if view is not None:
            raise UnsupportedTensorError("storage views of the legacy format")
        dtype = _storage_dtype(storage_type)
        storages.setdefault(root_key, _Storage(dtype, _storage_bytes(numel, dtype), resizable=True))
        return storages[root_key]

    result = _WeightsOnlyUnpickler(file, persistent_load).load()
    keys = load_one()
    for key in keys:
        if key not in storages:
            raise AssertionError(f"storage key {key!r} not found in deserialized_objects")
        _check_legacy_storage(file, storages[key])
    return result


def _check_legacy_storage(file: io.BytesIO, storage: _Storage) -> None:
    """Each storage is its element count (int64) then its bytes, read as torch's
    _set_from_file does (its size message keeps its unformatted printf text)."""
    head = file.read(8)
    if len(head) < 8:
        raise _unexpected_eof(8 - len(head))
    file_bytes = _int64(struct.unpack("<q", head)[0] * DTYPE_SIZES[storage.dtype])  # C++ arithmetic
    if file_bytes != storage.nbytes:
        raise RuntimeError(f"storage has wrong byte size: expected %ld got %ld{file_bytes}{storage.nbytes}")
    missing = storage.nbytes - len(file.read(storage.nbytes))
    if missing:
        raise _unexpected_eof(missing)


def _int64(value: int) -> int:
    """`value` wrapped as a signed 64-bit integer."""
    return (value + _INT64_LIMIT) % (2 * _INT64_LIMIT) - _INT64_LIMIT


def _unexpected_eof(missing: int) -> RuntimeError:
    return RuntimeError(f"unexpected EOF, expected {missing} more bytes. The file might be corrupted.")


def weights_only_message(message: str) -> str:
    """torch.load's `_get_wo_message`: the text around a weights-only UnpicklingError."""
    if re.search(r"GLOBAL (\S+) was not an allowed global by default.", message):
        return (
            "Weights only load failed. This file can still be loaded, to do so you have two options, "
            "\033[1mdo those steps only if you trust the source of the checkpoint\033[0m. "
            f"\n\t(1) {_UNSAFE_MESSAGE}\n\t(2) Alternatively, to load with `weights_only=True` please check "
            "the recommended steps in the following error message.\n\tWeightsUnpickler error: "
            + message
            + _DOCS_MESSAGE
        )
    if re.search(r"(\S+) must be (\S+) to load", message):
        return f"Weights only load failed. {message}\n {_UNSAFE_MESSAGE}\n"
    updated = f"Weights only load failed. {_UNSAFE_MESSAGE}\n"
    if not re.search(r"whose module (\S+) is blocked", message):
        updated += (
            "Please file an issue with the following so that we can make "
            "`weights_only=True` compatible with your use case: WeightsUnpickler error: "
        )
    return updated + "\n\n" + message + _DOCS_MESSAGE
