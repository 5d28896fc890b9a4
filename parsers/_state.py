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
from typing import Any, ClassVar, Self, get_args, get_origin

from parsers._errors import StateError

__all__ = ["JsonState"]


@dataclasses.dataclass(frozen=True, slots=True)
class JsonState:
    # Bump when the meaning or shape of a subclass's fields changes.
    VERSION: ClassVar[int] = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"v": self.VERSION}
        for f in dataclasses.fields(self):
            out[f.name] = _dump(getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls, data: object) -> Self:
        if not isinstance(data, dict):
            raise StateError(f"{cls.__name__}: state must be an object")
        version = data.get("v")
        # An exact int: JSON's true and 1.0 compare equal to 1 but are not version 1.
        if type(version) is not int or version != cls.VERSION:
            raise StateError(f"{cls.__name__}: unsupported state version {version!r}")
        hints, names = _schema(cls)
        if set(data) - {"v"} != names:
            raise StateError(f"{cls.__name__}: unexpected or missing state fields")
        kwargs = {name: _load(hints[name], data[name], f"{cls.__name__}.{name}") for name in names}
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:  # __post_init__ invariants
            raise StateError(f"{cls.__name__}: {exc}") from exc

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@functools.cache
def _schema(cls: type) -> tuple[dict[str, Any], frozenset[str]]:
    """Field types and names of a state class (resolved once: get_type_hints is slow)."""
    return typing.get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls))


_SCALARS = frozenset({str, int, bool, float, type(None)})


def _dump(value: Any) -> Any:
    if isinstance(value, JsonState):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [v if type(v) in _SCALARS else _dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any, where: str) -> Any:  # noqa: C901 - one branch per JSON type
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in get_args(hint):
            try:
                return _load(option, value, where)
            except StateError:
                continue
        raise StateError(f"{where}: unexpected value")
    if hint is type(None):
        if value is None:
            return None
        raise StateError(f"{where}: expected null")
    if isinstance(hint, type) and issubclass(hint, JsonState):
        return hint.from_json(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise StateError(f"{where}: expected a boolean")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise StateError(f"{where}: expected an integer")
    if hint is str:
        if isinstance(value, str):
            return value
        raise StateError(f"{where}: expected a string")
    if origin is tuple:
        if not isinstance(value, list):
            raise StateError(f"{where}: expected a list")
        item = get_args(hint)[0]
        if item is int or item is str:  # fast path for long runs of scalars (held whitespace)
            if set(map(type, value)) <= {item}:  # exact type: a bool is not an int
                return tuple(value)
            raise StateError(f"{where}: expected a list of {item.__name__}")
        return tuple(_load(item, v, where) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise StateError(f"{where}: expected an object")
        return dict(value)
    if hint is typing.Any:
        return value
    if isinstance(hint, type) and issubclass(hint, str):  # str-valued Enum phases
        try:
            return hint(value)
        except ValueError as exc:
            raise StateError(f"{where}: unknown value {value!r}") from exc
    raise StateError(f"{where}: unsupported field type {hint!r}")
