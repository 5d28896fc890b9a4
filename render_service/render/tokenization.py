"""Exact, fast tokenization of rendered prompts.

Theory of operation
-------------------
HF `tokenizers` encodes a string in this order: (1) split the raw text on the *non-normalized*
added tokens (leftmost-longest match), (2) for every remaining piece independently: normalize,
split on normalized added tokens, pre-tokenize, run the model, (3) post-process (only when
`add_special_tokens=True`). Step 2 never looks across a piece boundary, so

    encode(text) == concat(id(tok) if piece is an added token else encode(piece))

whenever the pieces are exactly step 1's pieces and nothing in step 2 depends on where a piece
sits in the whole text. Two things break that, and disable the segment cache when present:

- added tokens with `lstrip`/`rstrip`/`single_word` (they eat or test neighbouring text);
- position-dependent pre-tokenizers (Metaspace with `prepend_scheme="first"` only prepends to
  the piece at offset 0) and models with BPE dropout (not deterministic).

Chat prompts are mostly such pieces (`<|im_start|>` + "user\\n...message..." + `<|im_end|>`),
and a multi-turn conversation repeats every earlier piece on the next turn, so `SegmentCache`
(an LRU bounded by cached token count) turns turn N+1's tokenization into dictionary lookups
plus the new message. Misses are encoded in one batch call.

Backends: HF `tokenizers` (the reference) or `fastokens` (PyPI; much faster). fastokens is used
only if it produces identical ids on a probe corpus at load time (and the test-suite proves it
on the golden corpora); otherwise the HF backend is used.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["TokenEncoder", "SegmentCache", "segment_cache_supported", "PROBE_STRINGS"]

logger = logging.getLogger(__name__)

# ~40 MB of Python int lists; enough for the recent turns of a few hundred conversations.
DEFAULT_CACHE_TOKENS = 1_000_000
_POSITION_FREE_PRE_TOKENIZERS = frozenset(
    {
        "ByteLevel",
        "Split",
        "Whitespace",
        "WhitespaceSplit",
        "Punctuation",
        "Digits",
        "BertPreTokenizer",
        "CharDelimiterSplit",
        "UnicodeScripts",
        "FixedLength",
    }
)

# Strings chosen to exercise every step of a tokenizer pipeline; fastokens must match on all.
PROBE_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "  leading spaces\tand\ttabs\n\n\nnewlines   \n trailing  ",
    "numbers 1234567890 3.14159 -42 1e10 0x1F",
    "code: def f(x):\n    return {'a': [1, 2, 3]}  # comment\n",
    "unicode: naïve café 日本語のテキスト 中文 한국어 Ελληνικά русский عربى",
    "emoji 😀👍🏽👨‍👩‍👧 and combining e\u0301 a\u0308 \u212b",
    "contractions: I'm, you're, it's, we'll, they'd, can't, DON'T",
    "punctuation!!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((())) [[[]]] {{{}}}",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<s>[INST] hello [/INST]</s><|begin_of_text|><|eot_id|><｜User｜><｜Assistant｜>",
    "\r\n\r\nwindows\r\nline\rendings\u2028\u2029\x00\x7f",
    "a" * 300 + " " + "ab" * 200,
)


class _Backend(Protocol):
    def encode_batch(
        self, inputs: list[str], add_special_tokens: bool = ...
    ) -> list[Any]: ...


def segment_cache_supported(tokenizer_json: dict[str, Any]) -> tuple[bool, str]:
    """Whether per-segment encoding provably equals whole-text encoding for this tokenizer."""
    for token in tokenizer_json.get("added_tokens") or []:
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            return False, f"added token {token.get('content')!r} has lstrip/rstrip/single_word"
    model = tokenizer_json.get("model") or {}
    if model.get("dropout"):
        return False, "BPE dropout"
    return _pre_tokenizer_is_position_free(tokenizer_json.get("pre_tokenizer"))


def _pre_tokenizer_is_position_free(node: dict[str, Any] | None) -> tuple[bool, str]:
    if node is None:
        return True, ""
    kind = node.get("type")
    if kind == "Sequence":
        for child in node.get("pretokenizers") or []:
            ok, why = _pre_tokenizer_is_position_free(child)
            if not ok:
                return ok, why
        return True, ""
    if kind == "Metaspace":
        if node.get("prepend_scheme", "always") == "first":
            return False, "Metaspace prepend_scheme=first depends on the piece's offset"
        return True, ""
    if kind in _POSITION_FREE_PRE_TOKENIZERS:
        return True, ""
    return False, f"pre-tokenizer {kind} is not known to be position-free"


class SegmentCache:
    """LRU of segment text -> token ids, bounded by the total number of cached ids.

    Thread-safe (renders run on a worker thread pool); cached lists are never mutated.
    """

    def __init__(self, max_tokens: int = DEFAULT_CACHE_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, list[int]] = OrderedDict()
        self._tokens = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def cached_tokens(self) -> int:
        return self._tokens

    def get(self, segment: str) -> list[int] | None:
        with self._lock:
            ids = self._entries.get(segment)
            if ids is None:
                self.misses += 1
                return None
            self._entries.move_to_end(segment)
            self.hits += 1
            return ids

    def put(self, segment: str, ids: list[int]) -> None:
        with self._lock:
            if len(ids) > self.max_tokens or segment in self._entries:
                return
            self._entries[segment] = ids
            self._tokens += len(ids)
            while self._tokens > self.max_tokens:
                _, evicted = self._entries.popitem(last=False)
                self._tokens -= len(evicted)


class TokenEncoder:
    """Encodes text to ids exactly like the HF fast tokenizer it was built from."""

    def __init__(
        self,
        hf_backend: Any,
        *,
        fast_backend: Any | None = None,
        cache: SegmentCache | None = None,
        split_pattern: re.Pattern[str] | None = None,
        added_ids: dict[str, int] | None = None,
    ) -> None:
        self.hf_backend = hf_backend
        self.fast_backend = fast_backend
        self.cache = cache
        self._split = split_pattern
        self._added_ids = added_ids or {}
        self._encoder = fast_backend if fast_backend is not None else hf_backend

    @property
    def backend_name(self) -> str:
        return "fastokens" if self.fast_backend is not None else "tokenizers"

    @classmethod
    def from_hf_tokenizer(
        cls,
        hf_tokenizer: Any,
        *,
        use_fastokens: bool = True,
        cache_tokens: int = DEFAULT_CACHE_TOKENS,
    ) -> TokenEncoder:
        """Wrap the Rust backend of a transformers fast tokenizer (`tokenizer._tokenizer`)."""
        return cls.from_backend(
            hf_tokenizer._tokenizer, use_fastokens=use_fastokens, cache_tokens=cache_tokens
        )

    @classmethod
    def from_backend(
        cls, backend: Any, *, use_fastokens: bool = True, cache_tokens: int = DEFAULT_CACHE_TOKENS
    ) -> TokenEncoder:
        tokenizer_json = json.loads(backend.to_str())
        fast = _load_verified_fastokens(backend, tokenizer_json) if use_fastokens else None
        supported, why = segment_cache_supported(tokenizer_json)
        if not supported or cache_tokens <= 0:
            if cache_tokens > 0:
                logger.info("segment cache disabled: %s", why)
            return cls(backend, fast_backend=fast)
        added = {
            token["content"]: token["id"]
            for token in tokenizer_json.get("added_tokens") or []
            if not token.get("normalized") and token.get("content")
        }
        return cls(
            backend,
            fast_backend=fast,
            cache=SegmentCache(cache_tokens),
            split_pattern=_added_token_pattern(added),
            added_ids=added,
        )

    # -- hot path --------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without post-processor special tokens (chat prompts)."""
        if self.cache is None or self._split is None:
            return self._encode_one(text, add_special_tokens=False)
        # re.split with one group gives [text, token, text, token, ..., text].
        pieces = self._split.split(text)
        found: dict[str, list[int]] = {}
        missing: list[str] = []
        for piece in pieces[0::2]:
            if piece and piece not in found:
                ids = self.cache.get(piece)
                if ids is None:
                    missing.append(piece)
                else:
                    found[piece] = ids
        if missing:
            missing = list(dict.fromkeys(missing))
            for piece, ids in zip(missing, self._encode_batch(missing), strict=True):
                found[piece] = ids
                self.cache.put(piece, ids)
        out: list[int] = []
        added = self._added_ids
        for index, piece in enumerate(pieces):
            if index % 2:
                out.append(added[piece])
            elif piece:
                out.extend(found[piece])
        return out

    def encode_full(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """Ids of `text`, with the post-processor's special tokens if asked (completions)."""
        if not add_special_tokens:
            return self.encode(text)
        return self._encode_one(text, add_special_tokens=True)

    def encode_with_offsets(
        self, text: str, *, add_special_tokens: bool
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and character offsets from the reference backend (no cache)."""
        encoding = self.hf_backend.encode(text, add_special_tokens=add_special_tokens)
        return list(encoding.ids), [tuple(pair) for pair in encoding.offsets]

    def token_to_id(self, token: str) -> int | None:
        token_id: int | None = self.hf_backend.token_to_id(token)
        return token_id

    def id_to_token(self, token_id: int) -> str | None:
        token: str | None = self.hf_backend.id_to_token(token_id)
        return token

    # -- internals -------------------------------------------------------------------------

    def _encode_one(self, text: str, add_special_tokens: bool) -> list[int]:
        return list(self._encoder.encode(text, add_special_tokens=add_special_tokens).ids)

    def _encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if len(texts) == 1:
            return [self._encode_one(texts[0], False)]
        encodings = self._encoder.encode_batch(list(texts), add_special_tokens=False)
        return [list(encoding.ids) for encoding in encodings]


def _added_token_pattern(added: dict[str, int]) -> re.Pattern[str] | None:
    """Leftmost-longest alternation over the added tokens (HF uses an Aho-Corasick trie)."""
    if not added:
        return None
    longest_first = sorted(added, key=len, reverse=True)
    return re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")


def _load_verified_fastokens(backend: Any, tokenizer_json: dict[str, Any]) -> Any | None:
    """fastokens for this tokenizer, or None if it is missing or differs on the probe corpus."""
    try:
        import fastokens
    except ImportError:
        return None
    try:
        fast = fastokens.Tokenizer.from_json_str(backend.to_str())
    except (ValueError, RuntimeError, TypeError) as exc:
        logger.info("fastokens cannot load this tokenizer (%s); using tokenizers", exc)
        return None
    probes = list(PROBE_STRINGS) + [t["content"] for t in tokenizer_json.get("added_tokens") or []]
    for add_special in (False, True):
        for text in probes:
            want = backend.encode(text, add_special_tokens=add_special).ids
            got = fast.encode(text, add_special_tokens=add_special).ids
            if list(want) != list(got):
                logger.warning("fastokens differs from tokenizers on %r; not using it", text[:40])
                return None
    return fast
