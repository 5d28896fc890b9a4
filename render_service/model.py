"""Loading a model folder (or the embedded default) into everything rendering needs.

A `ModelBundle` is built once per worker and is immutable afterwards. It holds:

- the tokenizer, loaded with `transformers.AutoTokenizer` exactly as vLLM loads it (so the Rust
  backend gets the same normalizer/pre-tokenizer/post-processor tweaks transformers applies),
  then wrapped in a `TokenEncoder` that talks to the Rust backend directly on the hot path;
- the chat template(s), special tokens and the vLLM-derived limits (`max_model_len`,
  `max_token_id`, `max_chars_per_token`);
- the generation-config sampling defaults (`ModelConfig.get_diff_sampling_param` in vLLM);
- a `fingerprint`: a short hash of everything that changes rendered tokens or parsing, which
  derender compares to catch a render/derender configuration mismatch.

MODEL can be a local folder, a hub id (its config, tokenizer and template files only, from the
local huggingface cache or downloaded from HF_ENDPOINT unless HF_HUB_OFFLINE=1), or None for
the embedded Qwen3 default (`render_service._embedded`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from render_service import _embedded
from render_service.config import ServiceConfig
from render_service.errors import ConfigError
from render_service.mm.family import ImageFamily
from render_service.mm.registry import load_image_family, resolve_float_dtype
from render_service.render.prompt_embeds import PLACEHOLDER_TOKEN
from render_service.render.tokenization import TokenEncoder

__all__ = ["SAMPLING_DEFAULT_KEYS", "ModelBundle"]

logger = logging.getLogger(__name__)

# Keys vLLM's get_diff_sampling_param takes from generation_config.json.
SAMPLING_DEFAULT_KEYS = (
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "max_new_tokens",
    "skip_special_tokens",
)
# config.json keys vLLM reads the context length from (the smallest one present wins).
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "tekken.json",
    "tokenizer.model.v3",
    "tokenizer.model.v7",
)


@dataclass(frozen=True)
class ModelBundle:
    """Everything about the served model that rendering needs; built once, then read-only."""

    model: str
    served_model_names: tuple[str, ...]
    model_type: str | None
    max_model_len: int
    encoder: TokenEncoder
    chat_template: str | dict[str, str] | None
    special_tokens_map: dict[str, Any]
    bos_token_id: int | None
    eos_token_id: int | None
    max_token_id: int
    max_chars_per_token: int
    truncation_side: str
    sampling_defaults: dict[str, Any]
    generation_config: dict[str, Any]
    fingerprint: str
    hf_tokenizer: Any = field(repr=False)
    # Multimodal models only: the image family (None: text-only) and the dtype tensors go in.
    image_family: ImageFamily | None = field(default=None, repr=False)
    float_dtype: str = "bfloat16"
    # --tokenizer-mode mistral: transformers' MistralCommonBackend (mistral-common), as vLLM.
    mistral: Any = field(default=None, repr=False)
    # The text model's embedding width (vLLM checks prompt_embeds against it; None: unknown).
    hidden_size: int | None = None
    # --enable-prompt-embeds: the id of the "<prompt_embeds>" token added to the tokenizer.
    prompt_embeds_token_id: int | None = None

    @property
    def served_model_name(self) -> str:
        return self.served_model_names[0]

    @property
    def is_harmony(self) -> bool:
        return self.model_type == "gpt_oss"

    @property
    def is_mistral(self) -> bool:
        return self.mistral is not None

    @classmethod
    def load(cls, config: ServiceConfig) -> ModelBundle:
        """Load `config.model` (folder, cached hub id, or the embedded default).

        Raises:
            ConfigError: the folder, tokenizer or chat template cannot be loaded.
        """
        if config.model is None:
            return _load_embedded(config)
        with_code = config.trust_remote_code
        model_dir = _resolve_model_dir(config.model, config.revision, with_code=with_code)
        tokenizer_dir = (
            _resolve_model_dir(config.tokenizer, config.revision, with_code=with_code)
            if config.tokenizer
            else model_dir
        )
        hf_config = _model_config(model_dir)
        bundle = _build(
            config,
            model=config.model,
            tokenizer_dir=tokenizer_dir,
            model_type=hf_config.get("model_type"),
            derived_max_len=_derive_max_model_len(hf_config),
            generation_config=_load_generation_config(config, model_dir),
        )
        return dataclasses.replace(
            bundle,
            image_family=_load_image_family(model_dir, hf_config),
            float_dtype=resolve_float_dtype(config.dtype, hf_config),
            hidden_size=_text_hidden_size(hf_config),
            max_token_id=max(bundle.max_token_id, _model_vocab_size(hf_config) - 1),
            mistral=_load_mistral(tokenizer_dir) if config.tokenizer_mode == "mistral" else None,
        )


def _load_embedded(config: ServiceConfig) -> ModelBundle:
    generation_config = (
        {} if config.generation_config == "vllm" else dict(_embedded.DEFAULT_GENERATION_CONFIG)
    )
    if config.generation_config not in ("auto", "vllm"):
        generation_config = _load_generation_config(config, Path(config.generation_config))
    names = config.served_model_name or (_embedded.DEFAULT_SERVED_MODEL_NAME,)
    bundle = _build(
        config.replace(served_model_name=names),
        model=_embedded.DEFAULT_SERVED_MODEL_NAME,
        tokenizer_dir=_embedded.default_tokenizer_dir(),
        model_type=_embedded.DEFAULT_MODEL_TYPE,
        derived_max_len=_embedded.DEFAULT_MAX_MODEL_LEN,
        generation_config=generation_config,
    )
    return dataclasses.replace(
        bundle,
        hidden_size=_embedded.DEFAULT_HIDDEN_SIZE,
        max_token_id=max(bundle.max_token_id, _embedded.DEFAULT_VOCAB_SIZE - 1),
    )


def _build(
    config: ServiceConfig,
    *,
    model: str,
    tokenizer_dir: Path,
    model_type: str | None,
    derived_max_len: int | None,
    generation_config: dict[str, Any],
) -> ModelBundle:
    if config.tokenizer_mode == "mistral" and not (tokenizer_dir / "tokenizer.json").is_file():
        hf_tokenizer = _mistral_hf_tokenizer(tokenizer_dir)
    else:
        hf_tokenizer = _load_hf_tokenizer(tokenizer_dir, config)
    vocab = hf_tokenizer.get_vocab()
    max_token_id = max(vocab.values())
    vocab_size = getattr(hf_tokenizer, "vocab_size", None)
    if isinstance(vocab_size, int):
        max_token_id = max(max_token_id, vocab_size - 1)
    # After the vocabulary bounds: vLLM caches those before its renderer adds the token.
    embeds_token_id = _add_prompt_embeds_token(hf_tokenizer) if _adds_embeds_token(config) else None
    chat_template = _resolve_chat_template(config.chat_template, hf_tokenizer)
    max_model_len = _effective_max_model_len(config.max_model_len, derived_max_len, hf_tokenizer)
    encoder = TokenEncoder.from_hf_tokenizer(hf_tokenizer)
    served = config.served_model_name or (model,)
    fingerprint = _fingerprint(config, model, tokenizer_dir, chat_template, max_model_len)
    return ModelBundle(
        model=model,
        served_model_names=tuple(served),
        model_type=model_type,
        max_model_len=max_model_len,
        encoder=encoder,
        chat_template=chat_template,
        special_tokens_map=dict(hf_tokenizer.special_tokens_map),
        bos_token_id=hf_tokenizer.bos_token_id,
        eos_token_id=hf_tokenizer.eos_token_id,
        max_token_id=max_token_id,
        max_chars_per_token=max(len(token) for token in vocab),
        truncation_side=hf_tokenizer.truncation_side,
        sampling_defaults=_diff_sampling_params(generation_config),
        generation_config=generation_config,
        fingerprint=fingerprint,
        hf_tokenizer=hf_tokenizer,
        prompt_embeds_token_id=embeds_token_id,
    )


def _adds_embeds_token(config: ServiceConfig) -> bool:
    """vLLM's HfRenderer registers the placeholder; its mistral-common renderer does not."""
    return config.enable_prompt_embeds and config.tokenizer_mode != "mistral"


