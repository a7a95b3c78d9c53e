"""The training loop: an ensemble of independent members, per-member metrics.

What is learned is the *objective*'s business (:mod:`tdlab.train.objectives`: next token, a label at
the last position, masked tokens) and where batches come from is the *data regime*'s
(:mod:`tdlab.train.data`: fresh samples every step, or a fixed data set in shuffled epochs); the
defaults, next token on a stream, are what seeds 000 and 003 train.

Members are trained as one vectorised ensemble, in chunks of members when the ensemble would not
pay (long sequences on a CPU, where one member's attention already fills the cores). Chunking never
changes the numbers: every member's initialisation and data come from its own seed.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from pydantic import Field, PositiveInt
from torch import nn

from tdlab.config import Config
from tdlab.progress import ProgressBar
from tdlab.seeding import Purpose, generators
from tdlab.train.checkpoint import (
    CheckpointError,
    is_int,
    load_checked,
    pack_optimizer,
    save_checkpoint,
    tensor_group,
    unpack_optimizer,
    unpack_rows,
)
from tdlab.train.cpu import flush_denormals
from tdlab.train.data import Stream
from tdlab.train.objectives import NextToken, Objective, next_token_loss
from tdlab.train.optim import EagerAdamW, EagerSGD
from tdlab.train.phases import phase
from tdlab.train.stopping import RunStopped
from tdlab.train.stopping import current as stop_policy

__all__ = [
    "DivergenceError",
    "FitResult",
    "TrainConfig",
    "Trainer",
    "auto_chunk",
    "next_token_loss",
    "reference_predictors",
]


class TrainConfig(Config):
    """Optimisation settings. Defaults are seed 000's Table 2."""

    steps: int = Field(8000, ge=1, le=10_000_000)  # Table 2: 8000 iterations
    batch: int = Field(16, ge=1, le=1_000_000)  # Table 2: batch grid-searched in {16, 50}; A.3.2 uses 16
    seq_len: int = Field(1024, ge=2, le=65536)  # Table 2: grid {512, 1024, 2048}; A.3.1 uses N = 1024
    optimizer: Literal["adamw", "sgd"] = "adamw"  # Table 2: AdamW; A.3.1 (Fig. 3) uses SGD
    lr: float = Field(1e-3, gt=0.0, le=100.0)  # Table 2: learning rate 0.001
    beta1: float = Field(0.9, ge=0.0, lt=1.0)  # Table 2: beta_1 = 0.9
    beta2: float = Field(0.95, ge=0.0, lt=1.0)  # Table 2: beta_2 = 0.95
    weight_decay: float = Field(1e-3, ge=0.0, le=10.0)  # Table 2: 1e-3 (on matrices, nanoGPT convention)
    momentum: float = Field(0.0, ge=0.0, lt=1.0)  # SGD only
    schedule: Literal["cosine", "constant"] = "cosine"  # Table 2: cosine
    warmup_steps: int = Field(0, ge=0)  # not in the seed; 0 = pure cosine from lr
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)  # cosine floor as a fraction of lr (our choice: 0)
    grad_clip: float | None = Field(None, gt=0.0)  # not in the seed; clipped per member when set
    eval_every: int = Field(100, ge=1)  # evaluation on fresh samples every this many steps (and at the end)
    eval_batches: int = Field(8, ge=1, le=100_000)  # fresh batches per evaluation
    log_every: int = Field(10, ge=1)  # training loss (mean since last log) every this many steps
    chunk: PositiveInt | Literal["auto"] = "auto"  # members trained together (>= 1); auto: see auto_chunk()
    checkpoint_every: int | None = Field(None, ge=1)  # save a resumable checkpoint every this many steps
    # Explicit L2 penalty lambda * ||theta||^2 on every trained parameter, added to each member's loss with
    # its gradient (seed 004 Eq. (2)); 0 = none. Unlike weight_decay it acts through the loss, also under Adam.
    l2: float = Field(0.0, ge=0.0, le=100.0)


Probe = Callable[[nn.Module], "dict[str, torch.Tensor]"]


@runtime_checkable
class Ensemble(Protocol):
    """What the trainer reads of a model besides ``nn.Module``'s API: its members' seeds and one member's
    parameters (every tdlab ensemble model has both)."""

    seeds: list[int]

    def member_state(self, e: int) -> dict[str, torch.Tensor]: ...


