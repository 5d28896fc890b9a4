"""Hy4 (HunYuan v4) tool calls, every marker carrying the checkpoint's `token_suffix`:

    <tool_calls><tool_call>get_weather<arg_key>city</arg_key><arg_value>Tokyo</arg_value></tool_call></tool_calls>

vLLM 0.33's `HYV4ToolParser` is hy_v3's format without `<tool_sep>` (a name runs to its
call's first `<arg_key>` or to `</tool_call>`) and with a strict batch: any malformed block
makes the whole output content. Reproduced here:

* without `<tool_calls>` the output is content, verbatim; else the content is the text before
  it (None when empty); only the first block counts: what follows `</tool_calls>` is dropped;
* `</tool_calls>` before any `<tool_calls>`, a block without a call, a first call with an
  empty name or one the output cuts before its name ends: the whole output is content;
* values are read as hy_v3's (`hy_value` against the tool's schema), keys verbatim.

Streaming (as vLLM's own stream, which does not validate): a call is sent when its name ends
and its pairs stream (glm47's `ArgPairs`). So the strict checks that can only fail after a call
was sent (a missing `</tool_calls>` or `</tool_call>`, blanks between `</arg_key>` and
`<arg_value>`, junk between pairs, unbalanced tags inside a call, a later call with an empty
name) keep the calls that streamed, where vLLM's batch returns the whole output as content:
one named divergence (`strict_rejected` in the tests). A later call with an empty name is
dropped.
"""

from __future__ import annotations

import enum
import functools
from typing import ClassVar

from parsers.tools._machine import EOS, TEXT, Run, Step, Table, drop, nothing, to_content
from parsers.tools.hy_v3 import (
    HyCall,
    HyV3ToolParser,
    _args,
    _args_eos,
    _end_call,
    _flush,
    _name,
    _open_block,
    _open_call,
    _parser,
)

__all__ = ["HyV4ToolParser"]


class P(enum.StrEnum):
    CONTENT = "content"
    BLOCK = "block"  # inside <tool_calls>: text between calls is dropped
    NAME = "name"  # after <tool_call>: the name until <arg_key> or </tool_call>
    ARGS = "args"  # the call's pairs until </tool_call>
    AFTER = "after"  # after </tool_calls>: dropped
    VERBATIM = "verbatim"  # the strict batch failed before any call: all content


@functools.cache
def _markers(suffix: str) -> dict[str, str]:
    names = ("tool_calls", "/tool_calls", "tool_call", "/tool_call", "arg_key", "/arg_key",
             "arg_value", "/arg_value")  # fmt: skip
    return {name: f"<{name}{suffix}>" for name in names}


class HyV4ToolParser(HyV3ToolParser):
    name: ClassVar[str] = "hy_v4"
    initial_phase: ClassVar[str] = P.CONTENT
    call_phases = frozenset({P.NAME, P.ARGS})

    def _build_table(self, suffix: str) -> Table:
        self.markers = _markers(suffix)
        return _table(suffix)


def _verbatim(run: Run, text: str) -> None:
    """The strict batch fails whatever follows: everything so far, and the rest, is content."""
    run.content(run.pending + text)
    run.pending = ""
    run.call = None
    run.phase = P.VERBATIM


def _commit(run: Run, marker: str) -> bool:
    """The name ended at `marker`: send the call, or reject an empty name (False)."""
    call: HyCall = run.call
    name = call.name.strip()
    if not name:
        if run.n_calls == 0:
            _verbatim(run, call.name + marker)
        else:  # documented: a later nameless call is dropped
            run.call = None
            run.phase = P.BLOCK
        return False
    fmt = _parser(run).arg_format(name)
    run.call = call.replace(name=name, args=fmt.start(name))
    run.start_call(name)
    return True


def _name_to_args(run: Run, marker: str) -> None:
    if _commit(run, marker):
        _args(run, marker)


def _name_to_end(run: Run, marker: str) -> None:
    if _commit(run, marker):
        _end_call(run, marker)


def _name_eos(run: Run, text: str) -> None:
    """A call cut inside its name: unbalanced, so no call (all content when it is the first)."""
    run.keep_raw(run.call.name)
    run.call = None
    _flush(run, text)


def _close_block(run: Run, marker: str) -> None:
    if run.n_calls == 0:  # a block without a call
        _verbatim(run, marker)


@functools.cache
def _table(suffix: str) -> Table:
    m = _markers(suffix)
    return Table(
        phases=tuple(P),
        markers=tuple(m.values()),
        steps={
            (P.CONTENT, TEXT): Step(to_content),
            (P.CONTENT, m["tool_calls"]): Step(_open_block, P.BLOCK),
            (P.CONTENT, m["/tool_calls"]): Step(_verbatim),
            (P.CONTENT, EOS): Step(nothing),
            (P.BLOCK, TEXT): Step(drop),
            (P.BLOCK, m["tool_call"]): Step(_open_call, P.NAME),
            (P.BLOCK, m["/tool_calls"]): Step(_close_block, P.AFTER),
            (P.BLOCK, EOS): Step(_flush),
            (P.NAME, TEXT): Step(_name),
            (P.NAME, m["arg_key"]): Step(_name_to_args, P.ARGS),
            (P.NAME, m["/tool_call"]): Step(_name_to_end, P.BLOCK),
            (P.NAME, EOS): Step(_name_eos, P.BLOCK),
            (P.ARGS, TEXT): Step(_args),
            (P.ARGS, m["/tool_call"]): Step(_end_call, P.BLOCK),
            (P.ARGS, EOS): Step(_args_eos, P.BLOCK),
            (P.AFTER, TEXT): Step(nothing),
            (P.AFTER, EOS): Step(nothing),
            (P.VERBATIM, TEXT): Step(to_content),
            (P.VERBATIM, EOS): Step(nothing),
        },
    )


HyV4ToolParser.table = _table("")
