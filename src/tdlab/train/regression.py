"""Training the ensemble-first linear-attention models of seed 002 on the in-context regression loss.

Seed paper: Barnfield, Sen & Sur, "Multi-layer cross-attention is provably optimal for multi-modal
in-context learning" (arXiv:2602.04872), Sec. 6 (the losses), App. H (the training protocol).

Two objectives (Sec. 6, "Training setup"):

* ``"empirical"``: ``l_{N,L_tr}(theta) = (1/N) sum_j (y_q^(j) - y_hat_q^(j))^2`` on ``N`` prompts of
  context length ``L_tr``, drawn once per member and kept fixed (App. H: ``N = 2000``, ``L_tr = 100``,
  "standard gradient descent").
* ``"population"``: ``l(theta) = lim_{L_tr -> inf} E[(y_q - y_hat_q)^2]``, the loss of Thms 6.2 and 6.3,
  by Monte Carlo: every step draws fresh prompts ``(m, zeta, x_q, y_q)`` and evaluates the model
  at infinite context, where ``X X^T / L -> Lambda = I + m m^T`` and ``X y / L -> zeta m`` (App. A.3).

Why this is exact and fast: sufficient statistics
-------------------------------------------------
Without LayerNorm, every model here sees a prompt only through ``Lambda_hat = X^T X / L``,
``c = X^T y / L``, ``y^T y / L`` and the query (tokens as rows; App. C): the CA layers compute
``F_t = X P_t`` with ``P_t`` built from ``Lambda_hat`` (Eq. 5.2, Lemma C.2), and the frozen App. C.1
readout is ``y_hat = c^T P_T x_q`` (Lemma C.1). :class:`tdlab.theory.icl_stats.PromptStats` holds those
statistics (drawn from any task with a ``sample`` method, so this module knows no task), and :func:`predict`
evaluates a model from them:

* scalar weights (``param`` one / two / untied; cross- or self-attention): ``P_t`` is a polynomial
  ``p_t(Lambda_hat)``, so with ``Lambda_hat = sum_k lambda_k u_k u_k^T``,
  ``y_hat = sum_k (u_k . c)(u_k . x_q) p_T(lambda_k)`` with the scalar recursion
  ``p_t = p_{t-1} (1 + beta_t lambda) + alpha_t`` (cross, Eq. C.2) or
  ``p_t = p_{t-1} + beta_t lambda p_{t-1}^3 + alpha_t`` (deep LSA, Eq. G.2); tied cross-attention
  uses the closed form ``p_T = p_0 q^T + alpha (q^T - 1)/(beta lambda)``, ``q = 1 + beta lambda``
  (:func:`tdlab.theory.icl_minimisers.tied_power_sum`).
  Cost O(N d) per step instead of O(N d^3 T).
* diagonal / full cross-attention weights: ``P_T x_q`` by the vector recursion
  ``v_T = x_q``, ``v_{t-1} = v_t + Lambda_hat W^V_t{}^T v_t``, ``y_hat = c . P_0 v_0 + sum_t (W^S_t c) . v_t``
  (O(N d^2 T) instead of O(N d^3 T)).
* single-layer LSA (Eq. 4.2, learned ``W^PV, W^KQ``): ``y_hat = (p^T G k + v_q s_q / L)``, where
  ``G`` is the (d+1)x(d+1) second-moment matrix of the tokens ``[x_i; y_i]``.

At ``L = inf`` the query term of the LSA readout vanishes. Pre-LN models and the learned readout
of ``LCA`` are not functions of these statistics; they run through ``model.forward`` on raw prompts.
``tests/train/test_regression.py`` checks every path against ``model.forward``.

Optimisers
----------
``"gd"``: full-batch gradient descent (App. H) with a per-member step size; with ``backtrack``, a
member whose loss rose is returned to its previous point and its step halved (and grown by ``grow``
after each accepted step): the fixed points are those of plain gradient descent, but no step size
has to be tuned per depth (the curvature of the one-parameter loss at ``alpha = 0`` is ~4e6 at
``T = 50`` against ~20 at its minimiser). ``"adam"``: Adam, elementwise and so per member, the
default for the Monte-Carlo population loss, whose fresh batches make loss comparisons noisy.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from tdlab.config import Config
from tdlab.models.linear_attention import LCA, LSA
from tdlab.progress import ProgressBar
from tdlab.seeding import Purpose, generators
from tdlab.theory.icl import bayes_predictor
from tdlab.theory.icl_minimisers import tied_power_sum
from tdlab.theory.icl_stats import PromptSampler, PromptStats, RawPrompts, population_stats, sample_stats
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
from tdlab.train.optim import EagerAdam
from tdlab.train.phases import phase
from tdlab.train.stopping import RunStopped
from tdlab.train.stopping import current as stop_policy
from tdlab.train.trainer import DivergenceError, FitResult

__all__ = [
    "RegressionConfig",
    "RegressionTrainer",
    "error_summary",
    "fast_path",
    "load_member_states",
    "member_state",
    "predict",
    "predict_any",
    "query_errors",
]

Dtype = Literal["float64", "float32"]


def _dtype(name: str) -> torch.dtype:
    return torch.float64 if name == "float64" else torch.float32


# ---------------------------------------------------------------------------------------------
# Predictions from statistics


def fast_path(model: nn.Module) -> str | None:
    """Which statistics path :func:`predict` uses for ``model``: ``"lsa"``, ``"spectral"``,
    ``"recursion"``, or ``None`` when the model needs raw prompts (pre-LN, learned LCA readout,
    self-attention with matrix weights)."""
    if isinstance(model, LSA):
        return "lsa"
    if not isinstance(model, LCA) or model.pre_ln or isinstance(model.W_PV, nn.Parameter):
        return None
    if model.param in ("one", "two", "untied"):
        return "spectral"
    return "recursion" if model.attention == "cross" else None


def _spectral_poly(model: LCA, lam: Tensor) -> Tensor:
    """``p_T(lambda)`` for every member: ``lam`` (E|1, N, K) -> (E, N, K)."""
    E = model.n_members
    p0 = 1.0 if model.f0 == "x" else 0.0
    inj = 1.0 if model.injection else 0.0

    def w(v: Tensor) -> Tensor:
        return v.reshape(E, 1, 1)

    if model.param in ("one", "two") and model.attention == "cross":
        a = model.alpha
        b = -a if model.param == "one" else model.beta
        x = w(b) * lam
        q = 1.0 + x
        out = inj * w(a) * tied_power_sum(q, x, model.depth)
        return out + p0 * q**model.depth if p0 else out
    p = torch.full_like(lam.expand(E, *lam.shape[1:]), p0)
    for t in range(model.depth):
        a_t, b_t = model.layer_weights(t)
        # cross attention multiplies; deep LSA, Eq. G.2: F F^T F / L -> p^3 lambda
        p = p * (1.0 + w(b_t) * lam) if model.attention == "cross" else p + w(b_t) * lam * p**3
        if model.injection:
            p = p + w(a_t)
    return p


def _apply_t(w: Tensor, v: Tensor) -> Tensor:
    """``W^T v`` per member for ``W`` scalar (E,), diagonal (E, d) or full (E, d, d); v (E, N, d)."""
    if w.dim() == 1:
        return v * w[:, None, None]
    if w.dim() == 2:
        return v * w[:, None, :]
    return v @ w  # rows: (W^T v)_i = sum_j W_ji v_j


def _apply(w: Tensor, v: Tensor) -> Tensor:
    """``W v`` per member; v (E|1, N, d)."""
    if w.dim() == 1:
        return v * w[:, None, None]
    if w.dim() == 2:
        return v * w[:, None, :]
    return v @ w.transpose(-1, -2)


def _recursion_predict(model: LCA, stats: PromptStats) -> Tensor:
    """``c^T P_T x_q`` by the vector recursion (cross-attention, any weight shape)."""
    E = model.n_members
    gram, c, xq = stats.gram, stats.c, stats.x_query
    v = xq.expand(E, *xq.shape[1:])
    out = torch.zeros(E, xq.shape[1], dtype=xq.dtype, device=xq.device)
    for t in range(model.depth, 0, -1):  # layer t uses layer_weights(t - 1); v = v_t here
        w_s, w_v = model.layer_weights(t - 1)
        if model.injection:
            out = out + (_apply(w_s, c) * v).sum(-1)  # (W^S_t c) . v_t
        v = v + (gram @ _apply_t(w_v, v)[..., None])[..., 0]  # v_{t-1} = (I + Lambda_hat W^V_t^T) v_t
    if model.f0 == "x":
        out = out + (c * v).sum(-1)
    return out


def _lsa_predict(model: LSA, stats: PromptStats) -> Tensor:
    """Eq. (4.2) read out at (d+1, L+1) from second moments: ``p^T G k + v_q s_q / L``."""
    d = stats.shape[-1]
    kx = stats.x_query @ model.W_KQ[..., :, :d].transpose(-1, -2)  # W^KQ [x_q; 0], (E, N, d+1)
    p = model.W_PV[:, d, :]  # last row of W^PV, (E, d+1)
    px, py = p[:, None, :d], p[:, None, d]
    # p^T G k with G = [[gram, c], [c^T, yy]]
    gk_x = (stats.gram @ kx[..., :d, None])[..., 0] + stats.c * kx[..., d:]
    gk_y = (stats.c * kx[..., :d]).sum(-1) + stats.yy * kx[..., d]
    out = (px * gk_x).sum(-1) + py * gk_y
    if not stats.population:
        out = out + (stats.x_query * px).sum(-1) * (stats.x_query * kx[..., :d]).sum(-1) / stats.L
    return out


def predict(model: nn.Module, stats: PromptStats) -> Tensor:
    """Predictions (E, N) of ``model`` on prompts given by their statistics (equal to
    ``model(X, y, x_query)`` on the prompts, and to its ``L -> inf`` limit for population stats).

    Raises:
        ValueError: the model needs raw prompts (:func:`fast_path` is ``None``).
    """
    path = fast_path(model)
    if path == "lsa":
        return _lsa_predict(model, stats)  # type: ignore[arg-type]
    if path == "spectral":
        lam, a = stats.spectral()
        return (a * _spectral_poly(model, lam)).sum(-1)  # type: ignore[arg-type]
    if path == "recursion":
        return _recursion_predict(model, stats)  # type: ignore[arg-type]
    raise ValueError(
        f"{type(model).__name__} with these options needs raw prompts (pre-LN, learned readout or "
        "matrix-weight self-attention); use model(X, y, x_query)"
    )


Prompts = PromptStats | RawPrompts


def predict_any(model: nn.Module, data: Prompts) -> Tensor:
    """:func:`predict` on statistics, ``model.forward`` on raw prompts (e.g. a ``MultiModalBatch``)."""
    if not isinstance(data, PromptStats):
        return model(data.X, data.y, data.x_query)
    return predict(model, data)


def bayes_of(data: Prompts) -> Tensor:
    """The paper's ``y_q^Bayes = <w, x_q>`` of each prompt (Eq. 4.1)."""
    return data.bayes if isinstance(data, PromptStats) else bayes_predictor(data.m, data.zeta, data.x_query)


