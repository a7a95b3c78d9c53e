"""Every experiment by name, without importing it: the module whose import registers it (with
:func:`tdlab.experiments.base.register`) and what ``tdlab list`` shows (seed paper, figure, profiles)
and the atlas prints (description).

Derived from the declarations beside the modules (:mod:`tdlab.experiments.declared`): an experiment
module imports its tasks, models, theory and their libraries (scipy, gensim, the anchors' and topics'
set-ups); ``tdlab run NAME`` imports NAME's module only (:func:`tdlab.experiments.base.get`) and
``tdlab list`` none, reading the YAML alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tdlab.experiments.declared import declarations

__all__ = ["CATALOG", "Entry"]


@dataclass(frozen=True)
class Entry:
    """One registered experiment: ``module`` is the dotted path whose import registers it; the rest are
    its class attributes ``paper``, ``figure``, ``description`` and the names of its ``profiles``."""

    module: str
    paper: str
    figure: str
    description: str
    profiles: tuple[str, ...] = ("quick", "standard", "paper")


CATALOG: dict[str, Entry] = {
    name: Entry(d.module, d.paper, d.figure, d.description, d.profile_names()) for name, d in declarations().items()
}
