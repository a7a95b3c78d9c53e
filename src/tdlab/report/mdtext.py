"""Text read from a run (a summary, a record) made inert for the markdown tdlab writes: the findings tables,
the README's generated sections and the documentation site's seed pages.

A run folder is data, and a hostile or damaged one must not put markup into a page: no HTML element (``<``
is escaped, so ``<script>`` is text), no link or image (``[`` and ``]`` are escaped, so
``[x](javascript:…)`` is text), no emphasis or code span started by the text, and no table cell broken.
Inside a code span (:func:`md_code`) markdown shows everything literally and escapes HTML itself; only a
backtick could end it early, so backticks become quotes there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["md_cell", "md_code", "md_text"]

_ESCAPE = str.maketrans({"\\": "\\\\", "<": "&lt;", "*": "\\*", "[": "\\[", "]": "\\]", "`": "\\`"})


def md_text(text: Any) -> str:
    """``text`` as inert markdown text (one paragraph's worth: newlines kept)."""
    return str(text).translate(_ESCAPE)


def md_cell(text: Any) -> str:
    """``text`` for a markdown table cell: :func:`md_text`, no ``|`` and no newline."""
    return md_text(text).replace("|", "\\|").replace("\n", " ")


def md_code(text: Any) -> str:
    """``text`` for the inside of a code span (backticks around it are the caller's); a ``|`` is escaped so
    that a table cell holding the span stays one cell."""
    return str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ")