def query_errors(model: nn.Module, data: Prompts) -> tuple[Tensor, Tensor]:
    """``(y_q - y_hat)^2`` and ``(y_hat - y_q^Bayes)^2`` per prompt, each (E, N)."""
    y_hat = predict_any(model, data)
    return (data.y_query - y_hat) ** 2, (y_hat - bayes_of(data)) ** 2


QUANTILES = {"q10": 0.1, "q25": 0.25, "median": 0.5, "q75": 0.75, "q90": 0.9}


def error_summary(err: Tensor) -> dict[str, Tensor]:
    """Per-member mean and quantiles of per-prompt errors (E, N): each (E,)."""
    e = err.detach().double()
    out = {"mean": e.mean(-1)}
    qs = torch.quantile(e, torch.tensor(list(QUANTILES.values()), dtype=e.dtype, device=e.device), dim=-1)
    out.update({k: qs[i] for i, k in enumerate(QUANTILES)})
    return out


# ---------------------------------------------------------------------------------------------
# Training


class RegressionConfig(Config):
    """Gradient-descent training on ``l_{N,L_tr}`` or the population loss. Defaults: App. H."""

    objective: Literal["empirical", "population"] = "empirical"  # App. H: l_{N,L_tr}; Sec. 6: l (L_tr -> inf)
    prompts: int = Field(2000, ge=1, le=10_000_000)  # App. H: N = 2000 (population: fresh prompts per step)
    context: int = Field(100, ge=1, le=1_000_000)  # App. H: L_tr = 100 (unused by the population loss)
    steps: int = Field(2000, ge=0, le=10_000_000)  # not stated in the seed
    optimizer: Literal["gd", "adam"] = "gd"  # App. H: "standard gradient descent"
    lr: float = Field(1e-3, gt=0.0, le=1e6)  # initial step size (per member with backtracking)
    backtrack: bool = True  # GD: undo a step that raised a member's loss and halve its step size
    grow: float = Field(1.2, ge=1.0, le=10.0)  # GD with backtracking: step-size growth after an accepted step
    # GD: heavy-ball momentum (0 = plain GD). With backtracking a rejected step also zeroes the member's
    # velocity ("adaptive restart"); the fixed points are still those of gradient descent.
    momentum: float = Field(0.0, ge=0.0, lt=1.0)
    schedule: Literal["constant", "cosine"] = "constant"  # cosine: lr decays to 0 (Adam on the population loss)
    grad_tol: float | None = Field(1e-6, gt=0.0)  # stop once every member's gradient norm is below this
    # GD with backtracking: stop once every member's step size fell below lr * stall (no decrease left at
    # floating-point resolution)
    stall: float = Field(1e-9, ge=0.0, lt=1.0)
    # GD: the first step size of each member. "fixed": ``lr``. "armijo" (not in the seed): ``lr`` halved
    # until the first step decreases the member's loss by at least 1e-4 * step * |grad|^2 (at most
    # ``max_halvings`` times), so a start whose curvature is far above 1/lr (App. H's full matrices at
    # sigma_init = 0.1: training loss ~1e11) takes a step that fits it; the stall criterion is then
    # relative to that first step. The fixed points are those of gradient descent either way.
    initial_step: Literal["fixed", "armijo"] = "fixed"
    max_halvings: int = Field(200, ge=0, le=1000)
    resample: bool = False  # population loss: fresh prompts every step (SGD/Adam) instead of one fixed MC sample
    # "response": the paper's (y_q - y_hat)^2. "bayes": (y_q^Bayes - y_hat)^2, which differs from it by the
    # query noise only: the same population loss up to the constant Bayes risk and the same population
    # gradient, without the variance of the noise term (a control variate for Monte-Carlo estimates of l).
    target: Literal["response", "bayes"] = "response"
    eval_prompts: int = Field(1000, ge=1, le=10_000_000)  # Figs. 5-6: 1000 test prompts
    eval_every: int = Field(500, ge=1)  # test loss on fixed fresh prompts every this many steps (and at the end)
    log_every: int = Field(50, ge=1)  # train loss, step size, gradient norm and scalar parameters
    dtype: Dtype = "float64"

    @model_validator(mode="after")
    def _check(self) -> RegressionConfig:
        if self.objective == "population" and self.resample and self.optimizer == "gd" and self.backtrack:
            raise ValueError(
                "backtracking compares losses between steps: it needs fixed prompts (resample=false) "
                "or optimizer=adam / backtrack=false"
            )
        return self