class DivergenceError(RuntimeError):
    """A member's loss became NaN or infinite. ``result`` holds what was measured until then."""

    def __init__(self, member: int, step: int, result: FitResult) -> None:
        super().__init__(f"loss diverged (non-finite) for member {member} at step {step}")
        self.member, self.step, self.result = member, step, result


class Task(Protocol):
    vocab: int

    def sample(
        self, gens: Sequence[torch.Generator], batch: int, length: int, device: str | torch.device = "cpu"
    ) -> torch.Tensor: ...


@dataclass
class FitResult:
    """What a fit measured. ``rows`` are long-format metrics ``(step, member, name, value)``;
    ``states[i]`` is member ``i``'s final parameters (no member axis).
    ``init_states[i]``: member ``i``'s parameters before the first step, when the trainer records them.
    ``snapshots[step][i]``: member ``i``'s parameters after training step ``step`` (the trainer's
    ``snapshot_steps``)."""

    rows: list[tuple[int, int, str, float]] = field(default_factory=list)
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    wall_time: float = 0.0
    init_states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    snapshots: dict[int, list[dict[str, torch.Tensor]]] = field(default_factory=dict)

    def series(self, name: str, member: int) -> tuple[list[int], list[float]]:
        pts = [(s, v) for s, m, n, v in self.rows if n == name and m == member]
        return [s for s, _ in pts], [v for _, v in pts]


