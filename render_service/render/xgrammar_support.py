"""Which user structured outputs vLLM 0.33's xgrammar backend accepts, decided without xgrammar.

Only one render path needs it: `tool_choice="auto"` with constrained tools and the user's own
`response_format` / `structured_outputs`. vLLM then asks xgrammar whether the user constraint
compiles (`_xgrammar_supports`); if it does, the structural tag becomes "a tool call OR the
user's format", if not the tools stay unconstrained. xgrammar is native code we cannot run, so:

- `json_object` and `choice` always compile (a choice list is escaped into EBNF literals);
- a JSON schema gets vLLM's own pure-Python checks (nesting depth, the features vLLM knows
  xgrammar lacks), then ours (`_Vetter`): a schema made only of keywords whose xgrammar
  behaviour we have observed compiles, one xgrammar rejects gives None, anything else is
  `Unknown` and the caller refuses it with a 501 rather than guess;
- regex, grammar and structural-tag constraints are `Unknown` (their parsers live in xgrammar),
  except empty ones, which vLLM's validator skips as "no constraint".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["Unknown", "output_format"]

MAX_JSON_NESTING = 64  # vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING
_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "object", "array"})
_STRING_FORMATS = frozenset(
    {
        *("email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid"),
        *("uri", "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"),
    }
)
# Keywords xgrammar ignores whatever their value.
_ANNOTATIONS = frozenset({"title", "description", "$comment", "default", "examples", "deprecated", "$schema"})
_INT_LIMIT = 2_147_483_647


class Unknown(Exception):
    """We cannot tell whether xgrammar accepts this constraint (the message says why)."""


def output_format(structured: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's `structured_outputs_to_format` when `_xgrammar_supports`, else None.

    `structured` is the merged user constraint (exactly one constraint key set).

    Raises:
        Unknown: whether xgrammar accepts the constraint cannot be decided here.
    """
    if structured.get("regex") is not None:
        raise Unknown("a regex")  # even "": vLLM compiles any regex that is not None
    if structured.get("choice") is not None:
        choice = structured["choice"]
        if not choice:
            return None  # vLLM's validator skips an empty list and finds no constraint
        return {"type": "or", "elements": [{"type": "const_string", "value": item} for item in choice]}
    if structured.get("json") is not None:
        schema = _load_schema(structured["json"])
        if schema is None or not _schema_compiles(schema):
            return None
        return _json_schema_format(schema)
    if structured.get("json_object"):
        return _json_schema_format({"type": "object"})
    for key, what in (("grammar", "a grammar"), ("structural_tag", "a structural tag")):
        if structured.get(key):
            raise Unknown(what)
    return None  # e.g. json_object=false or grammar="": vLLM's validator finds no constraint


def _json_schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": schema,
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": None,
        "excludes": [],
    }


def _load_schema(raw: Any) -> dict[str, Any] | None:
    """The schema of `json` (a dict or a JSON string); None when vLLM rejects it unparsed."""
    if _too_deep(raw):
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, dict):
        raise Unknown("a JSON schema that is not an object")
    return raw


