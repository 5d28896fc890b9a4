"""Test harness: real vLLM 0.32 CPU engines (collocated and P/D over NIXL) for end-to-end tests.

See tests/harness/README.md. Nothing here is imported by the product code.
"""
