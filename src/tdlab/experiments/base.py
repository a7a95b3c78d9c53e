"""What an experiment is: a config with profiles, a ``run`` that trains and stores, a ``measure``
that reads the stored run back into typed measurements, its claims declared as data
(:class:`~tdlab.claims.ClaimSpec`), optional ``notes`` written after judging, and a ``plot``.

Experiments are where tasks, models, trainers and theory meet; each module of a seed's package
(``tdlab.experiments.paper000_local_to_global`` ...) reproduces one figure or table and registers
itself with :func:`register`; :data:`tdlab.experiments.catalog.CATALOG` names that module, so
:func:`get` imports only the one asked for. Verdicts are never an experiment's: :meth:`Experiment.analyse` hands
the measurements, the declared claims and the arms' health to :func:`tdlab.claims.judge`.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from pydantic import Field

from tdlab.claims import ArmHealth, ClaimSpec, GroupResult, Measurements, assess_arm, judge
from tdlab.config import Config, ConfigError, build_config, echo, field_exists, parse_overrides, validate_config
from tdlab.costs.standard import standard_layer
from tdlab.experiments.axes import AtlasAxes
from tdlab.experiments.catalog import CATALOG
from tdlab.experiments.declared import claim_specs, declaration_of
from tdlab.experiments.manifest import Note, Reading, Setting, settings_diff
from tdlab.report.notes import verdict_notes
from tdlab.report.standard_figures import StandardFigure, draw_figures
from tdlab.rounds import lengths
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run, RunDirError
from tdlab.train.phases import phase

__all__ = [
    "Analysis",
    "Experiment",
    "ExperimentConfig",
    "get",
    "include",
    "included_from",
    "load_plugins",
    "register",
    "registered",
    "registry",
    "stored_experiment",
]


class ExperimentConfig(Config):
    """Fields every experiment has."""

    seed: int = Field(0, ge=0, le=2**62)  # root seed: every random draw of the run derives from it
    members: int = Field(3, ge=1, le=4096)  # ensemble members (independent seeds) per arm


@dataclass
class Analysis:
    """What :meth:`Experiment.analyse` computes from a run: judged claim groups (paper statements and
    sanity checks, each with its rows), measurements, plain-language findings written after judging,
    and the health of every trained arm."""

    groups: list[GroupResult] = field(default_factory=list)
    measurements: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # plain-language findings for the report
    health: dict[str, ArmHealth] = field(default_factory=dict)
    measured: Measurements | None = None  # what measure() returned (declared claims)

    def result(self, claim: str) -> GroupResult:
        """The judged group ``claim``."""
        for g in self.groups:
            if g.id == claim:
                return g
        raise KeyError(claim)

    @property
    def paper(self) -> list[GroupResult]:
        return [g for g in self.groups if g.kind == "paper"]

    @property
    def sanity_groups(self) -> list[GroupResult]:
        return [g for g in self.groups if g.kind == "sanity"]


ConfigT = TypeVar("ConfigT", bound=ExperimentConfig)


class Experiment(ABC, Generic[ConfigT]):
    """One reproduced figure or table. Subclasses set the class attributes and implement the rest;
    ``ConfigT`` is the experiment's config class, the type of every ``cfg`` its methods take."""

    name: ClassVar[str]
    paper: ClassVar[str]  # which seed, e.g. "000 Local to Global"
    figure: ClassVar[str]  # what it reproduces, e.g. "Fig. 4 (App. A.3.2)"
    description: ClassVar[str]
    Config: type[ConfigT]  # not ClassVar: a ClassVar cannot hold a type variable
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"quick": {}, "paper": {}}
    # Config keys the experiment sets itself per arm (a ``--set`` of them would be silently replaced),
    # each with what to set instead: ``{"model.arch": "archs=[...]"}``.
    arm_fields: ClassVar[dict[str, str]] = {}
    # The atlas axes: the few settings the claims are most sensitive to, with their ranges;
    # ``tdlab atlas run`` sweeps them, ``tdlab atlas build`` maps each claim over them. None: no atlas map.
    atlas_axes: ClassVar[AtlasAxes | None] = None
    # The paper statements and sanity checks this experiment's measurements are judged against.
    claims: ClassVar[tuple[ClaimSpec, ...]] = ()
    # Every setting the seed states, by config field, with its place (tdlab.experiments.manifest): a run is
    # at the seed's settings only when its config equals it field by field.
    manifest: ClassVar[dict[str, Setting]] = {}
    # The manifest's fields where the paper profile departs from the seed, each with why (CPU time, a
    # setting the seed leaves open): a record at the paper profile then lists them and is not the seed's.
    paper_differs: ClassVar[dict[str, str]] = {}
    # How the experiment reads the seed where it is ambiguous, silent or contradicts itself
    # (tdlab.experiments.manifest.Reading): tdlab explain, the report and the seed's page show them.
    readings: ClassVar[tuple[Reading, ...]] = ()
    # What the experiment says of every run in words (tdlab.experiments.manifest.Note), after the verdict notes.
    declared_notes: ClassVar[tuple[Note, ...]] = ()
    # The standard figures (training curves, a grid's heatmap, matrices, bars) the report layer draws for
    # this experiment (tdlab.report.standard_figures); the default plot() draws them.
    figures: ClassVar[tuple[StandardFigure, ...]] = ()

    def settings_diff(self, cfg: ConfigT) -> list[dict[str, Any]]:
        """The fields where ``cfg`` departs from the settings the seed states (:attr:`manifest`):
        ``[{field, paper, run, where}]``; empty: ``cfg`` is at the paper's settings."""
        return settings_diff(self.manifest, cfg)

    def make_config(
        self, profile: str = "quick", overrides: Sequence[str] = (), members: int | None = None, seed: int | None = None
    ) -> ConfigT:
        """Defaults < profile < ``--set`` overrides and ``--seeds``/``--seed``; validated once.

        Refuses (:class:`ConfigError`, one line) an unknown profile, a bad override, an override of a
        key the experiment sets per arm (:attr:`arm_fields`), ``members`` or ``seed`` given both by ``--set``
        and by ``--seeds``/``--seed`` (``members``, ``seed``), and a configuration that cannot fit in
        this machine's memory (:func:`tdlab.train.memory.check_memory`): all before anything is written.
        """
        from tdlab.train.memory import check_memory

        if profile not in self.profiles:
            raise ConfigError(
                f"profile: unknown profile {echo(profile)} for {self.name}; allowed: {', '.join(self.profiles)}"
            )
        top: dict[str, Any] = {}
        parsed = parse_overrides(overrides)
        for key, value, option in (("members", members, "--seeds"), ("seed", seed, "--seed")):
            if value is None:
                continue
            if key in parsed:  # one would silently replace the other
                raise ConfigError(
                    f"{key}: set twice, by --set {key}={echo(parsed[key])} and by {option} {value}; give one of them"
                )
            top[key] = value
        for key in _dotted_keys(parsed):
            if key in self.arm_fields:
                raise ConfigError(
                    f"{key}: {self.name} sets it per arm, so --set {key} would be ignored; "
                    f"use {self.arm_fields[key]} instead"
                )
        cfg = build_config(self.Config, self.profiles[profile], parsed, top)
        check_memory(cfg)
        return cfg

    @abstractmethod
    def run(self, cfg: ConfigT, ctx: RunContext) -> None:
        """Train and measure; store everything through ``ctx``."""

    def measure(self, cfg: ConfigT, run: RunView) -> Measurements:
        """Typed measurements of the stored run: one row per declared claim and arm, the stage checks
        the claims' gates read, and the values the report shows. No verdicts."""
        raise NotImplementedError(f"{self.name} declares no measure()")

    def notes(self, cfg: ConfigT, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        """Plain-language findings for the report, written after judging: what held, what failed and by how
        much, what was not evaluable and why, which rows are ours (:func:`tdlab.report.notes.verdict_notes`).
        An experiment overrides it only to add, after these, what is its own (a measured fact the verdicts
        cannot say): ``[*super().notes(cfg, measured, groups), ...]``. The :attr:`declared_notes` that hold for
        ``cfg`` come after the verdict notes."""
        declared = [n.render(cfg) for n in self.declared_notes]
        return [*verdict_notes(groups, measured), *(n for n in declared if n is not None)]

    def analyse(self, cfg: ConfigT, run: Run | RunView, confidence: float = 0.95) -> Analysis:
        """Measure, gate and judge the stored run: the declared claims decided by :func:`tdlab.claims.judge`
        on :meth:`measure`'s rows and :meth:`health`'s gate at ``confidence`` (a ``--decide`` run's looks
        judge at ``1 − alpha / looks``), then :meth:`notes`."""
        with phase("analysis"):
            view = run if isinstance(run, RunView) else RunView(run)
            measured = self.measure(cfg, view)
            health = self.health(cfg, view)
            groups = judge(self.claims, measured, cfg, health, confidence, lengths(self, cfg))
            return Analysis(groups, measured.values, self.notes(cfg, measured, groups), health, measured=measured)

    def trivial_error(self, cfg: ConfigT, arm: str) -> float | None:
        """The test error of the trivial predictor for ``arm`` (log V, H(π), E[y²]); ``None`` skips that
        part of the health gate. Experiments override it."""
        return None

    def health(self, cfg: ConfigT, run: Run | RunView) -> dict[str, ArmHealth]:
        """The training-health gate of every trained arm, from the stored metrics.

        An arm is an arm with a ``test_loss`` series. Initial and final loss are its first and last
        ``test_loss`` (the trainers evaluate before the first step and at the end); accepted steps are
        the last ``accepted_steps`` value when the trainer records one (backtracking GD), else the
        last step index; the test error is the final ``test_loss`` against :meth:`trivial_error`.
        """
        df = run.metrics()
        out: dict[str, ArmHealth] = {}
        for arm, sub in df.groupby("arm", sort=False):
            loss = sub[sub["name"] == "test_loss"]
            if loss.empty:
                continue
            loss = loss.sort_values(["member", "step"])
            first = loss.groupby("member")["value"].first()
            last = loss.groupby("member")["value"].last()
            acc = sub[sub["name"] == "accepted_steps"]
            if not acc.empty:
                accepted = (
                    acc.sort_values("step").groupby("member")["value"].last().reindex(first.index).fillna(0).tolist()
                )
            else:
                accepted = loss.groupby("member")["step"].max().tolist()
            finite = bool(np.all(np.isfinite(sub["value"].to_numpy(dtype=float))))
            out[str(arm)] = assess_arm(
                str(arm),
                first.tolist(),
                last.tolist(),
                accepted_steps=accepted,
                test_error=last.tolist(),
                trivial_error=self.trivial_error(cfg, str(arm)),
                all_finite=finite,
            )
        return out

    def plot(self, cfg: ConfigT, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """Write figures into ``figdir``; return their paths: the declared :attr:`figures`, drawn by the report
        layer. An experiment overrides it only for a figure that is its own (a landscape, a flow field):
        ``[*super().plot(cfg, run, analysis, figdir), ...]``."""
        return draw_figures(self.figures, cfg, run, analysis.measurements, figdir)


def _dotted_keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key of a nested override dict, dotted: ``{"a": {"b": 1}}`` -> ``["a", "a.b"]``."""
    keys = []
    for k, v in tree.items():
        keys.append(f"{prefix}{k}")
        if isinstance(v, dict):
            keys.extend(_dotted_keys(v, f"{prefix}{k}."))
    return keys


ExperimentT = TypeVar("ExperimentT", bound=Experiment[Any])
_REGISTRY: dict[str, Experiment[Any]] = {}


_INSTALLED: set[int] = set()  # ids of the profile dicts register() made


def register(cls: type[ExperimentT]) -> type[ExperimentT]:
    """Class decorator: make an experiment available to ``tdlab list`` and ``tdlab run``.

    A class of tdlab's paper packages is declared in the YAML beside its module
    (:mod:`tdlab.experiments.declared`, from which :data:`tdlab.experiments.catalog.CATALOG` names it without
    importing it): its name, paper, figure, description, profiles, ``arm_fields``, ``manifest``,
    ``paper_differs``, atlas axes and claims are set from there, and a class that sets one of them itself is refused (each fact is
    written once). A class no declaration names (an installed package's, ``--include``'s) sets them itself.

    Installs the ``standard`` profile between ``quick`` and ``paper`` (:mod:`tdlab.costs.standard`)
    unless the class declares its own; an experiment with only some of the profiles (a user's with a ``quick``
    profile alone) keeps just those."""
    declared = declaration_of(cls)
    if declared is not None:
        attributes = declared.attributes()
        if declared.claims:  # built against the module as far as it has run: the names above the class
            attributes["claims"] = claim_specs(declared, sys.modules[cls.__module__])
        twice = sorted(set(attributes) & set(vars(cls)))
        if twice:
            raise TypeError(f"{cls.__name__}: {', '.join(twice)} declared in YAML already; remove them from the class")
        for key, value in attributes.items():
            setattr(cls, key, value)
    for reading in cls.readings:
        if reading.option is not None and not field_exists(cls.Config, reading.option):
            raise TypeError(
                f"{cls.__name__}: the reading of {reading.where} names option {reading.option!r}, "
                f"not a field of {cls.Config.__name__}"
            )
    for note in cls.declared_notes:
        unknown = [f for f in note.fields() if not field_exists(cls.Config, f)]
        if unknown:
            raise TypeError(
                f"{cls.__name__}: the note {echo(note.text)} reads {', '.join(map(repr, unknown))}, "
                f"not a field of {cls.Config.__name__}"
            )
    if not cls.profiles:
        raise TypeError(f"{cls.__name__}: an experiment declares at least one profile (profiles = {{'quick': {{}}}})")
    # A standard installed here for another class (a parent's, or a dict shared with one) is sized for that one;
    # it sits between quick and paper, so an experiment with only some of the profiles keeps just those.
    both = {"quick", "paper"} <= set(cls.profiles)
    if both and ("standard" not in cls.profiles or id(cls.profiles) in _INSTALLED):
        rest = {k: v for k, v in cls.profiles.items() if k not in ("quick", "standard", "paper")}
        cls.profiles = {
            "quick": cls.profiles["quick"],
            "standard": standard_layer(cls),
            "paper": cls.profiles["paper"],
            **rest,
        }
        _INSTALLED.add(id(cls.profiles))
    _REGISTRY[cls.name] = cls()
    return cls


# Experiments of other packages: an installed package names its experiment modules under this entry point
# group (``[project.entry-points."tdlab.experiments"] my-exp = "my_pkg.my_exp"``); importing one registers it.
ENTRY_POINT_GROUP = "tdlab.experiments"
HOW_TO_REGISTER = (
    "an experiment of your own is found when its package names its module under the 'tdlab.experiments' "
    "entry point group (docs/contributing.md), or with --include DIR"
)
_PLUGINS: dict[str, str] = {}  # entry point name -> why it could not be imported ("" once imported)
_INCLUDED: dict[str, Path] = {}  # experiment name -> the --include path that registered it


def load_plugins() -> None:
    """Import every module installed packages name under :data:`ENTRY_POINT_GROUP` (once each). One that fails
    to import is kept with its error, named when its experiment is asked for; the rest of tdlab works on."""
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _PLUGINS:
            continue
        try:
            ep.load()
            _PLUGINS[ep.name] = ""
        except Exception as exc:  # a broken package of someone else's: named on use, never a crash of tdlab
            _PLUGINS[ep.name] = f"{ep.value} failed to import: {type(exc).__name__}: {str(exc)[:200]}"


def include(path: Path | str) -> list[str]:
    """Import the experiment modules at ``path`` and return the experiments they register, by name (``tdlab run
    --include DIR NAME``, lm-eval-harness's ``--include_path``): a package folder (one with ``__init__.py``) is
    imported as that package, its parent put on ``sys.path``; any other folder has each ``.py`` file directly in
    it imported (the folder put on ``sys.path`` so they may import each other); a ``.py`` file is imported
    alone. This runs the user's code, as ``python FILE`` would; tdlab never includes a path it read from a run
    directory.

    Raises:
        ConfigError: naming ``--include``: a path that is not a folder or a ``.py`` file, or a module that fails
            to import (its error in one line).
    """
    p = Path(path).expanduser().resolve()
    if p.is_dir() and (p / "__init__.py").is_file():
        roots, files = p.parent, [p]
    elif p.is_dir():
        roots, files = p, sorted(f for f in p.glob("*.py") if f.is_file() and not f.name.startswith("_"))
    elif p.is_file() and p.suffix == ".py":
        roots, files = p.parent, [p]
    else:
        raise ConfigError(f"--include: {echo(str(path))} is not a folder of experiment modules or a .py file")
    if str(roots) not in sys.path:
        sys.path.insert(0, str(roots))
    before = set(_REGISTRY)
    for f in files:
        try:
            if f.is_dir():  # a package: imported by its name, so its modules import one another as usual
                importlib.import_module(f.name)
                continue
            name = f"tdlab_include_{hashlib.sha256(str(f).encode()).hexdigest()[:12]}_{f.stem}"
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, f)
            if spec is None or spec.loader is None:
                raise ImportError("not an importable Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        except Exception as exc:  # the user's code: its error in one line, never a traceback of tdlab's
            raise ConfigError(f"--include: {f} failed to import: {type(exc).__name__}: {str(exc)[:200]}") from None
    new = sorted(set(_REGISTRY) - before)
    for n in new:
        _INCLUDED[n] = p
    return new


def included_from(name: str) -> Path | None:
    """The ``--include`` path that registered experiment ``name`` in this process, if one did."""
    return _INCLUDED.get(name)


def registered() -> dict[str, Experiment[Any]]:
    """The experiments registered so far in this process (no module imported to find more)."""
    return dict(_REGISTRY)


def registry() -> dict[str, Experiment[Any]]:
    """Every experiment by name, each module of the catalog imported (all of them: for what needs the
    objects, e.g. the atlas; a name's metadata alone is in :data:`~tdlab.experiments.catalog.CATALOG`), in the
    catalog's order whatever order :func:`get` loaded them in, then those of installed packages
    (:func:`load_plugins`) and any registered from outside it (:func:`include`)."""
    ordered = {name: _load(name) for name in CATALOG}
    load_plugins()
    return ordered | {n: e for n, e in _REGISTRY.items() if n not in ordered}


def get(name: str) -> Experiment[Any]:
    """The experiment ``name``; imports its module only (:data:`~tdlab.experiments.catalog.CATALOG`),
    or one registered already (an experiment defined outside tdlab's packages), else one an installed
    package names under :data:`ENTRY_POINT_GROUP`."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in CATALOG:
        load_plugins()
        if name in _REGISTRY:
            return _REGISTRY[name]
        if _PLUGINS.get(str(name)):
            raise ConfigError(f"experiment: {echo(name)}'s package is installed but {_PLUGINS[str(name)]}")
        known = sorted(set(CATALOG) | set(_REGISTRY))
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ConfigError(
            f"experiment: unknown experiment {echo(name)}; {hint}allowed: {', '.join(known)}; {HOW_TO_REGISTER}"
        )
    return _load(name)


def stored_experiment(run_dir: Path) -> tuple[Experiment[Any], ExperimentConfig]:
    """The experiment a run directory (finished or staged) ran and its config, validated: ``config.yaml``'s
    ``experiment`` and ``config``, what a rebuild, a resume, an export and a record read.

    Raises:
        RunDirError: naming ``config.yaml``, when it names no known experiment, or holds no ``config`` mapping
            (the experiment's defaults are not what ran) or one that is not valid.
    """
    path = Path(run_dir) / "config.yaml"
    conf = Run.read_config(path)
    if "config" not in conf:
        raise RunDirError(
            f"{path} is corrupt: it holds no 'config' mapping (tdlab writes the run's whole config there)"
        )
    name = conf["experiment"]
    try:
        exp = get(name)
    except ConfigError:
        came = conf.get("include")
        where = f"it ran from --include {came}: pass --include again" if isinstance(came, str) else HOW_TO_REGISTER
        raise RunDirError(f"{path}: its experiment {echo(name)} is not registered here; {where}") from None
    try:
        return exp, validate_config(exp.Config, conf["config"])
    except ConfigError as exc:
        raise RunDirError(f"{path} does not hold a valid config: {exc}") from None


def _load(name: str) -> Experiment[Any]:
    """Import the catalog's module of ``name`` (registering it) and return the registered experiment."""
    if name not in _REGISTRY:
        # The module is named by the catalog (data), not imported here: experiment modules import this one.
        importlib.import_module(CATALOG[name].module)
    if name not in _REGISTRY:
        raise RuntimeError(f"the catalog names {CATALOG[name].module} for {name!r}, which registers no such experiment")
    return _REGISTRY[name]
