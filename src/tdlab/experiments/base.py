"""What an experiment is: a config with profiles, a ``run`` that trains and stores, a ``measure``
that reads the stored run back into typed measurements, its claims declared as data
(:class:`~tdlab.claims.ClaimSpec`), optional ``notes`` written after judging, and a ``plot``.

Experiments are where tasks, models, trainers and theory meet; each module of a seed's package
(``tdlab.experiments.seed000_local_to_global`` ...) reproduces one figure or table and registers
itself with :func:`register`; :data:`tdlab.experiments.catalog.CATALOG` names that module, so
:func:`get` imports only the one asked for. Verdicts are never an experiment's: :meth:`Experiment.analyse` hands
the measurements, the declared claims and the arms' health to :func:`tdlab.claims.judge`.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

import numpy as np
from pydantic import Field

from tdlab.claims import ArmHealth, ClaimSpec, GroupResult, Measurements, assess_arm, judge
from tdlab.config import Config, ConfigError, build_config, echo, parse_overrides, validate_config
from tdlab.experiments.axes import AtlasAxes
from tdlab.experiments.catalog import CATALOG
from tdlab.experiments.declared import declaration_of
from tdlab.experiments.manifest import Setting, settings_diff
from tdlab.experiments.rounds import lengths
from tdlab.experiments.standard import standard_layer
from tdlab.experiments.view import RunView
from tdlab.report.notes import verdict_notes
from tdlab.report.standard_figures import StandardFigure, draw_figures
from tdlab.runs import Run, RunDirError, RunWriter, arm_files, copy_arrays, fit_checkpoint
from tdlab.train.checkpoint import remove_checkpoint
from tdlab.train.lanes import in_lanes, lane_count
from tdlab.train.lanes import limit as lane_limit
from tdlab.train.live import LockedSink, MetricSink, arm_stream
from tdlab.train.live import current as live_sink
from tdlab.train.phases import phase
from tdlab.train.stopping import RunStopped
from tdlab.train.stopping import current as current_stopping
from tdlab.train.trainer import DivergenceError, FitResult

T = TypeVar("T")

__all__ = [
    "Analysis",
    "Experiment",
    "ExperimentConfig",
    "Fit",
    "RunContext",
    "extend_fit",
    "get",
    "include",
    "included_from",
    "init_arm",
    "initial_states",
    "load_plugins",
    "register",
    "registered",
    "registry",
    "snapshot_arm",
    "stored_experiment",
]


class ExperimentConfig(Config):
    """Fields every experiment has."""

    seed: int = Field(0, ge=0, le=2**62)  # root seed: every random draw of the run derives from it
    members: int = Field(3, ge=1, le=4096)  # ensemble members (independent seeds) per arm


class Fitter(Protocol):
    """What :meth:`RunContext.fit` drives: :class:`~tdlab.train.trainer.Trainer` or
    :class:`~tdlab.train.regression.RegressionTrainer` (its fit, checkpoint file, config hash and live sink)."""

    checkpoint: Path | None
    config_hash: str | None
    live: Callable[[Sequence[tuple[int, int, str, float]]], None] | None

    def fit(self, build: Callable[[list[int]], Any], seeds: Sequence[int], task: Any) -> FitResult: ...


class Fit(NamedTuple):
    """One fit for :meth:`RunContext.fit_all`: ``trainer.fit(build, seeds, task)`` stored under ``arm``."""

    arm: str
    trainer: Fitter
    build: Callable[[list[int]], Any]
    seeds: Sequence[int]
    task: Any


@dataclass
class RunContext:
    """Handed to :meth:`Experiment.run`: where to write, on what device, whether to show progress."""

    writer: RunWriter
    device: str = "cpu"
    progress: bool = True
    # The fits of this round (arm -> member seeds, result), and those of the round before, which a
    # ``--decide`` round extends with its new members instead of training them again.
    fits: dict[str, tuple[list[int], FitResult]] = field(default_factory=dict)
    reuse: dict[str, tuple[list[int], FitResult]] = field(default_factory=dict)
    # Where metric rows also go as they are recorded (``tdlab run --tensorboard DIR``): the trainer of
    # :meth:`fit` streams its rows at every evaluation and logged step, :meth:`store_rows` hands on every
    # stored arm's. Default: the sink set by :func:`tdlab.train.live.streaming_to`, else none.
    live: MetricSink | None = field(default_factory=live_sink)

    def start_round(self, reuse: bool = True) -> None:
        """Begin a ``--decide`` round: the staged metrics, arrays and checkpoints of the last round go
        (the experiment runs again with more members and stores every arm anew). With ``reuse``, its fits
        are kept in memory so :meth:`fit` trains only the new members of an arm whose seeds extend the old
        ones; without (a round that trains longer), every member trains anew."""
        self.reuse, self.fits = (self.fits if reuse else {}), {}
        self.writer.clear_staged()

    def record(self, arm: str, result: FitResult, initial: list[dict[str, Any]] | None = None) -> None:
        """Store a fit's metrics and final parameters under ``arm`` (replacing rows an earlier,
        cut-off attempt stored before it was killed), and its initial parameters under
        ``ARM@init`` when given (the health gate and "moved from init" claims read them)."""
        with phase("io"):
            self.store_rows(arm, result.rows)
            self.writer.save_arrays(arm, result.states)
            for step, states in sorted(result.snapshots.items()):
                self.writer.save_arrays(snapshot_arm(arm, step), states)
            if initial:
                self.writer.save_arrays(init_arm(arm), initial)

    def store_rows(self, arm: str, rows: list[tuple[int, int, str, float]]) -> None:
        """Store ``(step, member, name, value)`` rows under ``arm``, replacing rows an interrupted
        attempt of a resumed run may have stored for it."""
        self.writer.rows = [r for r in self.writer.rows if r[0] != arm]
        self.writer.add_metrics(arm, rows)
        if self.live is not None:  # rows the trainer streamed already are written once
            self.live.add(arm, self.writer.arm_rows(arm))
            self.live.flush()

    def stop_point(self, label: str = "") -> None:
        """Honour a requested stop (SIGTERM, ``--until``) between pieces of work that are not training and
        whose results are already stored (one landscape arm's rows, say): raise
        :class:`~tdlab.train.stopping.RunStopped` if one was requested, else return. A resumed run skips
        the stored pieces, so a stop here loses nothing; without these points such work runs on to its end
        and ``tdlab batch`` kills it after a grace period, losing the piece in progress."""
        policy = current_stopping()
        if policy is not None and policy.stop_requested():
            self.writer.keep = True  # the stored rows are what a resume continues from
            raise RunStopped(0, label, stored=True)

    def pieces(self, label: str, jobs: Sequence[Callable[[], T]]) -> Iterator[tuple[int, T]]:
        """Independent pieces of work that are not training (reference draws, say) on one-thread CPU lanes, at
        most the runner's lane limit (``tdlab run --lanes``: :func:`tdlab.train.lanes.limit`) at once: yield
        ``(index, result)`` in ``jobs``' order as each is done, for the caller to store. A requested stop
        (:meth:`stop_point`) starts no further piece; the pieces already running finish and are yielded, then
        :class:`~tdlab.train.stopping.RunStopped` goes up, so a resume does only the pieces the caller did not
        store. Lanes never change a number (:mod:`tdlab.train.lanes`)."""

        def piece(i: int) -> T:
            self.stop_point(label)
            return jobs[i]()

        stopped: RunStopped | None = None
        halting = halt_together([partial(piece, i) for i in range(len(jobs))], [label] * len(jobs))
        for i, outcome in in_lanes(halting, lane_count(lane_limit(), len(jobs), self.device)):
            if isinstance(outcome.error, RunStopped):
                stopped = stopped or outcome.error
                continue
            if outcome.error is not None:
                raise outcome.error
            yield i, outcome.value  # type: ignore[misc]  # a job that raised nothing returned its value
        if stopped is not None:
            raise stopped

    def copy_arms(self, source: Path, arms: Sequence[str]) -> None:
        """Copy the stored arrays (``ARM``, ``ARM@init``, ``ARM@step<N>``) and metric rows of ``arms``
        from the finished run ``source`` into this one (probing another run's trained models).
        Only regular safetensors files of ``source`` are copied, never through a symlink and never
        more than their size (:func:`tdlab.runs.copy_arrays`); an error names the source file."""
        run = Run(Path(source))
        df = run.metrics()
        for arm in arms:
            for rel in arm_files(run.path, arm):
                copy_arrays(run.path, rel, self.writer.arrays_path(rel.name[: -len(".safetensors")]))
            sub = df[df["arm"] == arm]
            self.store_rows(
                arm,
                [
                    (int(s), int(m), str(n), float(v))
                    for s, m, n, v in zip(sub["step"], sub["member"], sub["name"], sub["value"], strict=True)
                ],
            )

    def done(self, arm: str) -> FitResult | None:
        """The stored result of ``arm`` if an earlier (interrupted) attempt of this run finished it (a damaged file,
        a link or a folder where its arrays are stored is refused, one line, never trained over)."""
        if not os.path.lexists(self.writer.arrays_path(arm)):
            return None
        return FitResult(rows=self.writer.arm_rows(arm), states=self.writer.load_arrays(arm))

    def fit(
        self, arm: str, trainer: Fitter, build: Callable[[list[int]], Any], seeds: Sequence[int], task: Any
    ) -> FitResult:
        """``trainer.fit(build, seeds, task)``, stored under ``arm``, checkpointed in the run's
        ``checkpoints/`` folder, skipped when a resumed run had finished it. A diverging fit stores
        what it measured before the :class:`DivergenceError` goes on up."""
        return self.fit_all([Fit(arm, trainer, build, seeds, task)])[0]

    def fit_all(self, fits: Sequence[Fit]) -> list[FitResult]:
        """:meth:`fit` of every fit in ``fits``, stored in their order; independent fits train at once on
        :mod:`lanes <tdlab.train.lanes>` where every fit runs on one CPU thread (the same numbers, bit for
        bit), at most the runner's lane limit (:func:`tdlab.train.lanes.limit`) of them. A diverging fit is
        stored with the others before its :class:`DivergenceError` goes on up (the first in ``fits``' order).
        A stop (SIGTERM, ``--until``) checkpoints the fits in progress and starts no other: a fit not started
        has nothing to keep, and the resume starts it as it would have."""
        seeds = [[int(s) for s in f.seeds] for f in fits]
        results: list[FitResult | None] = [self.done(f.arm) for f in fits]
        for f, s, r in zip(fits, seeds, results, strict=True):
            if r is not None:
                self.fits[f.arm] = (s, r)
                self._drop_checkpoints(f.arm)  # one an earlier attempt finished before it could
        todo = [i for i, r in enumerate(results) if r is None]
        n = lane_count(lane_limit(), len(todo), self.device)
        live, self.live = self.live, (LockedSink(self.live) if n > 1 and self.live is not None else self.live)
        config_hash = self.writer.config_hash()
        first_error: DivergenceError | None = None
        stopped: RunStopped | None = None

        try:
            jobs = halt_together(
                [partial(self._train, fits[i], seeds[i], config_hash) for i in todo], [fits[i].arm for i in todo]
            )
            for j, outcome in in_lanes(jobs, n):
                i = todo[j]
                if isinstance(outcome.error, RunStopped):  # checkpointed; the fits that finish are still stored
                    stopped = stopped or outcome.error
                    continue
                if outcome.error is not None and not isinstance(outcome.error, DivergenceError):
                    raise outcome.error
                if outcome.error is None:
                    assert outcome.value is not None  # a job that raised nothing returned its FitResult
                    result = outcome.value
                else:
                    result = outcome.error.result
                self.record(fits[i].arm, result, self._initial(result, fits[i].build, seeds[i]))
                if outcome.error is not None:
                    first_error = first_error or outcome.error
                    continue
                self.fits[fits[i].arm] = (seeds[i], result)
                self._drop_checkpoints(fits[i].arm)
                results[i] = result
        finally:
            self.live = live
        if first_error is not None:
            raise first_error from None
        if stopped is not None:
            raise stopped
        done = [r for r in results if r is not None]
        assert len(done) == len(results)  # every fit was reloaded or trained: a failed or stopped one raised above
        return done

    def _drop_checkpoints(self, arm: str) -> None:
        """Remove ``arm``'s trainer checkpoints once its result is stored: a resume reloads a stored fit
        (:meth:`done`) and never reads them, and a stopped run's staging folder (the state a batch carries
        between machines) would keep every finished fit's weights, moments and rows twice. Only when its
        arrays are there: a fit stored without states would train again, from its checkpoint."""
        if not self.writer.arrays_path(arm).is_file():
            return
        own = fit_checkpoint(self.writer.path, arm)
        tagged = re.compile(re.escape(own.stem) + r"\+[0-9]+\.json")
        for f in own.parent.glob(f"{glob.escape(own.stem)}*.json"):
            if f == own or tagged.fullmatch(f.name):
                remove_checkpoint(f)

    def _train(self, fit: Fit, seeds: list[int], config_hash: str) -> FitResult:
        """The training half of :meth:`fit_all` (runs on a lane: it writes only the fit's own checkpoint)."""
        arm, trainer = fit.arm, fit.trainer
        # A --decide round: members 0..k-1 were trained by the last round with the same seeds; member i's
        # numbers depend on its seed alone (tdlab.seeding), so only the new members are trained.
        old_seeds, old = self.reuse.get(arm, ([], FitResult()))
        k = len(old_seeds) if 0 < len(old_seeds) <= len(seeds) and seeds[: len(old_seeds)] == old_seeds else 0
        trainer.checkpoint = fit_checkpoint(self.writer.path, arm, k)
        trainer.config_hash = config_hash  # a checkpoint of an edited config.yaml is refused
        trainer.live = arm_stream(self.live, arm, k)  # members k.. of the arm, as the trainer's 0..
        try:
            return extend_fit(old, trainer.fit(fit.build, seeds[k:], fit.task), k) if k < len(seeds) else old
        except DivergenceError as err:
            if k:  # the member named as the whole ensemble numbers it
                raise DivergenceError(err.member + k, err.step, extend_fit(old, err.result, k)) from None
            raise
        finally:
            trainer.live = None
            if self.live is not None:
                self.live.flush()

    @staticmethod
    def _initial(result: FitResult, build: Callable[[list[int]], Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
        """The fit's initial parameters: as the trainer recorded them when it did for every member,
        else rebuilt from the seeds (a resumed fit skipped the builds of its finished chunks)."""
        if len(result.init_states) == len(seeds):
            return result.init_states
        return initial_states(build, seeds)


def halt_together(jobs: Sequence[Callable[[], T]], labels: Sequence[str]) -> list[Callable[[], T]]:
    """``jobs`` for :func:`~tdlab.train.lanes.in_lanes` such that once one stops on request
    (:class:`~tdlab.train.stopping.RunStopped`), none not started yet starts: each of those raises a stored
    ``RunStopped`` named by its label (nothing of it was begun, so a resume starts it as it would have)."""
    halted = threading.Event()

    def run(i: int) -> T:
        if halted.is_set():
            raise RunStopped(0, labels[i], stored=True)
        try:
            return jobs[i]()
        except RunStopped:
            halted.set()
            raise

    return [partial(run, i) for i in range(len(jobs))]


def extend_fit(first: FitResult, more: FitResult, k: int) -> FitResult:
    """``first`` (members ``0..k-1``) followed by ``more`` (members ``k..``): rows renumbered, states,
    initial states and snapshots concatenated (the initial states only when both fits recorded them)."""
    if k == 0:
        return more
    steps = sorted(set(first.snapshots) & set(more.snapshots))
    init = first.init_states + more.init_states if first.init_states and more.init_states else []
    return FitResult(
        rows=first.rows + [(s, m + k, n, v) for s, m, n, v in more.rows],
        states=first.states + more.states,
        wall_time=first.wall_time + more.wall_time,
        init_states=init,
        snapshots={t: first.snapshots[t] + more.snapshots[t] for t in steps},
    )


def snapshot_arm(arm: str, step: int) -> str:
    """The name under which ``arm``'s parameters after step ``step`` are stored (the trainer's ``snapshot_steps``)."""
    return f"{arm}@step{step}"


def init_arm(arm: str) -> str:
    """The name under which ``arm``'s initial parameters are stored (``run.arrays(init_arm(arm))``)."""
    return f"{arm}@init"


def initial_states(build: Callable[[list[int]], Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Every member's initial parameters, rebuilt from its seed (initialisation derives from the
    member's seed alone, so this is the state training started from), without the member axis."""
    model = build(list(seeds))
    return [{k: v[e].detach().cpu().clone() for k, v in model.named_parameters()} for e in range(len(seeds))]


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
        cannot say): ``[*super().notes(cfg, measured, groups), ...]``."""
        return verdict_notes(groups, measured)

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

    A class of tdlab's seed packages is declared in the YAML beside its module
    (:mod:`tdlab.experiments.declared`, from which :data:`tdlab.experiments.catalog.CATALOG` names it without
    importing it): its name, paper, figure, description, profiles, ``arm_fields``, ``manifest`` and
    ``paper_differs`` are set from there, and a class that sets one of them itself is refused (each fact is
    written once). A class no declaration names (an installed package's, ``--include``'s) sets them itself.

    Installs the ``standard`` profile between ``quick`` and ``paper`` (:mod:`tdlab.experiments.standard`)
    unless the class declares its own; an experiment with only some of the profiles (a user's with a ``quick``
    profile alone) keeps just those."""
    declared = declaration_of(cls)
    if declared is not None:
        attributes = declared.attributes()
        twice = sorted(set(attributes) & set(vars(cls)))
        if twice:
            raise TypeError(f"{cls.__name__}: {', '.join(twice)} declared in YAML already; remove them from the class")
        for key, value in attributes.items():
            setattr(cls, key, value)
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
