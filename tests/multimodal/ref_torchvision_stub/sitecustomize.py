"""Lets vLLM 0.33 load Qwen2-VL in the ref venv, which has no usable torchvision.

Put this folder on PYTHONPATH of the ref subprocess ONLY (never the project venv).

Why: vLLM's qwen2_vl.py imports `smart_resize` from transformers'
`image_processing_qwen2_vl`, which imports `torchvision.transforms.v2.functional` at module
level; the only torchvision wheels reachable here are CUDA builds that cannot load with the CPU
torch. The sibling `torchvision/` package satisfies that import. transformers must still
believe torchvision is absent, or it would pick the torchvision image-processor backend and
import `torchvision.io`; so its availability checks are forced to False here, before any other
transformers module binds them. With that, transformers uses `Qwen2VLImageProcessorPil`, the
same backend the render service runs (docs/multimodal-design.md section 0).
"""

import transformers.utils as _utils
import transformers.utils.import_utils as _import_utils


def _unavailable() -> bool:
    return False


for _name in ("is_torchvision_available", "is_torchvision_v2_available"):
    setattr(_import_utils, _name, _unavailable)
    if hasattr(_utils, _name):
        setattr(_utils, _name, _unavailable)
