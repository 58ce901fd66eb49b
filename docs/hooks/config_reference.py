"""MkDocs hook: the configuration reference, generated from `ParallelRunConfig.model_fields` at build time.

Each field is described once, in config/fields.py (`Field(description=...)`); this table replaces the
`<!-- config-fields -->` marker of configuration.md, so the site can never drift from the model.
"""

from __future__ import annotations

import html
import types
import typing
from typing import Any

from mkdocs.exceptions import PluginError

from parallel_steps.config import ParallelRunConfig
from parallel_steps.config.trust import OVERRIDABLE

MARKER = "<!-- config-fields -->"
PAGE = "configuration.md"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE}: the {MARKER} marker, where the generated field table goes, is missing")
    return markdown.replace(MARKER, fields_table())


def fields_table() -> str:
    """One Markdown table row per config field: name, type, default, whether trigger-time input may set
    it (parallel_steps.config.OVERRIDABLE), description."""
    rows = ["| Field | Type | Default | Trigger | Description |", "| --- | --- | --- | --- | --- |"]
    for name, info in ParallelRunConfig.model_fields.items():
        default = info.get_default(call_default_factory=True)
        trigger = "yes" if name in OVERRIDABLE else ""
        description = html.escape(info.description or "", quote=False)
        rows.append(f"| `{name}` | `{type_name(info.annotation)}` | `{default!r}` | {trigger} | {description} |")
    return "\n".join(rows)


def type_name(annotation: Any) -> str:
    """A type as a reader writes it: `int | str | None`, `list[str]`, `'local' | 'ray'`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    return "None" if annotation is type(None) else annotation.__name__
