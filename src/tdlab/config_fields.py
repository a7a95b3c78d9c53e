"""Every field of a config class, described for people and for tests: its dotted key, the kinds of
value it takes, its bounds and allowed literals, and what its source says about it.

``tdlab run NAME --help`` lists an experiment's keys with this (defaults come from the config the
profile builds), and the bad-input fuzz suite draws values each field must refuse from the same
description, so both read the config classes themselves and never go out of date.

What a field "says about itself" is its ``Field(description=...)`` if it has one, else the comment
on its line(s) in the class body, else the comment block just above it (the convention of tdlab's
config classes: ``steps: int = Field(8000, ge=1)  # Table 2: 8000 iterations``).
"""

from __future__ import annotations

import ast
import inspect
import io
import math
import textwrap
import tokenize
import types
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel

__all__ = ["ConfigField", "config_fields", "field_comments"]


@dataclass
class ConfigField:
    """One leaf field of a config: its dotted key, the kinds of value it takes (``int``, ``float``,
    ``bool``, ``str``, ``none``, ``list``, ``literal``, ``other``), its bounds and literals, and its doc."""

    key: str
    kinds: set[str] = field(default_factory=set)
    literals: set[Any] = field(default_factory=set)
    lo: float = -math.inf  # smallest allowed value (inclusive unless lo_open)
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    type_names: list[str] = field(default_factory=list)  # the annotation's parts, as written for people
    item_kinds: set[str] = field(default_factory=set)  # a list's (or tuple's) items: the kinds they take
    doc: str = ""

    @property
    def type_text(self) -> str:
        """``int ≥ 1``, ``float in (0, 1)``, ``'auto' | int ≥ 1``, ``str | None`` ..."""
        parts = []
        for name in self.type_names:
            if name in ("int", "float") and (math.isfinite(self.lo) or math.isfinite(self.hi)):
                name += " " + self._bounds()
            parts.append(name)
        return " | ".join(dict.fromkeys(parts))

    def _bounds(self) -> str:
        lo, hi = _num(self.lo), _num(self.hi)
        if math.isfinite(self.lo) and math.isfinite(self.hi):
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if math.isfinite(self.lo):
            return f"{'>' if self.lo_open else '≥'} {lo}"
        return f"{'<' if self.hi_open else '≤'} {hi}"


def _num(x: float) -> str:
    """A bound as written in the source: integers in full (4096, 2**62 as digits), other numbers %g."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e19 else f"{x:g}"


def _describe(leaf: ConfigField, ann: Any, meta: list[Any]) -> None:
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        _describe(leaf, args[0], [*meta, *args[1:]])
        return
    if origin in (Union, types.UnionType):
        for a in args:
            _describe(leaf, a, meta)
        return
    if origin is Literal:
        leaf.kinds.add("literal")
        leaf.literals.update(args)
        leaf.type_names.append(" | ".join(repr(a) for a in args))
        return
    if origin in (list, tuple):
        leaf.kinds.add("list")
        inner = [a for a in args if a is not Ellipsis]
        sub = ConfigField("")
        for a in inner:
            _describe(sub, a, [])
        leaf.literals.update(sub.literals)
        leaf.item_kinds.update(sub.kinds)
        leaf.type_names.append(f"list of {' | '.join(dict.fromkeys(sub.type_names)) or 'values'}")
        return
    if ann is type(None):
        leaf.kinds.add("none")
        leaf.type_names.append("None")
        return
    kind = {int: "int", float: "float", bool: "bool", str: "str"}.get(ann, "other")
    leaf.kinds.add(kind)
    leaf.type_names.append(kind if kind != "other" else getattr(ann, "__name__", str(ann)))
    for m in meta:
        for cons in getattr(m, "metadata", [m]):
            if isinstance(cons, at.Ge):
                leaf.lo = _bound(cons.ge)
            elif isinstance(cons, at.Gt):
                leaf.lo, leaf.lo_open = _bound(cons.gt), True
            elif isinstance(cons, at.Le):
                leaf.hi = _bound(cons.le)
            elif isinstance(cons, at.Lt):
                leaf.hi, leaf.hi_open = _bound(cons.lt), True


def _bound(value: object) -> float:
    """A ``ge``/``gt``/``le``/``lt`` bound (annotated-types types it only as comparable): tdlab bounds numbers."""
    assert isinstance(value, int | float), f"non-numeric field bound {value!r}"
    return value


def config_fields(model: type[BaseModel], prefix: str = "") -> list[ConfigField]:
    """Every leaf field of ``model`` in declaration order, nested config classes walked (``task.p``)."""
    out = []
    for name, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out.extend(config_fields(info.annotation, f"{prefix}{name}."))
            continue
        leaf = ConfigField(f"{prefix}{name}", doc=info.description or field_comments(model).get(name, ""))
        _describe(leaf, info.annotation, list(info.metadata))
        out.append(leaf)
    return out


def field_comments(model: type) -> dict[str, str]:
    """``{field name: comment}`` from the source of ``model`` and its bases (the nearest class that
    declares a field wins); ``{}`` where no source can be read."""
    found: dict[str, str] = {}
    for klass in reversed(inspect.getmro(model)):
        if klass.__module__ in ("builtins", "pydantic.main"):
            continue
        found.update(_class_comments(klass))
    return found


@cache
def _class_comments(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    try:
        tree = ast.parse(source)
        comments = {
            tok.start[0]: tok.string.lstrip("#").strip()
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        }
    except (SyntaxError, tokenize.TokenError):
        return {}
    lines = source.splitlines()
    out = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for stmt in body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        trailing = [comments[n] for n in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1) if n in comments]
        above: list[str] = []
        n = stmt.lineno - 1
        while n in comments and lines[n - 1].lstrip().startswith("#"):  # a comment-only line just above
            above.insert(0, comments[n])
            n -= 1
        out[stmt.target.id] = " ".join(trailing or above)
    return out
