"""Import-only stub: transformers imports this module at top level; nothing is used."""
