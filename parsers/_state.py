"""Frozen, JSON-only state values with a version, and their strict codec.

Every parser keeps its complete streaming state in a subclass of `JsonState`: a frozen
dataclass whose fields are JSON types (str, int, bool, None, lists/dicts of those, or nested
JsonState). `to_json()` gives plain JSON data; `from_json()` checks the version, the field set
and every field's type before building the value, and raises `StateError` on anything else.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Self, get_args, get_origin

from parsers._errors import StateError

__all__ = ["JsonState"]


@dataclasses.dataclass(frozen=True, slots=True)
class JsonState:
    # Bump when the meaning or shape of a subclass's fields changes.
    VERSION: ClassVar[int] = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": self.VERSION}
        for name, dump in _codec(type(self)).dumpers:
            out[name] = dump(getattr(self, name))
        return out

    @classmethod
    def from_json(cls, data: object) -> Self:
        if not isinstance(data, dict):
            raise StateError(f"{cls.__name__}: state must be an object")
        version = data.get("v")
        # An exact int: JSON's true and 1.0 compare equal to 1 but are not version 1.
        if type(version) is not int or version != cls.VERSION:
            raise StateError(f"{cls.__name__}: unsupported state version {version!r}")
        codec = _codec(cls)
        if len(data) != len(codec.loaders) + 1 or not codec.names.issubset(data.keys()):
            raise StateError(f"{cls.__name__}: unexpected or missing state fields")
        kwargs = {name: load(data[name], where) for name, load, where in codec.loaders}
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:  # __post_init__ invariants
            raise StateError(f"{cls.__name__}: {exc}") from exc

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


# -- the codec, compiled once per state class from its type hints -------------------------------
#
# Type hints are read once (get_type_hints is slow) and turned into one loader and one dumper
# per field, so decoding a state costs a call per field instead of interpreting its type.

Loader = Callable[[Any, str], Any]
Dumper = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class _Codec:
    names: frozenset[str]
    loaders: tuple[tuple[str, Loader, str], ...]
    dumpers: tuple[tuple[str, Dumper], ...]


_CODECS: dict[type, _Codec] = {}


def _codec(cls: type) -> _Codec:
    codec = _CODECS.get(cls)
    if codec is None:
        codec = _CODECS[cls] = _compile(cls)
    return codec


def _compile(cls: type) -> _Codec:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    return _Codec(
        names=frozenset(names),
        loaders=tuple((n, _loader(hints[n]), f"{cls.__name__}.{n}") for n in names),
        dumpers=tuple((n, _dumper(hints[n])) for n in names),
    )


def _same(value: Any) -> Any:
    return value


def _dumper(hint: Any) -> Dumper:
    if hint in _SCALARS:
        return _same
    # Object fields hold JSON already (nested parser states, as their `to_json()` gives them).
    if hint is dict or get_origin(hint) is dict or hint == dict | None:
        return _same
    if isinstance(hint, type) and issubclass(hint, str):  # str-valued enums dump as str
        return _same
    return _dump


_SCALARS = frozenset({str, int, bool, float, type(None)})


def _dump(value: Any) -> Any:
    if isinstance(value, JsonState):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [v if type(v) in _SCALARS else _dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


@functools.cache
def _loader(hint: Any) -> Loader:  # noqa: C901 - one branch per JSON type
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _union(tuple(_loader(option) for option in get_args(hint)))
    if hint is type(None):
        return _exact(type(None), "null")
    if isinstance(hint, type) and issubclass(hint, JsonState):
        return lambda value, where: hint.from_json(value)
    if hint is bool:
        return _exact(bool, "a boolean")
    if hint is int:
        return _exact(int, "an integer")
    if hint is str:
        return _string
    if origin is tuple:
        return _tuple(get_args(hint)[0])
    if origin is dict or hint is dict:
        return _object
    if hint is typing.Any:
        return _as_is
    if isinstance(hint, type) and issubclass(hint, str):  # str-valued Enum phases
        return _enum(hint)
    raise StateError(f"unsupported state field type {hint!r}")


def _exact(kind: type, name: str) -> Loader:
    def load(value: Any, where: str) -> Any:
        if type(value) is kind:  # exact: a bool is not an int
            return value
        raise StateError(f"{where}: expected {name}")

    return load


def _as_is(value: Any, where: str) -> Any:
    return value


def _string(value: Any, where: str) -> Any:
    if isinstance(value, str):  # a str-valued enum member is a string too
        return value
    raise StateError(f"{where}: expected a string")


def _union(options: tuple[Loader, ...]) -> Loader:
    def load(value: Any, where: str) -> Any:
        for option in options:
            try:
                return option(value, where)
            except StateError:
                continue
        raise StateError(f"{where}: unexpected value")

    return load


def _tuple(item: Any) -> Loader:
    if item is int or item is str:  # fast path for long runs of scalars (held whitespace)

        def scalars(value: Any, where: str) -> Any:
            if type(value) is list and set(map(type, value)) <= {item}:
                return tuple(value)
            raise StateError(f"{where}: expected a list of {item.__name__}")

        return scalars
    load_item = _loader(item)

    def items(value: Any, where: str) -> Any:
        if type(value) is not list:
            raise StateError(f"{where}: expected a list")
        return tuple(load_item(v, where) for v in value)

    return items


def _object(value: Any, where: str) -> Any:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise StateError(f"{where}: expected an object")
    return dict(value)


def _enum(kind: type) -> Loader:
    def load(value: Any, where: str) -> Any:
        try:
            return kind(value)
        except ValueError as exc:
            raise StateError(f"{where}: unknown value {value!r}") from exc

    return load
