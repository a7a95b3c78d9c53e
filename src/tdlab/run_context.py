"""What a running experiment is handed (:class:`RunContext`): where its run is written, fits that resume from
their checkpoints and train on lanes, stored metric rows and parameters, and the points where a requested stop
takes effect. The run machinery an experiment's ``run`` drives; the experiment itself (its config, claims and
measures) is :mod:`tdlab.experiments.base`'s.
"""

from __future__ import annotations

import glob
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from tdlab.runs import Run, RunWriter, arm_files, copy_arrays, fit_checkpoint
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