def _add_prompt_embeds_token(hf_tokenizer: Any) -> int:
    """vLLM's _ensure_prompt_embeds_placeholder_token: "<prompt_embeds>" as a special token."""
    hf_tokenizer.add_special_tokens({"additional_special_tokens": [PLACEHOLDER_TOKEN]})
    ids = hf_tokenizer.encode(PLACEHOLDER_TOKEN, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"--enable-prompt-embeds: {PLACEHOLDER_TOKEN!r} does not tokenize to one token ({ids})")
    token_id: int = ids[0]
    return token_id


def _text_hidden_size(hf_config: dict[str, Any]) -> int | None:
    """vLLM: hf_text_config.word_embed_proj_dim (OPT), else its hidden_size."""
    text_config = hf_config.get("text_config")
    source = text_config if isinstance(text_config, dict) else hf_config  # vLLM's hf_text_config
    for key in ("word_embed_proj_dim", "hidden_size"):
        value = source.get(key)
        if type(value) is int:
            return value
    return None


def _load_mistral(tokenizer_dir: Path) -> Any:
    """vLLM's MistralTokenizer.from_pretrained: mistral-common in ValidationMode.test."""
    from mistral_common.protocol.instruct.validator import ValidationMode
    from transformers.tokenization_mistral_common import MistralCommonBackend

    try:
        # truncation_side: vLLM's get_tokenizer default for generate models.
        return MistralCommonBackend.from_pretrained(
            str(tokenizer_dir), mode=ValidationMode.test, local_files_only=True, truncation_side="left"
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot load the mistral tokenizer from {tokenizer_dir}: {exc}") from exc


def _mistral_hf_tokenizer(tokenizer_dir: Path) -> Any:
    """A fast tokenizer made from the folder's mistral-common file, for what render and
    derender read from a HF tokenizer (vocabulary, special ids); vLLM needs no tokenizer.json
    in mistral mode, and mistral-common still does all encoding. A `tekken.json` wins over a
    SentencePiece `tokenizer.model.v*`, as mistral-common's own loader picks it."""
    tekken = tokenizer_dir / "tekken.json"
    return _tekken_hf_tokenizer(tekken) if tekken.is_file() else _spm_hf_tokenizer(tokenizer_dir)


def _tekken_hf_tokenizer(tekken: Path) -> Any:
    """transformers' tekken converter, with every mistral-common special token (the control
    tokens and the `<SPECIAL_n>` fillers) as a special token, as the SentencePiece path has."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    from tokenizers import AddedToken
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    try:
        raw = Tekkenizer.from_file(tekken)
        tokenizer = convert_tekken_tokenizer(str(tekken), chat_template="")
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise ConfigError(f"cannot read the Tekken tokenizer {tekken}: {exc}") from exc
    tokenizer.chat_template = None  # mistral mode renders without a template
    tokenizer.truncation_side = "left"  # vLLM's get_tokenizer default for generate models
    specials = [AddedToken(raw.id_to_piece(i), special=True, normalized=False) for i in range(raw.num_special_tokens)]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def _spm_hf_tokenizer(tokenizer_dir: Path) -> Any:
    """A fast tokenizer made from a folder's SentencePiece `tokenizer.model.v*`."""
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from tokenizers import AddedToken
    from tokenizers.models import BPE
    from transformers import LlamaTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    models = sorted(tokenizer_dir.glob("tokenizer.model.v*")) or sorted(tokenizer_dir.glob("tokenizer.model"))
    if not models:
        raise ConfigError(
            f"--tokenizer-mode mistral: {tokenizer_dir} has neither tokenizer.json, tekken.json "
            "nor a SentencePiece tokenizer.model.v* to decode with"
        )
    try:
        spm = SentencePieceTokenizer(str(models[-1]))
        # transformers 5 returns a dict here although its annotation says a tuple.
        parts: Any = SentencePieceExtractor(str(models[-1])).extract(BPE)
        tokenizer = LlamaTokenizer(vocab=parts["vocab"], merges=parts["merges"], legacy=False,
                                   add_prefix_space=True, add_bos_token=True, truncation_side="left")  # fmt: skip
        specials = [AddedToken(spm.id_to_piece(i), special=True, normalized=False)
                    for i in range(spm.n_words) if spm.is_special(i)]  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise ConfigError(f"cannot read the SentencePiece model {models[-1]}: {exc}") from exc
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def _model_vocab_size(hf_config: dict[str, Any]) -> int:
    """vLLM's model_config.get_vocab_size(): token ids below it are in vocabulary even when
    the tokenizer is smaller (Qwen3's embedding rows past its tokenizer)."""
    text_config = hf_config.get("text_config")
    source = text_config if isinstance(text_config, dict) else hf_config
    value = source.get("vocab_size")
    return value if type(value) is int else 0


def _load_image_family(model_dir: Path, hf_config: dict[str, Any]) -> ImageFamily | None:
    try:
        return load_image_family(model_dir, hf_config)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot load the image processor of {model_dir}: {exc}") from exc


def _resolve_model_dir(name: str, revision: str | None, *, with_code: bool = False) -> Path:
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name.startswith((".", "/", "~")):
        raise ConfigError(f"model path {name!r} is not a folder")
    return _hub_snapshot(name, revision, with_code=with_code)


# What rendering reads from a hub repo: configs, tokenizer files and templates, never weights.
_HUB_FILE_PATTERNS = ("*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken")


def _hub_snapshot(repo_id: str, revision: str | None, *, with_code: bool) -> Path:
    """The hub repo's rendering files: from the local cache, else downloaded (HF_ENDPOINT),
    unless HF_HUB_OFFLINE is set. `with_code`: also its Python files (--trust-remote-code)."""
    from huggingface_hub import constants, snapshot_download

    patterns = [*_HUB_FILE_PATTERNS, *(["*.py"] if with_code else [])]
    offline = constants.HF_HUB_OFFLINE
    try:
        folder = snapshot_download(
            repo_id, revision=revision, allow_patterns=patterns, local_files_only=offline
        )
    # The hub client's errors differ between huggingface_hub releases (and their HTTP
    # libraries); whatever the cause, start-up fails with one message naming the model.
    except Exception as exc:
        if offline:
            where = (
                "downloading is off (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1; unset it, or fetch "
                f"the repo first with `hf download {repo_id}`)"
            )
        else:
            reason = " ".join(str(exc).split())  # the hub client's message, on one line
            where = f"it could not be downloaded from {constants.ENDPOINT}: {type(exc).__name__}: {reason}"
        raise ConfigError(
            f"model {repo_id!r} is neither a local folder nor in the local huggingface cache, and {where}"
        ) from exc
    return Path(folder)


def _load_hf_tokenizer(tokenizer_dir: Path, config: ServiceConfig) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(tokenizer_dir),
            trust_remote_code=config.trust_remote_code,
            local_files_only=True,
            # vLLM loads generate-model tokenizers with left truncation.
            truncation_side="left",
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot load the tokenizer from {tokenizer_dir}: {exc}") from exc
    if getattr(tokenizer, "_tokenizer", None) is None:
        raise ConfigError(
            f"tokenizer in {tokenizer_dir} has no fast (Rust) backend; "
            "render-service needs tokenizer.json or a convertible vocab"
        )
    return tokenizer


def _resolve_chat_template(flag: str | None, hf_tokenizer: Any) -> str | dict[str, str] | None:
    """`--chat-template` (file path or inline Jinja) overrides the tokenizer's template(s)."""
    if flag is None:
        template = hf_tokenizer.chat_template
        return dict(template) if isinstance(template, dict) else template
    path = Path(flag).expanduser()
    if any(c in flag for c in "{}\n"):
        return flag
    try:
        return path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"--chat-template {flag!r} looks like a file path, but it cannot be read: {exc}"
        ) from exc


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return value