def reference_predictors(task: Task) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The task's reference predictors, ``name -> (tokens (..., T) -> probabilities (..., T, V))``:
    ``task.reference_predictors()`` when the task defines it, else ``{"bayes": task.optimal_probs}``
    when it has a Bayes predictor, else none."""
    if hasattr(task, "reference_predictors"):
        return dict(task.reference_predictors())
    if hasattr(task, "optimal_probs"):
        return {"bayes": task.optimal_probs}
    return {}


# A CPU chunk's output-layer logits, their softmax and gradient stay within this many bytes (a last-level
# cache): an ensemble of wide-vocabulary members whose logits spill it is slower than its members one after
# another (bench/bench_ensembles.py, topics-real: V = 5003, 32 x 64 tokens a member, one thread: 0.71x as one
# ensemble of 8, chunks of 1-2 the fastest). A model with a large activation that is not an output (the
# seed-002 conv tokeniser's full-resolution maps) keeps a chunk's copies of it within the same bytes.
CACHE_BYTES = 32 << 20


def auto_chunk(
    members: int, batch: int, seq_len: int, device: str | torch.device, out_width: int = 0, member_bytes: int = 0
) -> int:
    """Members per chunk. On a GPU, all of them. On a CPU, at most ~128k tokens a chunk (at long
    sequences the attention kernel of a few members already fills the cores); for an objective that
    scores ``out_width`` outputs at every position, at most as many members as keep their logits, softmax
    and gradient (``3 · 4`` bytes each) within :data:`CACHE_BYTES`; and for a model whose largest
    activation is ``member_bytes`` a member for the batch, at most as many as keep those within
    :data:`CACHE_BYTES` (see bench/). The members are then split into that many chunks of equal size
    (within one)."""
    if torch.device(device).type != "cpu":
        return members
    chunk = (1 << 17) // (batch * seq_len)
    if out_width > 0:
        chunk = min(chunk, CACHE_BYTES // (12 * batch * seq_len * out_width))
    if member_bytes > 0:
        chunk = min(chunk, CACHE_BYTES // member_bytes)
    chunks = math.ceil(members / max(1, min(members, chunk)))
    # as many chunks as that bound needs, of equal size: a short last chunk pays a whole step's overhead for
    # few members (icl-avdigits, 8 members, one thread, the cache shared with two other jobs: 4 + 4 are
    # 1.27x the loop, 5 + 3 1.12x)
    return math.ceil(members / chunks)


def _cosine(cfg: TrainConfig) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))

    return factor


class Trainer:
    """Trains ensembles of next-token predictors on fresh samples of a task.

    ``fit(build, seeds, task)`` builds ``build(chunk_seeds)`` for each chunk of member seeds and
    trains it; ``fit_model(model, task)`` trains one already-built ensemble.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        device: str = "cpu",
        progress: bool = True,
        label: str = "",
        checkpoint: Path | None = None,
        objective: Objective | None = None,
        probes: Sequence[Probe] = (),
        probe_every: int = 1,
        snapshot_steps: Sequence[int] = (),
        member_lr: Mapping[int, float] | None = None,
    ) -> None:
        """``objective``: what is learned (default :class:`NextToken`). ``probes``: functions
        ``probe(model) -> {name: (E,) tensor}`` measured before the first step, every ``probe_every`` steps
        and at the end, stored as rows like the losses (e.g. weight norms along training).
        ``snapshot_steps``: steps after which every member's parameters are kept (:attr:`FitResult.snapshots`;
        step 0 = the initialisation). ``member_lr``: a learning rate per member seed (``{seed: lr}``;
        others use ``cfg.lr``), so settings that differ only in learning rate train as one ensemble: every
        step of SGD (with momentum) and Adam/AdamW is linear in the learning rate given the gradient
        history, so member ``e``'s step is scaled by ``lr_e / cfg.lr`` exactly. ``checkpoint``: the ``.json`` file
        of resumable checkpoints (every ``cfg.checkpoint_every``
        steps and after each chunk; tensors beside it in safetensors, see :mod:`tdlab.train.checkpoint`).
        When it exists, :meth:`fit` resumes from it: model, optimiser, schedule, random streams and
        metrics so far, so the run ends with the same numbers as one that was never stopped.
        ``config_hash`` (set by the caller, e.g. the run context) is stored in every checkpoint; a
        checkpoint with another hash is refused. ``live`` (set by the caller, e.g. the run context; default
        ``None``) is called with the rows recorded since its last call, after every evaluation and at the
        end of every step that logged (:mod:`tdlab.train.live`)."""
        self.cfg, self.device, self.progress, self.label = cfg, device, progress, label
        self.live: Callable[[Sequence[tuple[int, int, str, float]]], None] | None = None
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.config_hash: str | None = None
        self.objective = objective if objective is not None else NextToken()
        self.probes, self.probe_every = list(probes), probe_every
        self.member_lr = dict(member_lr or {})
        self.snapshot_steps = sorted({int(k) for k in snapshot_steps if 0 <= int(k) <= cfg.steps})

    def _regime(self, data: Any) -> Any:
        """A data regime (:mod:`tdlab.train.data`): ``data`` itself when it is one, else a stream of the task."""
        if hasattr(data, "bind"):
            return data
        return Stream(data, self.cfg.batch, self.cfg.seq_len, self.cfg.eval_batches, self.objective.extra_length)

    # ------------------------------------------------------------------------------------------
    def fit(self, build: Callable[[list[int]], nn.Module], seeds: Sequence[int], task: Any) -> FitResult:
        """Train one member per seed on ``task`` (a task, streamed, or a data regime such as
        :class:`~tdlab.train.data.FixedDataset`). Returns metrics for members ``0..len(seeds)-1``."""
        seeds = list(seeds)
        chunk = (
            self.cfg.chunk
            if self.cfg.chunk != "auto"
            else auto_chunk(
                len(seeds), self.cfg.batch, self.cfg.seq_len, self.device, self.objective.output_width(task)
            )
        )
        self._all_seeds, self._chunk = seeds, chunk
        result = FitResult()
        resume = self._load_checkpoint(seeds, chunk)
        if resume is not None:
            result.rows, result.states, result.snapshots = resume["rows"], resume["states"], resume["snapshots"]
            at, done = resume["chunk"].get("step"), len(result.states)
            more = (
                f"; members {done + 1}-{min(done + chunk, len(seeds))} continue from step {at} of {self.cfg.steps}"
                if at
                else ""
            )
            sys.stderr.write(
                f"resuming {self.label or 'the fit'}: {done} of {len(seeds)} members finished before{more}\n"
            )
        t0 = time.perf_counter()
        with (
            flush_denormals(self.device),
            ProgressBar(self.cfg.steps * math.ceil(len(seeds) / chunk), self.label, enabled=self.progress) as bar,
        ):
            for start in range(0, len(seeds), chunk):
                if start < len(result.states):
                    bar.advance(self.cfg.steps)  # chunk finished before the interruption
                    continue
                model = build(seeds[start : start + chunk]).to(self.device)
                state = resume["chunk"] if resume is not None and resume["chunk"]["start"] == start else None
                try:
                    self._train(model, task, start, result, bar, state)
                finally:
                    result.wall_time = time.perf_counter() - t0
                with phase("checkpoint"):
                    self._save_checkpoint(seeds, chunk, result, None)
        return result

    def fit_model(self, model: nn.Module, task: Any) -> FitResult:
        """Train an already-built ensemble (no chunking, no resuming)."""
        assert isinstance(model, Ensemble), f"{type(model).__name__} is not an ensemble (seeds, member_state)"
        self._all_seeds, self._chunk, self.checkpoint = list(model.seeds), len(model.seeds), None
        result = FitResult()
        t0 = time.perf_counter()
        with flush_denormals(self.device), ProgressBar(self.cfg.steps, self.label, enabled=self.progress) as bar:
            self._train(model.to(self.device), task, 0, result, bar)
        result.wall_time = time.perf_counter() - t0
        return result

    # ------------------------------------------------------------------------------------------
    def _optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        cfg = self.cfg
        # nanoGPT convention: decay matrices (per-member ndim >= 2), not vectors or scalars.
        decay = [p for p in model.parameters() if p.dim() >= 3]
        no_decay = [p for p in model.parameters() if p.dim() < 3]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        # torch's SGD / AdamW, same numbers, minus their torch._dynamo import (seconds of a small run)
        if cfg.optimizer == "sgd":
            return EagerSGD(groups, lr=cfg.lr, momentum=cfg.momentum)
        return EagerAdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))

    @staticmethod
    def _squared_norm(model: nn.Module) -> torch.Tensor:
        """``(E,)``: every member's ||theta||^2 over its trained parameters (Eq. (2) of seed 004)."""
        # sum() starts at 0: as_tensor returns the (E,) tensor itself (its type, for the checker)
        return torch.as_tensor(
            sum(p.pow(2).reshape(p.shape[0], -1).sum(1) for p in model.parameters() if p.requires_grad)
        )

    def _clip(self, model: nn.Module) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        sq = torch.as_tensor(sum(g.pow(2).reshape(g.shape[0], -1).sum(1) for g in grads))  # the (E,) sum itself
        assert self.cfg.grad_clip is not None  # called only with clipping on
        scale = (self.cfg.grad_clip / (sq.sqrt() + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.reshape(-1, *([1] * (g.dim() - 1))))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, task: Any, gens: Sequence[torch.Generator], batches: int) -> torch.Tensor:
        """Mean test loss per member on ``batches`` fresh batches of a streamed task: ``(E,)``."""
        stream = Stream(task, self.cfg.batch, self.cfg.seq_len, batches, self.objective.extra_length, self.device)
        return self.evaluate_splits(model, stream, gens)[0]["test_loss"]

    @torch.no_grad()
    def evaluate_splits(
        self, model: nn.Module, data: Any, gens: Sequence[torch.Generator]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Every metric of the objective on every evaluation split of a bound data regime, and, on the very
        same batches, the loss of each of the task's reference predictors (:func:`reference_predictors`:
        the Bayes predictor, the unigram law, ...; streamed tasks only).

        End-state claims compare the model with these: a finite evaluation set's own Bayes loss
        deviates from the population entropy rate by more than a claim's tolerance can absorb.
        Returns ``({"{split}_{metric}": (E,)}, {name: (E,)})``, float64, averaged over a split's batches
        weighted by their size.
        """
        was_training = model.training
        model.eval()
        refs = reference_predictors(data.task) if data.task is not None else {}
        metrics: dict[str, torch.Tensor] = {}
        ref_losses: dict[str, torch.Tensor] = {}
        counts: dict[str, float] = {}  # items behind each metric (reference predictors score the test split)
        for split, sample in data.eval_samples(gens):
            batch = self.objective.prepare(sample, gens)
            size = float(batch.inputs.shape[1])
            counts[split] = counts.get(split, 0.0) + size
            for k, v in self.objective.scores(model, batch).items():
                metrics[f"{split}_{k}"] = metrics.get(f"{split}_{k}", 0.0) + v * size
            if split == "test":
                for k, v in self.objective.reference_scores(refs, batch).items():
                    ref_losses[k] = ref_losses.get(k, 0.0) + v * size
        model.train(was_training)
        return (
            {k: v / counts[k.rsplit("_", 1)[0]] for k, v in metrics.items()},
            {k: v / counts["test"] for k, v in ref_losses.items()},
        )

    # ------------------------------------------------------------------------------------------
    # Checkpoints: everything the loop's future depends on, written atomically.

    def _load_checkpoint(self, seeds: list[int], chunk: int) -> dict | None:
        """The progress saved in :attr:`checkpoint` (``None`` when there is none), checked against
        this fit: same seeds, chunk size, training config and run config hash.

        Returns ``{"rows", "states", "chunk"}``; ``chunk`` is the unfinished chunk's snapshot
        (``{"start": -1}`` when every saved chunk had finished).

        Raises:
            CheckpointError: a pickle where the checkpoint should be (never unpickled), a damaged
                checkpoint, or one written by another config or seeds.
        """
        loaded = load_checked(
            self.checkpoint,
            self.config_hash,
            {"seeds": seeds, "chunk_size": chunk, "config": self.cfg.model_dump(mode="json")},
        )
        if loaded is None:
            return None
        meta, tensors = loaded
        where = self.checkpoint
        try:
            return _unpack_checkpoint(meta, tensors, seeds, chunk, self.cfg.steps, self.device)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CheckpointError(f"checkpoint {where} is corrupt: {exc}") from None

    def _save_checkpoint(self, seeds: list[int], chunk: int, result: FitResult, state: dict | None) -> None:
        """Save the fit's progress (finished chunks, and ``state``: the running chunk's snapshot) as
        JSON + safetensors (:func:`tdlab.train.checkpoint.save_checkpoint`)."""
        if self.checkpoint is None:
            return
        meta = {
            "seeds": seeds,
            "chunk_size": chunk,
            "config": self.cfg.model_dump(mode="json"),
            "config_hash": self.config_hash,
            "rows": [list(r) for r in result.rows],
            "finished": len(result.states),
        }
        tensors = {f"states/{i}/{k}": v for i, st in enumerate(result.states) for k, v in st.items()}
        tensors.update(
            {
                f"snapshots/{step}/{i}/{k}": v
                for step, sts in result.snapshots.items()
                for i, st in enumerate(sts)
                for k, v in st.items()
            }
        )
        meta["snapshots"] = {str(step): len(sts) for step, sts in result.snapshots.items()}
        meta["chunk"] = None
        if state is not None:
            meta["chunk"], chunk_tensors = _pack_snapshot(state)
            tensors.update(chunk_tensors)
        save_checkpoint(self.checkpoint, meta, tensors)

    @staticmethod
    def _restore(
        resume: dict, model: nn.Module, opt: torch.optim.Optimizer, sched: Any, gens: dict[str, list[torch.Generator]]
    ) -> None:
        """Load a checkpointed chunk snapshot into the freshly built ``model``, ``opt``, ``sched`` and
        random streams; a snapshot that does not fit them is a :class:`CheckpointError`."""
        own = model.state_dict()
        bad = [
            k
            for k in own
            if k not in resume["model"]
            or resume["model"][k].shape != own[k].shape
            or resume["model"][k].dtype != own[k].dtype
        ]
        if bad or set(resume["model"]) != set(own):
            raise CheckpointError(
                f"checkpoint does not fit the model: parameters {sorted(set(bad) or set(resume['model']) ^ set(own))[:3]}"
            )
        fresh_groups = opt.state_dict()["param_groups"]
        params = [p for g in opt.param_groups for p in g["params"]]  # state ids are positions in this order
        for pid, st in resume["opt"]["state"].items():
            if not 0 <= pid < len(params) or any(
                isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape != params[pid].shape for v in st.values()
            ):
                raise CheckpointError(f"checkpoint does not fit the optimiser: state of parameter {pid}")
        # JSON-held state must have the very structure a fresh optimiser / schedule would save: the
        # schedule's load_state_dict copies every key into the object.
        if not _same_structure(resume["sched"], sched.state_dict()) or not _same_structure(
            [{k: v for k, v in g.items() if k != "params"} for g in resume["opt"]["param_groups"]],
            [{k: v for k, v in g.items() if k != "params"} for g in fresh_groups],
        ):
            raise CheckpointError(
                "checkpoint does not fit the optimiser or schedule: their saved settings differ in form"
            )
        try:
            model.load_state_dict(resume["model"])
            opt.load_state_dict(
                {
                    "state": resume["opt"]["state"],
                    "param_groups": _as_tuples_like(resume["opt"]["param_groups"], fresh_groups),
                }
            )
            sched.load_state_dict(resume["sched"])
            for name, gs in gens.items():
                for g, st in zip(gs, resume[name], strict=True):
                    g.set_state(st)
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise CheckpointError(
                f"checkpoint does not fit the model or optimiser: {' '.join(str(exc).split())[:200]}"
            ) from None

    def _train(
        self, model: nn.Module, task: Any, offset: int, result: FitResult, bar: ProgressBar, resume: dict | None = None
    ) -> None:
        cfg, objective = self.cfg, self.objective
        assert isinstance(model, Ensemble), f"{type(model).__name__} is not an ensemble (seeds, member_state)"
        seeds = model.seeds
        E = len(seeds)
        with phase("data"):
            data = self._regime(task).bind(seeds, self.device)
        train_gens = generators(seeds, Purpose.TRAIN_DATA, self.device)
        eval_gens = generators(seeds, Purpose.EVAL_DATA, self.device)
        opt = self._optimizer(model)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _cosine(cfg))
        model.train()
        params = [p for g in opt.param_groups for p in g["params"]]
        lr_scale = None
        if any(s in self.member_lr for s in seeds):
            lr_scale = torch.tensor([self.member_lr.get(s, cfg.lr) / cfg.lr for s in seeds], device=self.device)

        live, sent = self.live, len(result.rows)

        def stream() -> None:  # the rows recorded since the last call, to the live sink
            nonlocal sent
            assert live is not None  # called only when there is a live sink
            if len(result.rows) > sent:
                live(result.rows[sent:])
                sent = len(result.rows)

        def log_eval(step: int) -> None:
            metrics, refs = self.evaluate_splits(model, data, eval_gens)
            for name, values in metrics.items():
                result.rows.extend((step, offset + e, name, v) for e, v in enumerate(values.tolist()))
            losses = [v for k, t in metrics.items() if k.endswith("_loss") for v in t.tolist()]
            for name, ref in refs.items():  # same batches: the finite-sample reference of end-state claims
                result.rows.extend((step, offset + e, f"test_loss@{name}", v) for e, v in enumerate(ref.tolist()))
            if live is not None:
                stream()
            if "test_loss" in metrics:
                bar.set(test=float(metrics["test_loss"].mean()))
            bad = [i % E for i, v in enumerate(losses) if not math.isfinite(v)]
            if bad:  # e.g. the last update produced NaN weights: the training loss never saw them
                result.states.extend(model.member_state(e) for e in range(E))
                raise DivergenceError(offset + bad[0], step, result)

        def measure(step: int) -> None:
            if self.probes and (step % self.probe_every == 0 or step == cfg.steps):
                with torch.no_grad():
                    for probe in self.probes:
                        for name, values in probe(model).items():
                            result.rows.extend(
                                (step, offset + e, name, float(v)) for e, v in enumerate(values.tolist())
                            )
            if step in self.snapshot_steps:
                result.snapshots.setdefault(step, []).extend(model.member_state(e) for e in range(E))

        running = torch.zeros(E, device=self.device)
        since, first = 0, 1
        if resume is None:
            with phase("evaluation"):
                log_eval(0)
            with phase("probes"):
                measure(0)
        else:
            self._restore(resume, model, opt, sched, {"train_gens": train_gens, "eval_gens": eval_gens})
            running, since, first = resume["running"], resume["since"], resume["step"] + 1
            bar.advance(resume["step"])
        if live is not None:
            stream()

        def snapshot(step: int) -> dict:
            return {
                "start": offset,
                "step": step,
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "sched": sched.state_dict(),
                "train_gens": [g.get_state() for g in train_gens],
                "eval_gens": [g.get_state() for g in eval_gens],
                "running": running.clone(),
                "since": since,
            }

        # Wall-time checkpoints and stops on request (tdlab.train.stopping): only a fit with a checkpoint file.
        policy = stop_policy() if self.checkpoint is not None else None
        last_saved = time.monotonic()
        for step in range(first, cfg.steps + 1):
            with phase("data"):
                batch = objective.prepare(data.train_sample(step, train_gens), train_gens)
            with phase("forward"):
                losses = objective.loss(model, batch)  # (E,)
            finite = torch.isfinite(losses)
            if not bool(finite.all()):
                bad = offset + int((~finite).nonzero()[0, 0])
                result.states.extend(model.member_state(e) for e in range(E))
                raise DivergenceError(bad, step, result)
            with phase("optimiser"):
                opt.zero_grad(set_to_none=True)
            with phase("backward"):
                total = losses.sum() if cfg.l2 == 0 else losses.sum() + cfg.l2 * self._squared_norm(model).sum()
                total.backward()  # members never share gradients: d(sum)/d(theta_e) = dL_e/d(theta_e)
            with phase("optimiser"):
                if cfg.grad_clip is not None:
                    self._clip(model)
                if lr_scale is None:
                    opt.step()
                else:
                    before = [p.detach().clone() for p in params]
                    opt.step()
                    with torch.no_grad():
                        for p, p0 in zip(params, before, strict=True):
                            p.copy_(p0 + lr_scale.reshape(-1, *([1] * (p.dim() - 1))) * (p - p0))
                sched.step()
            with phase("logging"):
                running += losses.detach()
                since += 1
                if step % cfg.log_every == 0 or step == cfg.steps:
                    mean = (running / since).tolist()
                    result.rows.extend((step, offset + e, "train_loss", v) for e, v in enumerate(mean))
                    result.rows.extend((step, offset + e, "lr", float(sched.get_last_lr()[0])) for e in range(E))
                    bar.set(loss=sum(mean) / E)
                    running.zero_()
                    since = 0
            if step % cfg.eval_every == 0 or step == cfg.steps:
                with phase("evaluation"):
                    log_eval(step)
            with phase("probes"):
                measure(step)
            if cfg.checkpoint_every is not None and step % cfg.checkpoint_every == 0 and step < cfg.steps:
                with phase("checkpoint"):
                    self._save_checkpoint(list(self._all_seeds), self._chunk, result, snapshot(step))
            if policy is not None and step < cfg.steps and policy.due(last_saved):
                with phase("checkpoint"):
                    self._save_checkpoint(list(self._all_seeds), self._chunk, result, snapshot(step))
                last_saved = time.monotonic()
                if policy.stop_requested():
                    raise RunStopped(step, self.label)
            with phase("logging"):
                if live is not None:
                    stream()
                bar.advance()
        result.states.extend(model.member_state(e) for e in range(E))


# ------------------------------------------------------------------------------------------------
# Checkpoint contents: a chunk snapshot split into JSON-able scalars and named tensors, and back.


def _pack_snapshot(state: dict) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A running chunk's snapshot as ``(JSON-able meta, tensors)``: model, optimiser tensors, random
    streams (uint8) and the running loss go to the tensor file; the rest stays in JSON."""
    tensors = {f"model/{k}": v for k, v in state["model"].items()}
    opt_meta, opt_tensors = pack_optimizer(state["opt"])
    tensors.update(opt_tensors)
    for name in ("train_gens", "eval_gens"):
        tensors.update({f"{name}/{i}": g for i, g in enumerate(state[name])})
    tensors["running"] = state["running"]
    meta = {
        "start": state["start"],
        "step": state["step"],
        "since": state["since"],
        "sched": state["sched"],
        "opt": opt_meta,
        "members": len(state["train_gens"]),
    }
    return meta, tensors


