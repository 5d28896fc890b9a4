"""A seeded corpus of strings that stress every stage of a tokenizer pipeline.

Used to prove an alternative tokenizer (fastokens) equal to HF `tokenizers`. Each generator
aims at a stage where two implementations can drift apart:

- unicode: scripts with different regex classes (\\p{L}, \\p{N}, CJK, Hangul, Thai, RTL),
  combining marks and NFC-composable pairs (normalizers), any code point (byte fallback);
- emoji: ZWJ sequences, skin-tone modifiers, flags, variation selectors (multi-byte BPE);
- whitespace: runs of every Unicode space and line break (`\\s+(?!\\S)` style splits);
- code: real source text (the Python standard library) at random offsets;
- numbers: digit runs of every length (`\\p{N}{1,3}` splits), decimals, hex, exponents;
- words: English words with contractions in every case (`(?i:'s|'t|...)`);
- special: the tokenizer's added tokens, adjacent, repeated, fragmented, cased, spaced;
- long: concatenations of all the above, 5k-60k characters.

Everything is drawn from one `random.Random(seed)`: the corpus is identical on every run.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json.decoder
import random
import textwrap
from collections.abc import Callable, Sequence

_SCRIPT_RANGES = (
    (0x0020, 0x007E),  # ASCII
    (0x00A0, 0x017F),  # Latin-1, Latin Extended-A
    (0x0370, 0x03FF),  # Greek
    (0x0400, 0x04FF),  # Cyrillic
    (0x0590, 0x05FF),  # Hebrew
    (0x0600, 0x06FF),  # Arabic
    (0x0900, 0x097F),  # Devanagari
    (0x0E00, 0x0E7F),  # Thai
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0xFF00, 0xFFEF),  # full-width forms
    (0x2000, 0x206F),  # general punctuation (incl. zero-width and bidi controls)
    (0x1D400, 0x1D7FF),  # mathematical alphanumerics (NFKC-sensitive)
)
_COMBINING = [chr(c) for c in range(0x0300, 0x0370)]
_WHITESPACE = [
    " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680",
    "\u2002", "\u2003", "\u2009", "\u200a", "\u200b", "\u2028", "\u2029", "\u202f", "\u3000",
]  # fmt: skip
_EMOJI = [
    "😀", "😂", "👍", "👍🏽", "👍🏿", "❤️", "❤", "🇯🇵", "🇺🇸", "🏳️‍🌈", "👨‍👩‍👧‍👦", "🧑🏿‍💻",
    "1️⃣", "©️", "🤖", "🫠", "🦀", "✅", "☕", "🔥",
]  # fmt: skip
_WORDS = [
    "the", "The", "THE", "tokenizer", "Tokenizer", "isn't", "IT'S", "we'll", "They'd", "I'M",
    "you're", "YOU'VE", "can't", "don’t", "o'clock", "rock'n'roll", "naïve", "café", "Straße",
    "hello", "world", "HTTPServer", "getValue", "snake_case", "kebab-case", "e.g.", "U.S.A.",
]  # fmt: skip
_CODE_MODULES = (json.decoder, textwrap, difflib, argparse)


def _source_text() -> str:
    return "".join(inspect.getsource(module) for module in _CODE_MODULES)


def _unicode(rng: random.Random, _: Sequence[str]) -> str:
    out = []
    for _ in range(rng.randint(1, 12)):
        low, high = rng.choice(_SCRIPT_RANGES)
        out.append("".join(chr(rng.randint(low, high)) for _ in range(rng.randint(1, 8))))
        if rng.random() < 0.3:
            out.append(rng.choice(_COMBINING) * rng.randint(1, 3))
        out.append(rng.choice(("", " ", " ", "\n", rng.choice(_WHITESPACE))))
    return "".join(out)


def _any_code_point(rng: random.Random, _: Sequence[str]) -> str:
    chars = []
    for _ in range(rng.randint(1, 24)):
        code = rng.randint(0, 0x10FFFF)
        if 0xD800 <= code <= 0xDFFF:  # lone surrogates are not valid UTF-8 text
            code -= 0x800
        chars.append(chr(code))
    return "".join(chars)


def _emoji(rng: random.Random, _: Sequence[str]) -> str:
    parts = [rng.choice(_EMOJI + _WORDS + [" ", "\n", "", "!"]) for _ in range(rng.randint(1, 16))]
    return rng.choice(("", " ")).join(parts)


def _whitespace(rng: random.Random, _: Sequence[str]) -> str:
    out = []
    for _ in range(rng.randint(1, 8)):
        run = "".join(rng.choice(_WHITESPACE) for _ in range(rng.randint(1, 40)))
        out.append(run)
        out.append(rng.choice(_WORDS + ["", "x", "1", "日本", "😀", "."]))
    return "".join(out)


def _numbers(rng: random.Random, _: Sequence[str]) -> str:
    def number() -> str:
        kind = rng.randrange(7)
        if kind == 0:
            return str(rng.randint(0, 10 ** rng.randint(1, 50)))
        if kind == 1:
            return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 12)}f}"
        if kind == 2:
            return f"{rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300):e}"
        if kind == 3:
            return hex(rng.getrandbits(rng.randint(4, 128)))
        if kind == 4:
            return f"{rng.randint(0, 10**12):,}"
        if kind == 5:
            return "".join(rng.choice("0123456789٠١٢٣٤５６７①²") for _ in range(rng.randint(1, 20)))
        return f"v{rng.randint(0, 99)}.{rng.randint(0, 99)}.{rng.randint(0, 999)}-rc{rng.randint(0, 9)}"

    glue = ("", " ", ", ", "\n", "x", "日", "-", "/", ":")
    return "".join(number() + rng.choice(glue) for _ in range(rng.randint(1, 10)))


def _words(rng: random.Random, _: Sequence[str]) -> str:
    glue = (" ", " ", " ", "  ", "\n", ", ", ". ", "'", "’", "-", "")
    return "".join(rng.choice(_WORDS) + rng.choice(glue) for _ in range(rng.randint(1, 30)))


def _special(rng: random.Random, added: Sequence[str]) -> str:
    def piece() -> str:
        token = rng.choice(added)
        kind = rng.randrange(6)
        if kind == 0:
            return token
        if kind == 1:  # fragment: must not match the token
            cut = rng.randint(1, max(1, len(token) - 1))
            return token[:cut] if rng.random() < 0.5 else token[cut:]
        if kind == 2:
            return token.upper() if token != token.upper() else token.lower()
        if kind == 3:  # split by a character inside
            cut = rng.randint(1, max(1, len(token) - 1))
            return token[:cut] + rng.choice((" ", "\n", "x")) + token[cut:]
        if kind == 4:
            return rng.choice(_WHITESPACE) + token + rng.choice(_WHITESPACE)
        return token * rng.randint(2, 4)

    glue = ("", "", " ", "\n", "hi", "日本", "😀", "0")
    return "".join(piece() + rng.choice(glue) for _ in range(rng.randint(1, 12)))


def _code(source: str) -> Callable[[random.Random, Sequence[str]], str]:
    def draw(rng: random.Random, _: Sequence[str]) -> str:
        start = rng.randrange(len(source))
        return source[start : start + rng.randint(1, 2000)]

    return draw


def generate_corpus(
    added_tokens: Sequence[str], seed: int, per_kind: int = 400, long_texts: int = 12
) -> list[str]:
    """`per_kind` strings of every kind plus `long_texts` long mixtures (all seeded)."""
    rng = random.Random(seed)
    added = list(added_tokens) or ["<s>"]
    kinds = [
        _unicode,
        _any_code_point,
        _emoji,
        _whitespace,
        _numbers,
        _words,
        _special,
        _code(_source_text()),
    ]
    corpus = ["", " ", "\n", "\t"]
    for kind in kinds:
        corpus.extend(kind(rng, added) for _ in range(per_kind))
    for _ in range(long_texts):
        parts: list[str] = []
        target = rng.randint(5_000, 60_000)
        while sum(map(len, parts)) < target:
            parts.append(rng.choice(kinds)(rng, added))
        corpus.append("".join(parts))
    return corpus
