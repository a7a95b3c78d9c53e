"""What every experiment declares as data, read from the YAML declarations beside its module: name, seed
paper, figure, description, the class that implements it, its profiles (config overrides per profile),
``arm_fields``, the seed's settings (``manifest``) and where the paper profile departs from them
(``paper_differs``), how it reads the seed where the seed is ambiguous (``readings``), what it says of every run
in words (``notes``), its atlas axes (``atlas``) and its ``claims``. Configs and the run itself stay in Python.

A claim is a mapping of :class:`~tdlab.claims.ClaimSpec`'s fields: its words, place and kind as text, and
what is code (a hypothesis' test, a stage, a theory function, a planted case) named with ``!py NAME``: a name
of the implementing module, ``common.plateau.NAME`` (a module of the paper package, dotted) or
``tdlab.theory.markov.NAME``. A
``threshold`` or ``calibration`` mapping builds :class:`~tdlab.claims.declare.Threshold` /
:class:`~tdlab.claims.declare.Calibration` and a ``hypotheses`` entry mapping a
:class:`~tdlab.claims.declare.Hypothesis`; a mapping with ``call: !py f`` is ``f(**the other keys)`` (a
claim built by a template function of the module, or a threshold by a helper); a ``claims`` entry that is
``!py NAME`` is a claim, or a tuple of them, built in Python. lm-eval-harness's task files name their Python
the same way (``!function``).

One file per paper package (``paper000_local_to_global/experiments.yaml`` ...), not one per experiment: a
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
      readings:
        - where: App. A.3.1
          paper: says 'train them using SGD' and gives no step size; Table 2 uses AdamW, lr 1e-3
          chosen: AdamW as Table 2; SGD at a step size of ours is the option, its rows ours
          option: train.optimizer
      notes:
        - text: "Optimiser: SGD at lr {train.lr:g}, a step size of ours: every row of this run is ours"
          when: {train.optimizer: sgd}
      atlas:
        axes: [{field: task.p, values: [0.2, 0.8], label: p}]
        why: Thms 2/8 split the (p, q) square at p + q = 1
      claims:
        - id: proposed-init-ends-at-global-minimum
          statement: The proposed init ends at the entropy rate (App. A.3.2, Fig. 4)
          quote: With our initialization, it converges to the global minimum ...
          where: Fig. 4 caption; App. A.3.2
          hypotheses: [!py ABOVE_LINE]
          threshold: !py END_STATE
          test: value
          relation: close
          quantity: final test loss − the Bayes predictor's loss on the same batches, nats
          stage: !py _proposed_stage

:func:`declarations` reads them all (safely, :func:`tdlab.safeio.load_yaml`) without importing any
experiment module, so :mod:`tdlab.experiments.catalog` and ``tdlab list`` stay free of torch;
:func:`tdlab.experiments.base.register` gives a declared class its attributes from here
(:func:`declaration_of`), so each fact is written once.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tdlab.experiments.axes import AtlasAxes
from tdlab.experiments.manifest import Note, Reading, Setting

if TYPE_CHECKING:
    from tdlab.claims import ClaimSpec

__all__ = [
    "Declaration",
    "DeclarationError",
    "PyRef",
    "claim_specs",
    "declaration_of",
    "declarations",
    "read_file",
]

FILE_NAME = "experiments.yaml"
_HERE = Path(__file__).resolve().parent


class DeclarationError(ValueError):
    """A declaration file that cannot be read or does not validate: names the file and the field."""


@dataclass(frozen=True)
class PyRef:
    """``!py NAME`` in a declaration: a Python object named, looked up when the class registers."""

    name: str


@cache
def _loader() -> type[Any]:
    """PyYAML's safe loader with one tag more, ``!py NAME``, read as a :class:`PyRef` (a name, no code run), and
    YAML 1.2's booleans: only ``true`` and ``false`` (YAML 1.1 also reads ``on``, ``off``, ``yes``, ``no`` as
    booleans, so a hypothesis' ``on: row`` would be the key ``True``)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    bool_tag = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    Loader.add_constructor("!py", lambda loader, node: PyRef(str(loader.construct_scalar(node))))
    return Loader


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
    manifest: dict[str, Setting] = {}
    paper_differs: dict[str, str] = {}
    readings: tuple[Reading, ...] = ()
    notes: tuple[Note, ...] = ()
    atlas: AtlasAxes | None = None
    claims: list[Any] = []
    file: str = ""

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
            "manifest": copy.deepcopy(self.manifest),
            "paper_differs": dict(self.paper_differs),
            "readings": self.readings,  # frozen, of strings: shared safely
            "declared_notes": copy.deepcopy(self.notes),
            **({} if self.atlas is None else {"atlas_axes": copy.deepcopy(self.atlas)}),
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
        doc = load_yaml(path.read_bytes(), _loader())
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
            out[str(name)] = Declaration(
                name=str(name), module=f"{package}.{module}", cls=cls, file=str(path), **fields
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            raise DeclarationError(f"{path}: {name}.{_where(err['loc'])}: {err['msg']}") from None
    return out


@cache
def declarations() -> dict[str, Declaration]:
    """Every declared experiment by name: the paper packages in order, each file's experiments in its order.

    Raises:
        DeclarationError: a file that does not validate, or a name two files declare.
    """
    out: dict[str, Declaration] = {}
    for path in sorted(_HERE.glob(f"paper*/{FILE_NAME}")):
        for name, decl in read_file(path, f"{__package__}.{path.parent.name}").items():
            if name in out:
                raise DeclarationError(f"{path}: {name}: declared already by {out[name].module}'s package")
            out[name] = decl
    return out


def declaration_of(cls: type) -> Declaration | None:
    """The declaration implemented by class ``cls`` (by its module and name), if one is."""
    return next((d for d in declarations().values() if d.module == cls.__module__ and d.cls == cls.__qualname__), None)


def _lookup(ref: PyRef, module: ModuleType) -> Any:
    """The object ``ref`` names: a name of ``module`` (then attributes), a module of ``module``'s package and a
    name in it (``common.plateau.LEFT_PLATEAU``), or one of tdlab's (``tdlab.probes.stages.TRAINED``)."""
    parts = ref.name.split(".")
    if parts[0] in vars(module):
        obj, rest = vars(module)[parts[0]], parts[1:]
    else:
        package = module.__name__.rpartition(".")[0]
        for i in range(len(parts) - 1, 0, -1):
            dotted = ".".join(parts[:i])
            name = dotted if dotted.startswith("tdlab.") else f"{package}.{dotted}"
            try:
                obj, rest = importlib.import_module(name), parts[i:]
                break
            except ModuleNotFoundError:
                continue
        else:
            raise LookupError(f"!py {ref.name}: {module.__name__} has no name {parts[0]!r}")
    for part in rest:
        if not hasattr(obj, part):
            raise LookupError(f"!py {ref.name}: {getattr(obj, '__name__', obj)!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


# The fields whose mappings build a class (a claim's, a template's or a threshold's).
_TYPED = {"threshold": "threshold", "calibration": "calibration", "hypotheses": "hypothesis"}


def _resolve(value: Any, module: ModuleType, typed: str = "") -> Any:
    """``value`` with every :class:`PyRef` looked up, ``call:`` mappings called, lists made tuples and the
    mappings of a ``typed`` field (``threshold``, ``calibration``, a hypothesis) built into their class."""
    from tdlab.claims.declare import Calibration, Hypothesis, Threshold

    if isinstance(value, PyRef):
        return _lookup(value, module)
    if isinstance(value, list):
        return tuple(_resolve(v, module, typed) for v in value)
    if not isinstance(value, dict):
        return value
    fields = {k: _resolve(v, module, _TYPED.get(k, "")) for k, v in value.items() if k != "call"}
    if isinstance(value.get("call"), PyRef):
        return _lookup(value["call"], module)(**fields)
    kind = {"threshold": Threshold, "calibration": Calibration, "hypothesis": Hypothesis}.get(typed)
    return kind(**fields) if kind is not None else fields


def claim_specs(decl: Declaration, module: ModuleType) -> tuple[ClaimSpec, ...]:
    """The claims ``decl`` declares, built against ``module`` (the implementing module, as far as it has run).

    Raises:
        DeclarationError: naming the file, the experiment, the claim and the field: an unknown field, a
            ``!py`` name that does not exist, or values :class:`~tdlab.claims.ClaimSpec` refuses.
    """
    from tdlab.claims import ClaimSpec
    from tdlab.claims.judge import ids_declared_twice

    out: list[ClaimSpec] = []
    for i, entry in enumerate(decl.claims):
        where = f"{decl.file}: {decl.name}.claims[{i}]"
        if isinstance(entry, dict) and "call" not in entry:
            where += f" ({entry.get('id', 'no id')})"
            fields: dict[str, Any] = {}
            for key, raw in entry.items():
                try:
                    fields[key] = _resolve(raw, module, _TYPED.get(key, ""))
                except (LookupError, TypeError, ValueError) as exc:
                    raise DeclarationError(f"{where}.{key}: {exc}") from None
            try:
                out.append(ClaimSpec(**fields))
            except (TypeError, ValueError) as exc:
                raise DeclarationError(f"{where}: {exc}") from None
            continue
        try:
            built = _resolve(entry, module)
        except (LookupError, TypeError, ValueError) as exc:
            raise DeclarationError(f"{where}: {exc}") from None
        specs = built if isinstance(built, (tuple, list)) else (built,)
        for spec in specs:
            if not isinstance(spec, ClaimSpec):
                raise DeclarationError(f"{where}: builds {type(spec).__name__}, not a ClaimSpec")
            out.append(spec)
    twice = ids_declared_twice(out)
    if twice:
        raise DeclarationError(f"{decl.file}: {decl.name}.claims: ids declared twice: {', '.join(twice)}")
    return tuple(out)
