"""MkDocs glue for the documentation site (``mkdocs.yml`` names this file; it needs the ``docs`` extra).

* ``on_pre_build`` (an MkDocs hook): writes the per-seed pages without verdicts when ``docs/seeds/`` has
  none, so that a plain ``mkdocs build --strict`` works on a clean clone. ``tdlab docs build`` writes
  them from run directories first (:func:`tdlab.pages.docs_site.write_paper_pages`) and this hook then
  leaves them alone.
* :class:`JoinedParameters` (a griffe extension): tdlab's docstrings sometimes document several
  parameters on one ``Args:`` line (``p, q: the chain``); griffe's Google parser would read that as one
  unknown parameter and warn, which fails a strict build. The extension gives each name its own entry
  with the same description before griffe parses the docstring, so every name is still checked
  against the signature. It also shows the Sphinx roles the docstrings use (``:func:``, ``:class:``,
  ``:mod:``, ...; Markdown does not know them) as inline code, a leading ``~`` keeping the last name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Other Parameters|Keyword Args|Keyword Arguments):\s*$")
_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj|const):`(~?)([^`]+)`")
_JOINED = re.compile(r"^(\s*)([A-Za-z_]\w*(?:\s*,\s*\*{0,2}[A-Za-z_]\w*)+)(\s*\([^)]*\))?:(\s.*|)$")


def on_pre_build(config: Any, **kwargs: Any) -> None:
    """Write the seed pages (no verdicts) when the docs folder has none yet."""
    from tdlab.pages.docs_site import paper_pages_present, write_paper_pages

    docs = Path(config["docs_dir"])
    if not paper_pages_present(docs):
        write_paper_pages(docs, runs=None)


def split_joined_parameters(text: str) -> str:
    """``a, b: description`` lines of a docstring's parameter sections as one entry per name (each
    with the description and its continuation lines); everything else unchanged."""
    lines = text.splitlines()
    out: list[str] = []
    section: int | None = None  # indentation of the current parameter section's header
    item: int | None = None  # indentation of its entries
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        m = _SECTION.match(line)
        if m:
            section, item = indent, None
            out.append(line)
            i += 1
            continue
        if section is not None and line.strip():
            if indent <= section:
                section = item = None
            elif item is None:
                item = indent
        j = _JOINED.match(line) if section is not None and indent == item else None
        if j is None:
            out.append(line)
            i += 1
            continue
        names, kind, rest = j.group(2), j.group(3) or "", j.group(4)
        i += 1
        cont = []
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
            cont.append(lines[i])
            i += 1
        for name in (n.strip() for n in names.split(",")):
            out.append(f"{line[:indent]}{name}{kind}:{rest}")
            out.extend(cont)
    return "\n".join(out)


def plain_roles(text: str) -> str:
    """Sphinx roles (func, class, mod, data, meth, attr, exc, obj, const) as inline code; a leading
    ``~`` keeps the last dotted name only."""
    return _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class JoinedParameters(griffe.Extension):
    """Split ``a, b: ...`` parameter lines into one entry per name; Sphinx roles as code (see the
    module docstring)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(split_joined_parameters(obj.docstring.value))
