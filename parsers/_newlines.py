"""Escaped-newline recovery for output text (vLLM 0.33 `vllm/parser/minicpmv.py` behaviour).

MiniCPM-V's tokenizer can decode a newline as the two characters `\\` `n`; vLLM's composed
MiniCPM-V parser turns `\\n`, `\\r` and `\\r\\n` back into a newline in reasoning and content
(never in tool-call arguments). Text inside code fences (```` ``` ````), inline code (`` ` ``),
math (`$$`, `$`, `\\(...\\)`, `\\[...\\]`) and runs of two or more backslashes is left as is.

`NewlineState` is the whole streaming state: the open span's closing marker and a held tail
that may still become an escape or a marker (at most three characters). Upstream holds a run
of backslashes until it ends; here a run of two or more is emitted at once and remembered
(`in_run`), since whatever follows it is copied the same way. Feeding any split of a text, then
`final=True`, gives exactly `recover_newlines` of the whole text.
"""

from __future__ import annotations

import dataclasses

from parsers._state import JsonState

__all__ = ["NewlineState", "feed_newlines", "recover_newlines"]

# Openers outside any span -> the marker that closes the span.
_OPENERS: tuple[tuple[str, str], ...] = (("```", "```"), ("`", "`"), ("$$", "$$"), ("$", "$"))
_BACKSLASH_SPANS = {"\\(": "\\)", "\\[": "\\]"}
_CLOSERS = frozenset(("```", "`", "$$", "$", "\\)", "\\]"))


@dataclasses.dataclass(frozen=True, slots=True)
class NewlineState(JsonState):
    VERSION = 1

    closing: str = ""  # closing marker of the open code / math span ("" outside)
    held: str = ""  # tail that may still become an escape or a marker
    in_run: bool = False  # the text so far ends in a run of two or more backslashes

    def __post_init__(self) -> None:
        if self.closing and self.closing not in _CLOSERS:
            raise ValueError("unknown span marker")
        if len(self.held) > 3 or (self.in_run and self.held):
            raise ValueError("held text longer than an escape")


def recover_newlines(text: str | None) -> str | None:
    if text is None or "\\" not in text:
        return text
    return feed_newlines(NewlineState(), text, final=True)[1]


def feed_newlines(state: NewlineState, text: str, *, final: bool) -> tuple[NewlineState, str]:
    """Recover escapes in `text`; returns the new state and the text that is decided."""
    buf = state.held + text
    closing, in_run = state.closing, state.in_run
    out: list[str] = []
    i, n = 0, len(buf)
    while i < n:
        rest = buf[i:]
        if closing:
            if rest.startswith(closing):
                out.append(closing)
                i += len(closing)
                closing = ""
            elif not final and closing.startswith(rest):
                return NewlineState(closing, rest), "".join(out)
            else:
                out.append(buf[i])
                i += 1
            continue
        char = buf[i]
        if char == "\\" and in_run:
            out.append(char)
            i += 1
            continue
        in_run = False
        if char in "`$":
            pair = char * (3 if char == "`" else 2)
            if not final and pair.startswith(rest) and rest != pair:
                return NewlineState("", rest), "".join(out)
            opener = next(o for o, _ in _OPENERS if o[0] == char and rest.startswith(o))
            out.append(opener)
            i += len(opener)
            closing = opener
            continue
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if rest.startswith("\\\\"):
            in_run = True  # two or more: copied as is, with whatever follows
            out.append("\\\\")
            i += 2
            continue
        if not final and rest in ("\\", "\\r", "\\r\\"):
            return NewlineState("", rest), "".join(out)
        if rest.startswith("\\r\\n"):
            out.append("\n")
            i += 4
        elif rest.startswith(("\\n", "\\r")):
            out.append("\n")
            i += 2
        elif rest[:2] in _BACKSLASH_SPANS:
            out.append(rest[:2])
            closing = _BACKSLASH_SPANS[rest[:2]]
            i += 2
        else:
            out.append("\\")
            i += 1
    return NewlineState(closing, "", in_run), "".join(out)