def _unpack_checkpoint(
    meta: dict[str, Any], tensors: dict[str, torch.Tensor], seeds: list[int], chunk: int, steps: int, device: str
) -> dict:
    """``{"rows", "states", "chunk"}`` from a loaded checkpoint, every part checked against the fit
    (member counts, chunk boundaries, step range, tensor groups). Raises ``ValueError`` (or
    ``KeyError``/``TypeError``) naming what is wrong."""
    rows = unpack_rows(meta["rows"])
    finished = meta["finished"]
    if not is_int(finished) or not 0 <= finished <= len(seeds) or (finished % chunk and finished != len(seeds)):
        raise ValueError(f"'finished' must be a whole number of chunks of {chunk} members, at most {len(seeds)}")
    states = [tensor_group(tensors, f"states/{i}/") for i in range(finished)]
    if any(not st or st.keys() != states[0].keys() for st in states):
        raise ValueError("finished members' states are missing or differ in their parameters")
    states = [{k: v.to(device) for k, v in st.items()} for st in states]
    used = {f"states/{i}/{k}" for i, st in enumerate(states) for k in st}
    counts = meta.get("snapshots", {})
    if not isinstance(counts, dict) or not all(
        k.isdigit() and is_int(n) and 0 <= n <= len(seeds) for k, n in counts.items()
    ):
        raise ValueError("'snapshots' must map steps to member counts")
    snapshots = {
        int(k): [{n: v.to(device) for n, v in tensor_group(tensors, f"snapshots/{k}/{i}/").items()} for i in range(n)]
        for k, n in counts.items()
    }
    used |= {f"snapshots/{k}/{i}/{n}" for k, sts in snapshots.items() for i, st in enumerate(sts) for n in st}
    snap = meta["chunk"]
    if snap is None:
        if set(tensors) != used:
            raise ValueError("tensors of an unfinished chunk without its snapshot")
        return {"rows": rows, "states": states, "snapshots": snapshots, "chunk": {"start": -1}}
    members = len(seeds[finished : finished + chunk])
    if (
        snap["start"] != finished
        or snap["members"] != members
        or not is_int(snap["step"])
        or not 1 <= snap["step"] < steps
    ):
        raise ValueError("the unfinished chunk's start, members or step do not fit the fit")
    if not is_int(snap["since"]) or snap["since"] < 0 or not isinstance(snap["sched"], dict):
        raise ValueError("'since' must be a count, 'sched' an object")
    gens = {name: [tensors[f"{name}/{i}"] for i in range(members)] for name in ("train_gens", "eval_gens")}
    if any(g.dtype != torch.uint8 or g.dim() != 1 for gs in gens.values() for g in gs):
        raise ValueError("random stream states must be 1-D uint8 tensors")
    running = tensors["running"]
    if running.shape != (members,) or not running.is_floating_point():
        raise ValueError(f"'running' must be a float tensor of {members} values")
    opt = unpack_optimizer(snap["opt"], tensors)
    model = tensor_group(tensors, "model/")
    used |= {f"model/{k}" for k in model} | {f"{n}/{i}" for n in gens for i in range(members)} | {"running"}
    used |= {f"opt/{pid}/{k}" for pid, st in opt["state"].items() for k, v in st.items() if isinstance(v, torch.Tensor)}
    if set(tensors) != used:
        raise ValueError(f"unexpected tensors {sorted(set(tensors) - used)[:3]}")
    return {
        "rows": rows,
        "states": states,
        "snapshots": snapshots,
        "chunk": {
            "start": finished,
            "step": snap["step"],
            "since": snap["since"],
            "sched": snap["sched"],
            "opt": opt,
            "model": model,
            **gens,
            "running": running.to(device),
        },
    }