class RegressionTrainer:
    """``fit(build, seeds, task)``: build the ensemble ``build(seeds)`` and train every member on its own
    prompts (``Purpose.TRAIN_DATA`` stream of its seed), testing on fixed fresh prompts
    (``Purpose.EVAL_DATA``) at the training context length (population: at infinite context).

    Metrics rows ``(step, member, name, value)``: ``train_loss`` (the objective at the current point),
    ``lr``, ``grad_norm``, ``accepted_steps`` (steps taken so far; GD with backtracking rejects steps
    that raised the loss), ``alpha``/``beta`` (tied scalar models), ``test_loss`` and ``test_excess``
    (mean ``(y_hat - y^Bayes)^2``; both at step 0, every ``eval_every`` steps and at the last step).
    ``states[i]`` is member ``i``'s final parameters, ``init_states[i]`` its initial ones. Training stops
    early once every member's gradient norm is below ``grad_tol`` (or, with backtracking, once no
    member can decrease its loss any more); the last logged step says when.

    Args:
        cache: a dict shared by trainers of one run: prompts drawn for the same seeds, objective,
            ``N`` and ``L`` are drawn once (every arm of an experiment trains on the same prompts).
    ``checkpoint``: the ``.json`` file of resumable checkpoints (tensors beside it in safetensors, see
    :mod:`tdlab.train.checkpoint`; set by :meth:`RunContext.fit`, or by an experiment that calls
    :meth:`fit_model` itself). With one, a fit inside :func:`tdlab.train.stopping.stopping` saves a checkpoint
    every ``every_s`` seconds of wall time and, once a stop is requested (SIGTERM, Ctrl-C, a batch's
    ``--until``), after the step it is in, then raises :class:`~tdlab.train.stopping.RunStopped`; a finished fit
    saves its end point too. A checkpoint holds everything the loop's future depends on: the parameters,
    the GD step sizes, stall floor, accepted-step counters, momentum, the loss and gradients at the current
    point (the last accepted one, with backtracking), Adam's moments, the resampling generators, the step
    and the metric rows so far; when the file exists, :meth:`fit_model` continues from it and ends with the
    numbers of a fit never stopped (bit for bit on the CPU). ``config_hash`` (set by the caller, e.g. the
    run context) is stored in every checkpoint; a checkpoint of another run config, training config, seeds
    or initial parameters is refused (:class:`~tdlab.train.checkpoint.CheckpointError`). ``live`` (default
    ``None``; set by :meth:`RunContext.fit`) is called with the
    rows recorded since its last call, after every evaluation and every logged step (:mod:`tdlab.train.live`).
    """

    def __init__(
        self,
        cfg: RegressionConfig,
        device: str = "cpu",
        progress: bool = True,
        label: str = "",
        cache: dict | None = None,
        checkpoint: Path | None = None,
    ) -> None:
        self.cfg, self.device, self.progress, self.label = cfg, device, progress, label
        self.checkpoint: Path | None = Path(checkpoint) if checkpoint is not None else None
        self.config_hash: str | None = None
        self.live: Callable[[Sequence[tuple[int, int, str, float]]], None] | None = None
        self.cache = cache if cache is not None else {}

    def data(
        self, task: PromptSampler, seeds: Sequence[int], purpose: str, n: int, *, fresh: bool = False
    ) -> PromptStats:
        """Prompts of the configured objective for ``seeds`` (cached unless ``fresh``)."""
        cfg = self.cfg
        key = (task, tuple(seeds), purpose, n, cfg.objective, cfg.context, cfg.dtype, str(self.device))
        if not fresh and key in self.cache:
            return self.cache[key]
        gens = generators(seeds, purpose, self.device)
        if cfg.objective == "population":
            out = population_stats(task, gens, n, dtype=_dtype(cfg.dtype), device=self.device)
        else:
            out = sample_stats(task, gens, n, cfg.context, dtype=_dtype(cfg.dtype), device=self.device)
        if not fresh:
            self.cache[key] = out
        return out

    def fit(self, build: Callable[[list[int]], nn.Module], seeds: Sequence[int], task: PromptSampler) -> FitResult:
        seeds = list(seeds)
        model = build(seeds).to(device=self.device, dtype=_dtype(self.cfg.dtype))
        return self.fit_model(model, task, seeds)

    def fit_model(
        self,
        model: nn.Module,
        task: PromptSampler,
        seeds: Sequence[int],
        *,
        train: Prompts | None = None,
        test: Prompts | None = None,
    ) -> FitResult:
        """Train ``model`` (its members = ``seeds``). ``train``/``test``: prompts to use instead of the
        members' own draws (statistics, or raw batches for models without a fast path; a member axis
        of size 1 is shared by all members). With :attr:`checkpoint` set, saves resumable checkpoints and
        stops on request, and continues from an existing checkpoint (see the class); the caller passes the
        same freshly initialised ``model`` and the same prompts again."""
        cfg, seeds = self.cfg, list(seeds)
        E = len(seeds)
        t0 = time.perf_counter()
        result = FitResult(init_states=[member_state(model, e) for e in range(E)])
        params = [p for p in model.parameters() if p.requires_grad]
        if train is None and fast_path(model) is None:
            raise ValueError("this model needs raw prompts (no fast path): pass train= and test= batches")
        resample = cfg.objective == "population" and cfg.resample and train is None
        with phase("data"):
            if train is None and not resample:
                train = self.data(task, seeds, Purpose.TRAIN_DATA, cfg.prompts)
            if test is None:
                test = self.data(task, seeds, Purpose.EVAL_DATA, cfg.eval_prompts)
        train_gens = generators(seeds, Purpose.TRAIN_DATA, self.device) if resample else []

        def batch() -> Prompts:
            if resample:
                with phase("data"):
                    return population_stats(task, train_gens, cfg.prompts, dtype=_dtype(cfg.dtype), device=self.device)
            return train  # type: ignore[return-value]

        def loss_and_grad(data: Prompts) -> tuple[Tensor, list[Tensor]]:
            with phase("forward"):
                target = data.y_query if cfg.target == "response" else bayes_of(data)
                losses = ((target - predict_any(model, data)) ** 2).mean(-1)  # (E,)
            with phase("backward"):
                grads = torch.autograd.grad(losses.sum(), params, allow_unused=True)  # members never share gradients
            return losses.detach(), [
                torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)
            ]

        def member_norm(gs: list[Tensor]) -> Tensor:
            # sum() starts at 0: as_tensor returns the (E,) tensor itself (its type, for the checker)
            return torch.sqrt(torch.as_tensor(sum(g.detach().reshape(E, -1).pow(2).sum(1) for g in gs)))

        live, sent = self.live, 0

        def stream() -> None:  # the rows recorded since the last call, to the live sink
            nonlocal sent
            if live is not None and len(result.rows) > sent:
                live(result.rows[sent:])
                sent = len(result.rows)

        def log_eval(step: int) -> None:
            with phase("evaluation"), torch.no_grad():
                mse, exc = query_errors(model, test)
            result.rows.extend((step, e, "test_loss", v) for e, v in enumerate(mse.mean(-1).tolist()))
            result.rows.extend((step, e, "test_excess", v) for e, v in enumerate(exc.mean(-1).tolist()))
            stream()

        def log_train(step: int, loss: Tensor, lr: Tensor, gnorm: Tensor) -> None:
            rows = [("train_loss", loss), ("lr", lr), ("grad_norm", gnorm), ("accepted_steps", accepted)]
            if isinstance(model, LCA) and model.param in ("one", "two"):
                rows.append(("alpha", model.alpha.detach()))
                rows.append(("beta", (-model.alpha if model.param == "one" else model.beta).detach()))
            for name, vals in rows:
                result.rows.extend((step, e, name, float(v)) for e, v in enumerate(vals.tolist()))
            stream()

        def check_finite(step: int, loss: Tensor) -> None:
            bad = (~torch.isfinite(loss)).nonzero()
            if bad.numel():
                result.states = [member_state(model, e) for e in range(E)]
                result.wall_time = time.perf_counter() - t0
                raise DivergenceError(int(bad[0, 0]), step, result)

        def shape(v: Tensor, p: Tensor) -> Tensor:
            return v.reshape(E, *([1] * (p.dim() - 1)))

        dt = params[0].dtype if params else _dtype(cfg.dtype)
        lr = torch.full((E,), cfg.lr, dtype=dt, device=self.device)
        opt = EagerAdam(params, lr=cfg.lr) if cfg.optimizer == "adam" else None  # torch's Adam, no torch._dynamo import
        backtrack = opt is None and cfg.backtrack

        def factor(step: int) -> float:
            return 1.0 if cfg.schedule == "constant" else 0.5 * (1 + math.cos(math.pi * step / max(1, cfg.steps)))

        accepted = torch.zeros(E, dtype=dt, device=self.device)  # steps taken per member
        resume = self._load_checkpoint(model, seeds, params, opt, train_gens, result.init_states, lr)
        if resume is None:
            log_eval(0)
            loss, grads = loss_and_grad(batch())
            check_finite(0, loss)
            if backtrack and cfg.initial_step == "armijo":
                lr = self._armijo(model, params, grads, loss, lr, batch(), cfg, shape)
            lr_floor = lr * cfg.stall  # a member whose step fell below this has no decrease left
            log_train(0, loss, lr, member_norm(grads))
            velocity = [torch.zeros_like(p) for p in params]  # GD momentum
            first = 1
        else:  # model, optimiser and generators were restored; the rows streamed before are not sent again
            result.rows, sent = resume["rows"], len(resume["rows"])
            lr, lr_floor, accepted, loss = resume["lr"], resume["lr_floor"], resume["accepted"], resume["loss"]
            grads, velocity, first = resume["grads"], resume["velocity"], resume["step"] + 1
            where = "finished" if resume["finished"] else f"continues from step {resume['step']} of {cfg.steps}"
            sys.stderr.write(f"resuming {self.label or 'the fit'}: {where}\n")
            if resume["finished"]:
                result.states = [member_state(model, e) for e in range(E)]
                result.wall_time = time.perf_counter() - t0
                return result
        prev = ([p.detach().clone() for p in params], loss, grads)  # last accepted point (GD with backtracking)

        def save(step: int, finished: bool = False) -> None:
            """Everything the loop's future depends on, as a checkpoint (:meth:`_load_checkpoint` reads it)."""
            if self.checkpoint is None:
                return
            meta: dict[str, Any] = {
                "kind": "regression",
                "seeds": seeds,
                "config": cfg.model_dump(mode="json"),
                "config_hash": self.config_hash,
                "step": step,
                "finished": finished,
                "rows": [list(r) for r in result.rows],
                "opt": None,
            }
            tensors = {
                f"init/{k}": torch.stack([s[k] for s in result.init_states]) for k, _ in model.named_parameters()
            }
            tensors.update({f"model/{k}": v for k, v in model.state_dict().items()})
            tensors.update({"lr": lr, "lr_floor": lr_floor, "accepted": accepted, "loss": loss})
            tensors.update({f"grads/{i}": g for i, g in enumerate(grads)})
            tensors.update({f"velocity/{i}": v for i, v in enumerate(velocity)})
            tensors.update({f"train_gens/{i}": g.get_state() for i, g in enumerate(train_gens)})
            if opt is not None:
                meta["opt"], opt_tensors = pack_optimizer(opt.state_dict())
                tensors.update(opt_tensors)
            with phase("checkpoint"):
                save_checkpoint(self.checkpoint, meta, tensors)

        # Wall-time checkpoints and stops on request (tdlab.train.stopping): only a fit with a checkpoint file.
        policy = stop_policy() if self.checkpoint is not None else None
        last_saved, end = time.monotonic(), first - 1
        with ProgressBar(cfg.steps, self.label, enabled=self.progress) as bar:
            bar.advance(first - 1)
            for step in range(first, cfg.steps + 1):
                end = step
                with phase("optimiser"):
                    if opt is not None:  # Adam on (loss, grads) at the current point
                        for p, g in zip(params, grads, strict=True):
                            p.grad = g
                        for group in opt.param_groups:
                            group["lr"] = cfg.lr * factor(step - 1)
                        opt.step()
                    else:
                        with torch.no_grad():
                            for p, g, v in zip(params, grads, velocity, strict=True):
                                v.mul_(cfg.momentum).sub_(shape(lr * factor(step - 1), p) * g)
                                p.add_(v)
                loss, grads = loss_and_grad(batch())
                if backtrack:
                    # Reject members whose loss rose (or is not finite): back to the last accepted point
                    # with half the step; accepted members keep the new point and grow their step.
                    worse = ~(loss <= prev[1])
                    with torch.no_grad():
                        lr = torch.where(worse, lr * 0.5, lr * cfg.grow)
                        for p, p_old, v in zip(params, prev[0], velocity, strict=True):
                            p.copy_(torch.where(shape(worse, p), p_old, p))
                            v.masked_fill_(shape(worse, v).expand_as(v), 0.0)
                    loss = torch.where(worse, prev[1], loss)
                    accepted = accepted + (~worse).to(accepted.dtype)
                    grads = [torch.where(shape(worse, g), g_old, g) for g, g_old in zip(grads, prev[2], strict=True)]
                    prev = ([p.detach().clone() for p in params], loss, grads)
                else:
                    check_finite(step, loss)
                    accepted = accepted + 1
                gnorm = member_norm(grads)
                done = cfg.grad_tol is not None and bool((gnorm <= cfg.grad_tol).all())
                done = done or (backtrack and bool((lr < lr_floor).all()))
                if step % cfg.log_every == 0 or step == cfg.steps or done:
                    log_train(step, loss, lr if opt is None else torch.full_like(lr, cfg.lr * factor(step)), gnorm)
                    bar.set(loss=float(loss.mean()))
                if step % cfg.eval_every == 0 or step == cfg.steps or done:
                    log_eval(step)
                bar.advance()
                if done:
                    break
                if policy is not None and step < cfg.steps and policy.due(last_saved):
                    save(step)
                    last_saved = time.monotonic()
                    if policy.stop_requested():
                        raise RunStopped(step, self.label)
        save(end, finished=True)
        result.states = [member_state(model, e) for e in range(E)]
        result.wall_time = time.perf_counter() - t0
        return result

    def _load_checkpoint(
        self,
        model: nn.Module,
        seeds: list[int],
        params: Sequence[Tensor],
        opt: torch.optim.Optimizer | None,
        train_gens: list[torch.Generator],
        init: list[dict[str, Tensor]],
        lr: Tensor,
    ) -> dict[str, Any] | None:
        """The progress saved in :attr:`checkpoint` (``None`` when there is none), checked against this fit
        (run config hash, training config, seeds, initial parameters, shapes) and loaded into ``model``,
        ``opt`` and ``train_gens``. Returns the loop's other state: ``step``, ``finished``, ``rows``, ``lr``,
        ``lr_floor``, ``accepted``, ``loss`` (each like ``lr``), ``grads`` and ``velocity`` (like ``params``).

        Raises:
            CheckpointError: a pickle where the checkpoint should be (never unpickled), a damaged
                checkpoint, or one written by another run config, training config, seeds or model.
        """
        loaded = load_checked(
            self.checkpoint,
            self.config_hash,
            {"kind": "regression", "seeds": seeds, "config": self.cfg.model_dump(mode="json")},
        )
        if loaded is None:
            return None
        meta, tensors = loaded
        where = self.checkpoint
        own = {k: torch.stack([s[k] for s in init]) for k, _ in model.named_parameters()}
        saved = tensor_group(tensors, "init/")
        if saved.keys() != own.keys() or not all(
            saved[k].shape == v.shape and saved[k].dtype == v.dtype and torch.equal(saved[k], v) for k, v in own.items()
        ):
            raise CheckpointError(f"checkpoint {where} was written for other initial parameters; refusing to resume")
        try:
            return self._unpack(meta, tensors, model, params, opt, train_gens, lr, {f"init/{k}" for k in own})
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
            raise CheckpointError(
                f"checkpoint {where} is corrupt or does not fit the fit: {' '.join(str(exc).split())[:200]}"
            ) from None

    def _unpack(
        self,
        meta: dict[str, Any],
        tensors: dict[str, Tensor],
        model: nn.Module,
        params: Sequence[Tensor],
        opt: torch.optim.Optimizer | None,
        train_gens: list[torch.Generator],
        lr: Tensor,
        read: set[str],
    ) -> dict[str, Any]:
        """:meth:`_load_checkpoint` after its origin checks: every part checked (``ValueError`` naming what
        is wrong; ``read``: the names of the tensors checked already), then loaded."""
        step, finished, steps = meta["step"], meta["finished"], self.cfg.steps
        if (
            not isinstance(finished, bool)
            or not is_int(step)
            or not (0 <= step <= steps if finished else 1 <= step < steps)
        ):
            raise ValueError("'step' or 'finished' does not fit the fit")
        rows = unpack_rows(meta["rows"])
        state = tensor_group(tensors, "model/")
        fresh = model.state_dict()
        if state.keys() != fresh.keys() or any(
            state[k].shape != v.shape or state[k].dtype != v.dtype for k, v in fresh.items()
        ):
            raise ValueError("its parameters do not fit the model")
        vectors = {k: tensors[k] for k in ("lr", "lr_floor", "accepted", "loss")}
        if any(v.shape != lr.shape or v.dtype != lr.dtype for v in vectors.values()):
            raise ValueError(
                f"'lr', 'lr_floor', 'accepted' and 'loss' must be {lr.dtype} tensors of shape {tuple(lr.shape)}"
            )
        per_param = {k: [tensors[f"{k}/{i}"] for i in range(len(params))] for k in ("grads", "velocity")}
        if any(
            t.shape != p.shape or t.dtype != p.dtype
            for ts in per_param.values()
            for t, p in zip(ts, params, strict=True)
        ):
            raise ValueError("gradients and momentum must be shaped like the parameters")
        gens = [tensors[f"train_gens/{i}"] for i in range(len(train_gens))]
        if any(g.dtype != torch.uint8 or g.dim() != 1 for g in gens):
            raise ValueError("random stream states must be 1-D uint8 tensors")
        used = {f"model/{k}" for k in state} | set(vectors) | {f"train_gens/{i}" for i in range(len(gens))}
        used |= {f"{k}/{i}" for k in per_param for i in range(len(params))}
        if (opt is None) != (meta["opt"] is None):
            raise ValueError("the optimiser's state does not fit the optimiser")
        if opt is not None:
            opt_state = unpack_optimizer(meta["opt"], tensors)
            if set(opt_state["state"]) - set(range(len(params))) or any(
                isinstance(v, Tensor) and v.dim() > 0 and v.shape != params[pid].shape
                for pid, st in opt_state["state"].items()
                for v in st.values()
            ):
                raise ValueError("the optimiser's state does not fit the parameters")
            used |= {
                f"opt/{pid}/{k}"
                for pid, st in opt_state["state"].items()
                for k, v in st.items()
                if isinstance(v, Tensor)
            }
        if set(tensors) != used | read:
            raise ValueError(f"unexpected tensors {sorted(set(tensors) - used - read)[:3]}")
        if opt is not None:
            # the param groups are the fresh optimiser's: the same config made them, and lr is set every step
            opt.load_state_dict({"state": opt_state["state"], "param_groups": opt.state_dict()["param_groups"]})
        model.load_state_dict(state)
        for g, st in zip(train_gens, gens, strict=True):
            g.set_state(st)
        device = self.device
        return {
            "step": step,
            "finished": finished,
            "rows": rows,
            **{k: v.to(device) for k, v in vectors.items()},
            **{k: [t.to(device) for t in ts] for k, ts in per_param.items()},
        }

    @staticmethod
    def _armijo(
        model: nn.Module,
        params: Sequence[Tensor],
        grads: list[Tensor],
        loss: Tensor,
        lr: Tensor,
        data: Prompts,
        cfg: RegressionConfig,
        shape: Callable[[Tensor, Tensor], Tensor],
    ) -> Tensor:
        """Per member, the largest ``lr * 2^-k`` (k <= ``max_halvings``) whose gradient step decreases the
        loss by at least ``1e-4 * step * |grad|^2`` (Armijo); members that find none keep the smallest."""
        E = loss.shape[0]
        g2 = sum(g.detach().reshape(E, -1).pow(2).sum(1) for g in grads)
        start = [p.detach().clone() for p in params]
        step, found = lr.clone(), torch.zeros(E, dtype=torch.bool, device=lr.device)
        target = cfg.target
        with torch.no_grad():
            for _ in range(cfg.max_halvings + 1):
                for p, p0, g in zip(params, start, grads, strict=True):
                    p.copy_(p0 - shape(step, p) * g)
                y = data.y_query if target == "response" else bayes_of(data)
                trial = ((y - predict_any(model, data)) ** 2).mean(-1)
                ok = torch.isfinite(trial) & (trial <= loss - 1e-4 * step * g2)
                found = found | ok
                if bool(found.all()):
                    break
                step = torch.where(found, step, step * 0.5)
            for p, p0 in zip(params, start, strict=True):
                p.copy_(p0)
        return step


def member_state(model: nn.Module, e: int) -> dict[str, Tensor]:
    """Member ``e``'s parameters (no member axis), on the CPU."""
    return {name: p.detach()[e].cpu().clone() for name, p in model.named_parameters()}


_M = TypeVar("_M", bound=nn.Module)


def load_member_states(model: _M, states: Sequence[dict[str, Tensor]]) -> _M:
    """Set ``model``'s parameters (E = ``len(states)`` members) from per-member states; returns it."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.stack([s[name] for s in states]).to(device=p.device, dtype=p.dtype))
    return model
