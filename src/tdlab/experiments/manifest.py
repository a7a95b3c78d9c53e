"""The settings a seed states, as a manifest: per config field, the seed's value and where it says so.

An experiment's ``manifest`` maps dotted config fields to :class:`Setting` s (``"train.steps":
Setting(8000, "Table 2")``). A run is *at the seed's settings* only when its config equals the manifest
field by field (:func:`settings_diff` is empty); every other field of the config is one the seed is
silent on, ours (:func:`ours_fields`). The paper profile equals the manifest, or the experiment names each
field where it departs and why (``Experiment.paper_differs``), and a test holds the two equal.

Where the seed is ambiguous, silent on something a run needs, or contradicts itself, the experiment says how it
reads it: its ``readings`` (:class:`Reading`), each with the place, what the seed says, what tdlab does, and the
config field that makes the choice an option where one does. ``tdlab explain`` prints them above the claims, and
each run's report and the seed's page list them.

What an experiment says of every run in words that need no measurement (a caveat, which rows are ours and
why, what an option changes) it declares as ``notes`` (:class:`Note`): text with the run's config fields in
braces, shown after the verdict notes where its ``when`` holds.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

from tdlab.config import read_field

# One typed form for Python and YAML alike: pydantic dataclasses, built positionally in code
# (``Setting(8000, "Table 2")``) and validated from a seed's ``experiments.yaml`` (tdlab.experiments.declared).
DECLARED = ConfigDict(extra="forbid")
Text = Annotated[str, Field(min_length=1)]

__all__ = ["Note", "Reading", "Setting", "ours_fields", "plain_value", "settings_diff", "values_equal"]


@dataclass(frozen=True, config=DECLARED)
class Setting:
    """One setting the seed states: its ``value`` (in the config field's own units and form), ``where`` the
    seed states it (table, section, appendix), and a ``note`` where the seed gives a range or a choice."""

    value: Any
    where: Text
    note: str = ""


@dataclass(frozen=True, config=DECLARED)
class Reading:
    """How tdlab reads one ambiguous, silent or contradictory passage of the seed.

    Attributes:
        where: the passage (section, appendix, table, figure).
        paper: what the paper says there, or leaves unsaid.
        chosen: what tdlab does, and why.
        option: the dotted config field that switches the choice (``train.optimizer``), where one does; its
            existence in the experiment's config is checked when the class registers.
    """

    where: Text
    paper: Text
    chosen: Text
    option: Text | None = None


class _ConfigFields(string.Formatter):
    """``{train.lr:g}`` reads the dotted config field ``train.lr`` (no attribute or index syntax of its own)."""

    def get_field(self, field_name: str, args: Any, kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        return read_field(kwargs["cfg"], field_name), field_name


@dataclass(frozen=True, config=DECLARED)
class Note:
    """A note declared as text, printed after the verdict notes of every run where :attr:`when` holds.

    Attributes:
        text: the note; ``{train.lr:g}`` is the run's config field ``train.lr`` formatted ``g``
            (:meth:`str.format`'s spec), ``{{``/``}}`` a literal brace.
        when: dotted config field → value: the note is shown where every field has its value, or, for a list
            field (the arms), holds it; an empty mapping shows it always.
    """

    text: Text
    when: Mapping[str, Any] = field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _text_alone(cls, data: Any) -> Any:
        return {"text": data} if isinstance(data, str) else data  # a note shown always may be its text alone

    def __post_init__(self) -> None:
        self.fields()  # an unmatched brace: refused here, naming the note

    def fields(self) -> list[str]:
        """Every config field the note reads: its placeholders' and its condition's, in order."""
        named = [name for _, name, _, _ in string.Formatter().parse(self.text) if name is not None]
        return [*named, *self.when]

    def render(self, cfg: BaseModel) -> str | None:
        """The note for a run of config ``cfg``, or ``None`` where :attr:`when` does not hold."""
        for key, want in self.when.items():
            have = read_field(cfg, key)
            listed = isinstance(have, (list, tuple)) and any(values_equal(x, want) for x in have)
            if not (values_equal(have, want) or listed):
                return None
        return _ConfigFields().format(self.text, cfg=cfg)


def plain_value(value: Any) -> Any:
    """``value`` as JSON-ready data (a config section as its dump, lists element-wise)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value


def values_equal(a: Any, b: Any) -> bool:
    """Whether two config values are the same setting (numbers to 1e-12 relative, lists element-wise)."""
    a, b = plain_value(a), plain_value(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def settings_diff(manifest: Mapping[str, Setting], cfg: BaseModel) -> list[dict[str, Any]]:
    """The manifest's fields whose value in ``cfg`` is not the paper's: ``[{field, paper, run, where}]`` in the
    manifest's order (empty: the run is at the seed's settings)."""
    out = []
    for name, setting in manifest.items():
        run = read_field(cfg, name)
        if not values_equal(run, setting.value):
            out.append(
                {"field": name, "paper": plain_value(setting.value), "run": plain_value(run), "where": setting.where}
            )
    return out


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out.extend(_leaves(v, f"{prefix}{k}."))
        else:
            out.append(f"{prefix}{k}")
    return out


def ours_fields(manifest: Mapping[str, Setting], cfg: BaseModel) -> list[str]:
    """The config's fields the seed is silent on (no manifest entry covers them), the root seed aside."""
    covered = tuple(manifest)
    return [
        leaf
        for leaf in _leaves(cfg.model_dump(mode="json"))
        if leaf != "seed" and not any(leaf == c or leaf.startswith(c + ".") for c in covered)
    ]