def _as_tuples_like(groups: list[dict[str, Any]], fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Saved param groups with the lists JSON made of tuples (AdamW's ``betas``) tuples again, as in ``fresh``."""
    if len(groups) != len(fresh):
        raise ValueError(f"{len(groups)} param groups saved, the optimiser has {len(fresh)}")
    return [
        {k: tuple(v) if isinstance(f.get(k), tuple) and isinstance(v, list) else v for k, v in g.items()}
        for g, f in zip(groups, fresh, strict=True)
    ]


def _same_structure(saved: Any, fresh: Any) -> bool:
    """True when ``saved`` (from JSON) has the form of ``fresh``: same keys, same lengths, numbers
    where numbers are, booleans, strings and None where they are (tuples may come back as lists)."""
    if isinstance(fresh, dict):
        return (
            isinstance(saved, dict)
            and saved.keys() == fresh.keys()
            and all(_same_structure(saved[k], fresh[k]) for k in fresh)
        )
    if isinstance(fresh, (list, tuple)):
        return isinstance(saved, list) and len(saved) == len(fresh) and all(map(_same_structure, saved, fresh))
    if isinstance(fresh, bool) or fresh is None or isinstance(fresh, str):
        return type(saved) is type(fresh)
    if isinstance(fresh, (int, float)):
        return isinstance(saved, (int, float)) and not isinstance(saved, bool)
    return False
