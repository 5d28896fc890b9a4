"""Multimodal render tests (issue 7)."""
