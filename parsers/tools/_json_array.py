"""A JSON array of `{"name": ..., "arguments": ...}` calls, read item by item (the legacy
families whose calls are one array: xlam, phi4_mini_json, jamba).

The family consumes the array's `[` and moves to ITEMS; from there this module's actions run
the phases ITEMS (between items: separators are checked as JSON would), ITEM (an object
item, read by `_json_calls`: sent at its arguments' start, its arguments streaming) and SKIP
(a non-object item, validated and dropped). The family's `ArrayRules` say what vLLM's batch
makes of one decoded object item (a call, skipped, or fatal: vLLM raises and the whole output
becomes content), which argument types may commit early, whether non-object items are skipped,
and what follows the array's `]`.

While no call was sent, every character of the array is kept (`pending`), so a fault still
gives vLLM's batch result: the whole output as content. After a call was sent, a fault makes
the rest of the output content and the calls sent stay (the families name it a divergence).
The family's state extension carries `sep` and `skip` (`ArrayExt`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from parsers._state import JsonState
from parsers.tools._base import is_json, json_raw_decode
from parsers.tools._json_args import DONE, MORE, JsonArgs, JsonArgsState
from parsers.tools._json_calls import Admit, JsonCallReader, admit_any
from parsers.tools._machine import Run, TableToolParser

__all__ = ["ITEMS", "ITEM", "SKIP", "VERBATIM", "FATAL", "SKIPPED", "ArrayExt", "ArrayRules",
           "ArrayToolParser", "items", "item", "skip", "cut", "fault"]  # fmt: skip

ITEMS, ITEM, SKIP, VERBATIM = "items", "item", "skip", "verbatim"
_WS = " \t\n\r"

FATAL = "fatal"  # vLLM's batch raises on this item: the whole output is content
SKIPPED = "skipped"  # vLLM's batch leaves this item out
Decided = tuple[str, str] | str  # (name, arguments), FATAL or SKIPPED


@dataclass(frozen=True, slots=True)
class ArrayExt(JsonState):
    """sep: what the array read last ("[", "," or "v" a value). skip: a SKIP item's scanner."""

    sep: str = "["
    skip: JsonArgsState | None = None

    def __post_init__(self) -> None:
        if self.sep not in ("[", ",", "v"):
            raise ValueError("bad array separator")


@dataclass(frozen=True)
class ArrayRules:
    """item: vLLM's batch rule for one decoded object item. done: the array's `]` was read
    (the family sets the next phase). skip_non_objects: vLLM skips items that are no objects
    (else they are fatal). admit: which argument kinds commit at their first token.
    args_keys: the members whose value is streamed as the arguments (the first one met).
    string_verbatim: string arguments are the arguments themselves (else JSON-dumped)."""

    item: Callable[[dict[str, Any]], Decided]
    done: Callable[[Run], None]
    skip_non_objects: bool = False
    admit: Admit = admit_any
    args_keys: tuple[str, ...] = ("arguments",)
    string_verbatim: bool = False


def reader(rules: ArrayRules, limit: int) -> JsonCallReader:
    """The item reader of a family (the parser's `reader` property)."""

    def decide(run: Run, raw: str) -> bool:
        parsed, _ = json_raw_decode(raw)
        if not is_json(parsed) or not isinstance(parsed, dict):
            return False
        found = rules.item(parsed)
        if found == FATAL:
            return False
        if isinstance(found, tuple):
            run.emit_call(*found)
        else:  # SKIPPED
            run.keep_raw(raw)
        return True

    return JsonCallReader(
        args_keys=rules.args_keys, limit=limit, ends_with_value=True, decide=decide,
        reject=lambda run, raw: fault(run, raw), string_verbatim=rules.string_verbatim,
        admit=rules.admit,
    )  # fmt: skip


class ArrayToolParser(TableToolParser):
    """A family whose calls are one JSON array: its `rules`, and the reader they give."""

    rules: ClassVar[ArrayRules]

    @property
    def reader(self) -> JsonCallReader:
        return reader(self.rules, self.call_limit)


def fault(run: Run, raw: str) -> None:
    """The array is not what vLLM's batch accepts: before any call the whole output is
    content (the kept text, then `raw`); after one, the rest of the output is."""
    run.reject_call(raw, VERBATIM, VERBATIM)
    run.ext = run.ext.replace(skip=None)


def _rules(run: Run[ArrayToolParser]) -> ArrayRules:
    return run.parser.rules


def items(run: Run[ArrayToolParser], text: str) -> str | None:
    body = text.lstrip(_WS)
    run.keep_raw(text[: len(text) - len(body)])
    if not body:
        return None
    ch, sep = body[0], run.ext.sep
    if ch == "," and sep == "v":
        run.keep_raw(",")
        run.ext = run.ext.replace(sep=",")
        return body[1:] or None
    if ch == "]" and sep != ",":
        run.keep_raw("]")
        run.ext = run.ext.replace(sep="[")
        _rules(run).done(run)
        return body[1:] or None
    if sep == "v" or ch in ",]":
        fault(run, "")
        return body
    if ch == "{":
        run.open_call_raw("")
        run.parser.reader.open(run)
        run.phase = ITEM
        return body
    if not _rules(run).skip_non_objects:
        fault(run, "")
        return body
    run.ext = run.ext.replace(skip=JsonArgs().start())
    run.phase = SKIP
    return body


def item(run: Run[ArrayToolParser], text: str) -> str | None:
    rest = run.parser.reader.read(run, text)
    if rest is None:
        return None
    run.call = None
    if run.phase == ITEM:
        run.phase = ITEMS
        run.ext = run.ext.replace(sep="v")
    return rest or None


def skip(run: Run[ArrayToolParser], text: str) -> str | None:
    scanned, _, rest = JsonArgs().feed(run.ext.skip, text)
    consumed = text if rest is None else text[: len(text) - len(rest)]
    if scanned.status == MORE:
        run.keep_raw(consumed)
        run.ext = run.ext.replace(skip=scanned)
        return None
    if scanned.status != DONE:
        fault(run, consumed)
        return rest or None
    run.keep_raw(consumed)
    run.ext = run.ext.replace(skip=None, sep="v")
    run.phase = ITEMS
    return rest or None


def cut(run: Run[ArrayToolParser], marker: str) -> None:
    """The array's text ended (at `marker`, "" at the end of the output) before its `]`."""
    if run.phase == ITEM:  # an item whose value never ended: never decodes
        run.parser.reader.close(run, marker)  # uncommitted: a fault; committed: cut as is
        run.call = None
        run.phase = VERBATIM
        return
    fault(run, marker)
