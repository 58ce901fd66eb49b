"""Griffe extension: a docstring's `Example:` section (Google style, singular, as the project writes it) is read
as `Examples:`, so that its `>>>` lines render as code rather than as Markdown quotes."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^Example:$", re.MULTILINE)


class SingularExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub("Examples:", obj.docstring.value)