def _model_config(model_dir: Path) -> dict[str, Any]:
    """config.json, else a Mistral-format params.json (vLLM's config_format "auto" reads it for
    a Mistral folder, whatever --tokenizer-mode), so the context length is derived either way.
    With neither, vLLM refuses the folder; we serve from the tokenizer alone, and say so."""
    hf_config = _read_json(model_dir / "config.json")
    if hf_config:
        return hf_config
    hf_config = _mistral_params_config(_read_json(model_dir / "params.json"))
    if not hf_config:
        logger.warning(
            "%s has neither config.json (HF format) nor params.json (Mistral format), which vLLM "
            "requires: the model type is unknown (no model-specific parser defaults, no images) and "
            "the context length comes from the tokenizer or --max-model-len", model_dir,
        )
    return hf_config


def _mistral_params_config(params: dict[str, Any]) -> dict[str, Any]:
    """The context-length keys vLLM's adapt_config_dict gives a Mistral-format params.json
    (max_seq_len falls back to max_position_embeddings, that to 128000)."""
    if not params:
        return {}
    positions = params.get("max_position_embeddings", 128_000)
    return {"max_seq_len": params.get("max_seq_len", positions), "max_position_embeddings": positions}


def _derive_max_model_len(hf_config: dict[str, Any]) -> int | None:
    """Smallest context-length key of config.json, scaled by a rope-scaling factor like vLLM."""
    text_config = hf_config.get("text_config")
    source = text_config if isinstance(text_config, dict) else hf_config
    lengths: list[int] = [source[k] for k in _MAX_LEN_KEYS if isinstance(source.get(k), int)]
    if not lengths:
        return None
    derived = min(lengths)
    rope = source.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if rope_type not in (None, "su", "longrope", "llama3", "mrope", "default"):
        factor = rope.get("factor", 1.0)
        if rope_type == "yarn":
            derived = rope.get("original_max_position_embeddings", derived)
        derived = int(derived * factor)
    return derived


