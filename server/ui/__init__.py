"""The browser pages of ``convmem serve --http`` (and ``convmem ui``): docs/ui.md.

Imported only when HTTP is served: ``convmem serve`` over stdio never loads
Jinja2 (a test checks)."""

from .app import BrowserUI

__all__ = ["BrowserUI"]