def _too_deep(spec: Any) -> bool:
    """vLLM's `_exceeds_json_nesting` (malformed JSON strings are left to the parser)."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except RecursionError:
            return True
        except ValueError:
            return False
    if not spec:
        return False
    level: list[Any] = [spec]
    for _ in range(MAX_JSON_NESTING):
        level = [
            child
            for node in level
            if isinstance(node, (dict, list))
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, (dict, list))
        ]
        if not level:
            return False
    return True


def _schema_compiles(schema: dict[str, Any]) -> bool:
    if _has_unsupported_features(schema):
        return False
    vetter = _Vetter(schema)
    vetter.visiting.add("#")
    return vetter.schema(schema)


# -- vLLM's has_xgrammar_unsupported_json_features -------------------------------------------


def _schema_types(obj: dict[str, Any]) -> set[str]:
    kind = obj.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {item for item in kind if isinstance(item, str)}
    return set()


def _pattern_with_length(obj: dict[str, Any]) -> bool:
    return ("pattern" in obj or "format" in obj) and ("minLength" in obj or "maxLength" in obj)


def _unsupported_here(obj: dict[str, Any]) -> bool:
    types = _schema_types(obj)
    if types & {"integer", "number"} and "multipleOf" in obj:
        return True
    if "array" in types and any(key in obj for key in ("uniqueItems", "contains", "minContains", "maxContains")):
        return True
    if "string" in types and "format" in obj and obj["format"] not in _STRING_FORMATS:
        return True
    if "string" in types and _pattern_with_length(obj):
        return True
    if "object" in types and "propertyNames" in obj:
        names = obj.get("propertyNames")
        if isinstance(names, dict) and _pattern_with_length(names):
            return True
        if "patternProperties" in obj or "properties" in obj:
            return True
        if obj.get("unevaluatedProperties", True) is not True:
            return True
    patterns = obj.get("patternProperties")
    if "object" in types and isinstance(patterns, dict) and ("properties" in obj or len(patterns) > 1):
        return True
    all_of = obj.get("allOf")
    return isinstance(all_of, list) and len(all_of) >= 2


def _has_unsupported_features(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if _unsupported_here(obj):
        return True
    for value in obj.values():
        items = value if isinstance(value, list) else [value]
        if any(isinstance(item, dict) and _has_unsupported_features(item) for item in items):
            return True
    return False


# -- our vetting: True compiles, False xgrammar rejects, Unknown otherwise --------------------
# Every False below is a rejection seen from xgrammar 0.2.8 (vLLM 0.33's); everything we have
# not seen is Unknown. tests/render/test_structural_tags_vllm_differential.py holds the cases.


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("minimum", "maximum"), frozenset({"integer", "number"})),
    **dict.fromkeys(("minLength", "maxLength", "format"), frozenset({"string"})),
    **dict.fromkeys(("items", "minItems", "maxItems"), frozenset({"array"})),
    **dict.fromkeys(
        ("properties", "required", "additionalProperties", "minProperties", "maxProperties"), frozenset({"object"})
    ),
}
# Keywords whose siblings xgrammar may read or ignore: we accept them only alone.
_ALONE_KEYWORDS = frozenset({"$ref", "anyOf", "oneOf", "allOf"})
_RANGES = (
    ("minimum", "maximum"),
    ("minLength", "maxLength"),
    ("minItems", "maxItems"),
    ("minProperties", "maxProperties"),
)


class _Vetter:
    """Walks a schema the way xgrammar compiles it: from the root, following `$ref`s
    (unreferenced `$defs` are never compiled, so they are not checked)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.visiting: set[str] = set()
        self.checks: dict[str, Callable[[Any], bool]] = {
            "type": self._type,
            "properties": self._properties,
            "$defs": self._defs,
            "definitions": self._defs,
            "required": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
            "additionalProperties": lambda v: isinstance(v, bool) or self._subschema(v),
            "items": self._subschema,
            "enum": lambda v: isinstance(v, list) and bool(v),
            "const": lambda v: True,
            "anyOf": self._schema_list,
            "oneOf": self._schema_list,
            "allOf": self._single_schema_list,
            "$ref": self._ref,
            "format": self._format,
            "minimum": _is_number,
            "maximum": _is_number,
            **dict.fromkeys(
                ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"), self._count
            ),
        }

    def schema(self, node: Any) -> bool:
        if node is True:
            return True
        if not isinstance(node, dict):
            raise Unknown("a JSON schema node that is not an object or true")
        kind = node.get("type")
        keywords = set(node) - _ANNOTATIONS - {"$defs", "definitions"}
        if keywords & _ALONE_KEYWORDS and len(keywords) > 1:
            raise Unknown(f"{sorted(keywords)} together in one schema")
        for key, value in node.items():
            if key in _ANNOTATIONS:
                continue
            check = self.checks.get(key)
            if check is None:
                raise Unknown(f"the JSON schema keyword {key!r}")
            owner = _TYPE_KEYWORDS.get(key)
            if owner is not None and kind not in owner:
                # xgrammar reads these only under their own type; elsewhere its behaviour varies.
                raise Unknown(f"{key!r} outside a schema of type {' or '.join(sorted(owner))}")
            if not check(value):
                return False
        if kind == "integer" and any(not isinstance(node.get(k, 0), int) for k in ("minimum", "maximum")):
            raise Unknown("a fractional bound on an integer")
        return all(not (low in node and high in node and node[low] > node[high]) for low, high in _RANGES)

    def _subschema(self, value: Any) -> bool:
        return isinstance(value, (dict, bool)) and self.schema(value)

    def _type(self, value: Any) -> bool:
        if isinstance(value, list):
            if not value or not all(isinstance(item, str) and item in _TYPES for item in value):
                raise Unknown("a type list with unknown or no types")
            return True
        return isinstance(value, str) and value in _TYPES

    def _properties(self, value: Any) -> bool:
        return isinstance(value, dict) and all(self.schema(child) for child in value.values())

    def _defs(self, value: Any) -> bool:
        if not isinstance(value, dict):
            raise Unknown("$defs that are not an object")
        return True

    def _schema_list(self, value: Any) -> bool:
        if not isinstance(value, list) or not value:
            raise Unknown("an empty or malformed schema list")
        return all(self._subschema(child) for child in value)

    def _single_schema_list(self, value: Any) -> bool:
        if not isinstance(value, list) or len(value) != 1:
            raise Unknown("an allOf that is not a one-schema list")
        return self._subschema(value[0])

    def _ref(self, value: Any) -> bool:
        target = self._resolve(value)
        if target is None:
            return False  # xgrammar: "Cannot find field ..."
        if value in self.visiting:
            return True  # a recursive reference: its schema is being checked already
        self.visiting.add(value)
        return self.schema(target)

    def _resolve(self, ref: Any) -> Any:
        """The schema `ref` points to; None for a plain `#/$defs/NAME` with no such NAME."""
        if ref == "#":
            return self.root
        for container in ("$defs", "definitions"):
            prefix = f"#/{container}/"
            if isinstance(ref, str) and ref.startswith(prefix) and not any(c in ref for c in "~%"):
                name = ref[len(prefix) :]
                defs = self.root.get(container)
                if "/" in name or not isinstance(defs, (dict, type(None))):
                    break
                return defs.get(name) if defs is not None else None
        raise Unknown(f"the $ref {ref!r}")

    @staticmethod
    def _format(value: Any) -> bool:
        if isinstance(value, str) and value in _STRING_FORMATS:
            return True
        raise Unknown(f"the string format {value!r}")

    @staticmethod
    def _count(value: Any) -> bool:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT_LIMIT:
            return True
        if isinstance(value, (int, float)):
            raise Unknown("a negative, huge, fractional or boolean length bound")
        return False