def _effective_max_model_len(flag: int | None, derived: int | None, hf_tokenizer: Any) -> int:
    if derived is None:
        model_max = getattr(hf_tokenizer, "model_max_length", None)
        derived = model_max if isinstance(model_max, int) and model_max < 10**9 else None
    if flag is None:
        if derived is None:
            raise ConfigError("cannot derive the context length: pass --max-model-len")
        return derived
    if derived is not None and flag > derived:
        raise ConfigError(
            f"--max-model-len {flag} is greater than the derived max_model_len {derived} "
            "of the model's config.json"
        )
    return flag


def _load_generation_config(config: ServiceConfig, model_dir: Path) -> dict[str, Any]:
    """The non-default generation_config.json values (transformers' `to_diff_dict`, as vLLM)."""
    if config.generation_config == "vllm":
        return {}
    folder = model_dir if config.generation_config == "auto" else Path(config.generation_config)
    if config.generation_config != "auto" and not folder.is_dir():
        raise ConfigError(f"--generation-config {folder}: not a folder")
    if not (folder / "generation_config.json").is_file():
        return {}
    from transformers import GenerationConfig

    try:
        diff = GenerationConfig.from_pretrained(str(folder), local_files_only=True).to_diff_dict()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {folder / 'generation_config.json'}: {exc}") from exc
    diff.pop("transformers_version", None)
    return diff


