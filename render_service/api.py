"""The in-process render API under its documented path (README): `Renderer` lives in
`render_service.render.api`; this module only re-exports it."""

from render_service.render.api import Renderer

__all__ = ["Renderer"]
