"""What every experiment declares as data, read from the YAML declarations beside its module: name, seed
paper, figure, description, the class that implements it, its profiles (config overrides per profile),
``arm_fields``, the seed's settings (``manifest``) and where the paper profile departs from them
(``paper_differs``). Claims, atlas axes and the run itself stay in Python: they hold functions.

One file per seed package (``seed000_local_to_global/experiments.yaml`` ...), not one per experiment: a
seed's experiments share settings its tables state for all of them (seed 000's Table 2, seed 001's
transformer set-up), written once under ``shared:`` as YAML anchors that each experiment's manifest
merges (``<<: *table_2``, its own entries after, overriding, as ``{**TABLE_2, ...}`` did).

A file reads::

    shared:                      # optional: anchors the experiments below refer to
      table_2: &table_2 {members: {value: 5, where: Table 2}}
    markov-init:                 # the experiment's name
      implementation: initialisation.MarkovInit   # module of this package . class
      paper: 000 Local to Global
      figure: Fig. 4 (App. A.3.2)
      description: ...
      arm_fields: {model.arch: "archs=[...]"}
      profiles: {quick: {members: 3}, paper: {members: 5}}
      manifest: {<<: *table_2, task.p: {value: 0.5, where: Fig. 4 caption}}
      paper_differs: {}

:func:`declarations` reads them all (safely, :func:`tdlab.safeio.load_yaml`) without importing any
experiment module, so :mod:`tdlab.experiments.catalog` and ``tdlab list`` stay free of torch;
:func:`tdlab.experiments.base.register` gives a declared class its attributes from here
(:func:`declaration_of`), so each fact is written once.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tdlab.experiments.manifest import Setting

__all__ = ["Declaration", "DeclarationError", "DeclaredSetting", "declaration_of", "declarations", "read_file"]

FILE_NAME = "experiments.yaml"
_HERE = Path(__file__).resolve().parent


class DeclarationError(ValueError):
    """A declaration file that cannot be read or does not validate: names the file and the field."""


class DeclaredSetting(BaseModel):
    """One manifest entry: the seed's ``value``, ``where`` it states it, a ``note`` where it gives a range."""

    model_config = ConfigDict(extra="forbid")
    value: Any
    where: str = Field(min_length=1)
    note: str = ""

    def setting(self) -> Setting:
        return Setting(copy.deepcopy(self.value), self.where, self.note)


class Declaration(BaseModel):
    """One experiment as declared; ``module`` (dotted) and ``cls`` (class name) are where it is implemented."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    module: str
    cls: str
    paper: str = Field(min_length=1)
    figure: str = Field(min_length=1)
    description: str = Field(min_length=1)
    profiles: dict[str, dict[str, Any]] = Field(min_length=1)
    arm_fields: dict[str, str] = {}
    manifest: dict[str, DeclaredSetting] = {}
    paper_differs: dict[str, str] = {}

    def profile_names(self) -> tuple[str, ...]:
        """The profiles the registered class has: :func:`tdlab.experiments.base.register` installs
        ``standard`` between ``quick`` and ``paper`` where both are declared and ``standard`` is not."""
        return profile_order(tuple(self.profiles))

    def attributes(self) -> dict[str, Any]:
        """The class attributes this declaration gives (fresh copies: a class may not share them)."""
        return {
            "name": self.name,
            "paper": self.paper,
            "figure": self.figure,
            "description": self.description,
            "profiles": copy.deepcopy(self.profiles),
            "arm_fields": dict(self.arm_fields),
            "manifest": {k: s.setting() for k, s in self.manifest.items()},
            "paper_differs": dict(self.paper_differs),
        }


def profile_order(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` as the registered class orders them: ``quick``, ``standard``, ``paper``, then the rest, where
    ``quick`` and ``paper`` are both there (``standard`` added when missing); otherwise as given."""
    if not {"quick", "paper"} <= set(names):
        return names
    return ("quick", "standard", "paper", *(n for n in names if n not in ("quick", "standard", "paper")))


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def read_file(path: Path, package: str) -> dict[str, Declaration]:
    """The declarations of one file, by name, in its order; ``package`` is the dotted package its
    ``implementation`` modules are in.

    Raises:
        DeclarationError: naming ``path`` and the field: not YAML, not a mapping of experiments, or an
            experiment whose fields do not validate (a missing or unknown field, a wrong type).
    """
    from tdlab.safeio import load_yaml

    try:
        doc = load_yaml(path.read_bytes())
    except Exception as exc:  # a YAML error or an alias bomb: one line naming the file
        said = " ".join(str(exc).split())
        raise DeclarationError(f"{path}: not a valid declaration file: {type(exc).__name__}: {said}") from None
    if not isinstance(doc, dict):
        raise DeclarationError(f"{path}: holds {type(doc).__name__}, not a mapping of experiment names")
    out: dict[str, Declaration] = {}
    for name, body in doc.items():
        if name == "shared":  # the anchors the experiments merge, not an experiment
            continue
        if not isinstance(body, dict):
            raise DeclarationError(f"{path}: {name}: holds {type(body).__name__}, not a mapping of fields")
        fields = dict(body)
        impl = fields.pop("implementation", None)
        if not isinstance(impl, str) or impl.count(".") != 1:
            raise DeclarationError(f"{path}: {name}.implementation: give it as module.Class, got {impl!r}")
        module, cls = impl.split(".")
        try:
            out[str(name)] = Declaration(name=str(name), module=f"{package}.{module}", cls=cls, **fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise DeclarationError(f"{path}: {name}.{_where(err['loc'])}: {err['msg']}") from None
    return out


@cache
def declarations() -> dict[str, Declaration]:
    """Every declared experiment by name: the seed packages in order, each file's experiments in its order.

    Raises:
        DeclarationError: a file that does not validate, or a name two files declare.
    """
    out: dict[str, Declaration] = {}
    for path in sorted(_HERE.glob(f"seed*/{FILE_NAME}")):
        for name, decl in read_file(path, f"{__package__}.{path.parent.name}").items():
            if name in out:
                raise DeclarationError(f"{path}: {name}: declared already by {out[name].module}'s package")
            out[name] = decl
    return out


def declaration_of(cls: type) -> Declaration | None:
    """The declaration implemented by class ``cls`` (by its module and name), if one is."""
    return next((d for d in declarations().values() if d.module == cls.__module__ and d.cls == cls.__qualname__), None)
