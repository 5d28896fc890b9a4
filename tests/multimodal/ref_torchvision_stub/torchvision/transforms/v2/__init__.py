"""Import-only stub (see ../sitecustomize.py); never used at run time."""