def _diff_sampling_params(generation_config: dict[str, Any]) -> dict[str, Any]:
    """vLLM ModelConfig.get_diff_sampling_param: sampling defaults, max_new_tokens->max_tokens."""
    if not any(key in generation_config for key in SAMPLING_DEFAULT_KEYS):
        return {}
    defaults = {
        key: generation_config[key]
        for key in SAMPLING_DEFAULT_KEYS
        if generation_config.get(key) is not None
    }
    if "max_new_tokens" in defaults:
        defaults["max_tokens"] = defaults.pop("max_new_tokens")
    return defaults


def _fingerprint(
    config: ServiceConfig,
    model: str,
    tokenizer_dir: Path,
    chat_template: str | dict[str, str] | None,
    max_model_len: int,
) -> str:
    """Short stable hash of what changes rendered tokens or how output is parsed."""
    digest = hashlib.blake2b(digest_size=8)
    identity = {
        "model": model,
        "max_model_len": max_model_len,
        "chat_template": chat_template,
        "content_format": config.chat_template_content_format,
        "reasoning_parser": config.reasoning_parser,
        "tool_call_parser": config.tool_call_parser,
        "tokenizer_mode": config.tokenizer_mode,
        "enable_auto_tool_choice": config.enable_auto_tool_choice,
        "default_chat_template_kwargs": config.default_chat_template_kwargs,
        "reasoning_effort_map": config.reasoning_effort_map,
    }
    if config.enable_prompt_embeds:  # only then: other configs keep their fingerprints
        identity["enable_prompt_embeds"] = True
    digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
    for name in _TOKENIZER_FILES:
        path = tokenizer_dir / name
        if path.is_file():
            digest.update(name.encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
