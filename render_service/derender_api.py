"""The in-process derender API under its documented path (README): `Derenderer` lives in
`render_service.derender.api`; this module only re-exports it."""

from render_service.derender.api import Derenderer

__all__ = ["Derenderer"]
