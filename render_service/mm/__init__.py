"""Multimodal render: image loading, hashing, model image processors and vLLM's tensor wire format."""
