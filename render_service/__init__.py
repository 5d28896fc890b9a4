"""render-service: the CPU render/derender tier in front of vLLM tokens-only engines."""

__version__ = "0.1.0"
