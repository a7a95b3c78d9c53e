"""``topics-two-stage``: seed 004 (Li, Li & Risteski, ICML 2023), Fig. 4, §5.1 and §8.

The one-hot model of Eq. 7 (``W^E = I`` frozen) with ``W^K``, ``W^Q``, ``W^V`` (and ``b^K, b^Q, b^V, b^pred``)
started near zero and trained *jointly* under the cross-entropy loss (Eq. 4) on §6.1's LDA documents.
Fig. 4 plots ``‖W^K‖_F``, ``‖W^Q‖_F``, ``‖W^V‖_F`` against the step and sees two stages: first ``W^V`` grows
while ``W^K, W^Q`` stay near zero, then ``W^K, W^Q`` grow while ``‖W^V‖`` stays flat. §8's reason: at a
near-zero init ``∇_{W^K} L`` carries the factor ``W^Q ≈ 0`` (Eq. 5) while ``∇_{W^V} L`` carries the
attention ``A``, whose columns sum to one (Eq. 7). §8 also says the phenomenon "is sensitive to
hyperparameters like initialization and learning rate".

Settings (Fig. 4: "different settings of the hyperparameters as well as different runs"; the seed does not
list them, the issue fixes the grid): {SGD, Adam} × lr {0.003, 0.01, 0.03} × init scale {1e-3, 1e-2}. Each
optimiser is one arm, one ensemble over lr × init × seeds: per-member learning rates are exact
(``Trainer(member_lr=...)``) and per-member init scales come from building each member alone and
:func:`~tdlab.models.ensemble.assemble`-ing them.

Init (the seed: "random matrices near zero"): ``init="uniform"``, ``W ~ U[0, init_scale)`` entrywise -- the
authors' code (``zero_init_noise * torch.rand``); biases start at 0. We take it over a centred normal
because it is what produced Fig. 4; note that it has a nonzero mean (``‖W_0‖_F ≈ init_scale · d/√3``).

Measurements per member (norms logged every step by a trainer probe):

* ``g_X(t) = (‖X_t‖ − ‖X_0‖)/(max_s ‖X_s‖ − ‖X_0‖)`` for ``X = W^K, W^Q, W^V`` (0 when ``X`` never grows);
* ``t*`` = the first step with ``g_V ≥ 0.8`` (``W^V`` has made 80 % of its growth);
* the member **shows two stages** when ``g_K(t*) ≤ 0.2`` and ``g_Q(t*) ≤ 0.2`` (stage 1: keys and queries
  near their start), ``‖W^K‖`` and ``‖W^Q‖`` at least double from init to the end (stage 2 happens), and
  ``max_{s ≥ t*} |‖W^V_s‖ − ‖W^V_{t*}‖| / (max_s ‖W^V_s‖ − ‖W^V_0‖) ≤ 0.2`` (``W^V`` flat after ``t*``).
  The 20 % is of the same growth range as ``g``'s 80 %: measured against ``‖W^V_{t*}‖`` instead, a curve
  from near zero that still rises to its maximum moves (1 − 0.8)/0.8 = 25 % after its 80 % point, so the
  condition could never hold. Against the range, a rise after ``t*`` stays within 20 % by the definition of
  ``t*``; what the condition adds is that ``‖W^V‖`` does not fall back while ``W^K, W^Q`` grow. Stage 2's
  content is then: ≥ 80 % of ``W^V``'s growth before ``t*``, ≥ 80 % of ``W^K``'s and ``W^Q``'s after it.

All of it is read over the first ``horizon`` steps (1000: Fig. 4's x-axis), whatever ``train.steps``.

Claim (one paper statement, one row): in the **headline setting** -- Adam, lr 0.01, init 1e-3, fixed
before any run: Adam (AdamW, weight decay 0) at lr 0.01 is the authors' optimiser and §6.1's learning
rate, and 1e-3 is the nearer-to-zero of the two scales ("near zero", Fig. 4's caption) -- a share of at
least 80 % of the members shows two stages (Wilson interval of the share; ``headline_members`` seeds, since
with n ≤ 15 members even n/n successes cannot clear 0.8). Every other setting is reported (share,
median ``t*``, per-member conditions) without a verdict: §8 says the phenomenon depends on init and lr.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import proportion_interval
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, RunContext, register
from tdlab.experiments.topics_training import (AUTHORS_NOT_REPRODUCED, Optimizer, TopicsExperimentConfig, TopicsTrain,
                                               masked_objective, topic_data, trivial_masked_error)
from tdlab.models.ensemble import assemble
from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
from tdlab.report.figures import member_curves, plt, save_figure
from tdlab.runs import Run
from tdlab.seeding import member_seeds
from tdlab.train.trainer import Trainer

__all__ = ["TopicsTwoStageConfig", "TopicsTwoStage", "TwoStageClaims", "Setting", "settings", "member_settings",
           "relative_growth", "stage_split", "TwoStage", "two_stage", "NORMS", "setting_name"]

NORMS = ("norm_K", "norm_Q", "norm_V")  # metric names of ‖W^K‖_F, ‖W^Q‖_F, ‖W^V‖_F
# One-hot (Eq. 7), near-zero uniform init (the authors' code); d = d_a = V (seed silent). In the profiles
# too, so that a ``--set model.x=...`` merges into it instead of replacing the whole model config.
MODEL = {"onehot": True, "init": "uniform", "init_scale": 1e-3}


class TwoStageClaims(Config):
    """Thresholds of the two-stage predicate and the headline share (issue 13; ours, fixed before any run)."""

    g_v: float = Field(0.8, gt=0.0, le=1.0)  # t* = first step with g_V ≥ g_v
    g_kq_max: float = Field(0.2, ge=0.0, lt=1.0)  # stage 1: g_K(t*), g_Q(t*) ≤ this
    kq_growth_min: float = Field(2.0, gt=1.0)  # stage 2: ‖W^K‖, ‖W^Q‖ end / start ≥ this ("at least double")
    v_move_max: float = Field(0.2, gt=0.0)  # ‖W^V‖ moves at most this fraction of its growth range after t*
    share_min: float = Field(0.8, gt=0.0, le=1.0)  # headline: share of members showing two stages


class TopicsTwoStageConfig(TopicsExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # seeds per setting (Fig. 4: "different runs in each setting")
    optimizers: list[Optimizer] = ["sgd", "adam"]  # one arm each (issue 13)
    lrs: list[float] = [0.003, 0.01, 0.03]  # issue 13's grid around §6.1's 0.01
    inits: list[float] = [1e-3, 1e-2]  # U[0, init) near-zero init scales (issue 13)
    # The headline setting (fixed before any run; module docstring) and its seeds.
    headline_optimizer: Optimizer = "adam"
    headline_lr: float = Field(0.01, gt=0.0, le=100.0)
    headline_init: float = Field(1e-3, gt=0.0, le=10.0)
    headline_members: int = Field(20, ge=1, le=4096)  # Wilson: n/n clears 0.8 only from n = 16
    horizon: int = Field(1000, ge=2, le=10_000_000)  # steps the predicate reads: Fig. 4's x-axis (0-1000)
    model: TopicModelConfig = TopicModelConfig(**MODEL)
    claims: TwoStageClaims = TwoStageClaims()

    @model_validator(mode="after")
    def _check(self) -> TopicsTwoStageConfig:
        if not self.optimizers or len(set(self.optimizers)) != len(self.optimizers):
            raise ValueError("optimizers: list 'sgd' and/or 'adam', without repeats")
        for name in ("lrs", "inits"):
            vals = getattr(self, name)
            if not vals or len(set(vals)) != len(vals) or any(not 0.0 < x <= 10.0 for x in vals):
                raise ValueError(f"{name}: list at least one value in (0, 10], without repeats")
        if self.headline_optimizer not in self.optimizers or self.headline_lr not in self.lrs \
                or self.headline_init not in self.inits:
            raise ValueError("headline_optimizer / headline_lr / headline_init: the headline setting must be one of "
                             f"optimizers={self.optimizers} x lrs={self.lrs} x inits={self.inits}")
        m = self.model
        if not m.onehot or m.uniform_attn or m.embed_only or m.frozen_wv:
            raise ValueError("model: Fig. 4 trains W^K, W^Q, W^V on one-hot inputs; set onehot=true and leave "
                             "uniform_attn, embed_only, frozen_wv unset")
        if m.init_scheme != "uniform":
            raise ValueError("model.init: the two-stage experiment starts near zero: init must be 'uniform' "
                             "(U[0, init_scale), the authors' code)")
        if m.vocab != self.task.T * self.task.v + 1:
            raise ValueError(f"model.vocab must be T*v + 1 = {self.task.T * self.task.v + 1}")
        return self


@dataclass(frozen=True)
class Setting:
    """One hyperparameter setting of Fig. 4: optimiser, learning rate, init scale."""

    optimizer: str
    lr: float
    init: float

    @property
    def name(self) -> str:
        return setting_name(self.optimizer, self.lr, self.init)


def setting_name(optimizer: str, lr: float, init: float) -> str:
    """``"adam/lr0.01/init0.001"``."""
    return f"{optimizer}/lr{lr:g}/init{init:g}"


def settings(cfg: TopicsTwoStageConfig, optimizer: str) -> list[Setting]:
    """The settings of one arm, lr-major then init (the order of their members in the ensemble)."""
    return [Setting(optimizer, lr, init) for lr in cfg.lrs for init in cfg.inits]


def member_settings(cfg: TopicsTwoStageConfig, optimizer: str) -> list[Setting]:
    """The setting of every member of arm ``optimizer``, in member order: each setting's members are
    contiguous, ``cfg.members`` of them (``cfg.headline_members`` for the headline setting)."""
    out = []
    for s in settings(cfg, optimizer):
        head = (s.optimizer, s.lr, s.init) == (cfg.headline_optimizer, cfg.headline_lr, cfg.headline_init)
        out.extend([s] * (cfg.headline_members if head else cfg.members))
    return out


# ----------------------------------------------------------------------------------------------
# The two-stage predicate on norm curves


def relative_growth(norms: np.ndarray) -> np.ndarray:
    """``g(t) = (n_t − n_0)/(max_s n_s − n_0)`` along the last axis.

    Args:
        norms: ``(..., S)`` norm curves, step 0 first.
    Returns:
        ``(..., S)`` float; a curve that never rises above its start (``max = n_0``) gets ``g = 0``.
    """
    n = np.asarray(norms, dtype=float)
    rise = n.max(-1, keepdims=True) - n[..., :1]
    with np.errstate(invalid="ignore", divide="ignore"):
        g = (n - n[..., :1]) / rise
    return np.where(rise > 0, g, 0.0)


def stage_split(g_v: np.ndarray, threshold: float = 0.8) -> np.ndarray:
    """Index of the first step with ``g_V ≥ threshold`` along the last axis; -1 where there is none.

    Args:
        g_v: ``(..., S)`` relative growth of ``‖W^V‖`` (:func:`relative_growth`).
    Returns:
        ``(...)`` int64 indices into the step axis.
    """
    hit = np.asarray(g_v) >= threshold
    return np.where(hit.any(-1), hit.argmax(-1), -1).astype(np.int64)


@dataclass(frozen=True)
class TwoStage:
    """The two-stage measurements of ``E`` members, each field ``(E,)``."""

    t_star: np.ndarray  # step of t* (NaN: g_V never reached the threshold)
    g_k: np.ndarray  # g_K(t*)
    g_q: np.ndarray  # g_Q(t*)
    growth_k: np.ndarray  # ‖W^K_end‖ / ‖W^K_0‖
    growth_q: np.ndarray
    v_move: np.ndarray  # max_{s ≥ t*} |‖W^V_s‖ − ‖W^V_t*‖| / (max_s ‖W^V_s‖ − ‖W^V_0‖)
    stage1: np.ndarray  # bool: g_K(t*), g_Q(t*) ≤ g_kq_max
    stage2: np.ndarray  # bool: W^K and W^Q at least kq_growth_min times their initial norm at the end
    v_flat: np.ndarray  # bool: v_move ≤ v_move_max
    shows: np.ndarray  # bool: all three (and t* exists)

    def member(self, e: int) -> dict[str, float | bool]:
        return {k: (bool(v[e]) if v.dtype == bool else float(v[e])) for k, v in self.__dict__.items()}


def two_stage(steps: np.ndarray, norm_k: np.ndarray, norm_q: np.ndarray, norm_v: np.ndarray,
              claims: TwoStageClaims = TwoStageClaims()) -> TwoStage:
    """The two-stage predicate of every member from its norm curves.

    Args:
        steps: ``(S,)`` the steps of the curves (0 first, increasing).
        norm_k, norm_q, norm_v: ``(E, S)`` Frobenius norms of ``W^K``, ``W^Q``, ``W^V``.
        claims: the thresholds.
    Returns:
        :class:`TwoStage` (fields ``(E,)``); a member whose ``g_V`` never reaches ``claims.g_v`` has NaN
        ``t*``, ``g_K``, ``g_Q``, ``v_move`` and does not show two stages.
    """
    steps = np.asarray(steps, dtype=float)
    K, Q, V = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (norm_k, norm_q, norm_v))
    if not (K.shape == Q.shape == V.shape) or K.shape[-1] != steps.size:
        raise ValueError(f"norm curves must share one (E, S) shape with S = len(steps) = {steps.size}; "
                         f"got {K.shape}, {Q.shape}, {V.shape}")
    E = K.shape[0]
    idx = stage_split(relative_growth(V), claims.g_v)
    ok = idx >= 0
    rows = np.arange(E)
    at = np.where(ok, idx, 0)
    nan = np.full(E, np.nan)
    g_k = np.where(ok, relative_growth(K)[rows, at], nan)
    g_q = np.where(ok, relative_growth(Q)[rows, at], nan)
    v_star = V[rows, at]
    after = np.arange(steps.size)[None, :] >= at[:, None]
    rise = V.max(-1) - V[:, 0]  # > 0 wherever t* exists
    with np.errstate(invalid="ignore", divide="ignore"):
        move = np.where(after, np.abs(V - v_star[:, None]), 0.0).max(-1) / rise
        growth_k, growth_q = K[:, -1] / K[:, 0], Q[:, -1] / Q[:, 0]
    v_move = np.where(ok, move, nan)
    stage1 = ok & (g_k <= claims.g_kq_max) & (g_q <= claims.g_kq_max)
    stage2 = (growth_k >= claims.kq_growth_min) & (growth_q >= claims.kq_growth_min)
    v_flat = ok & (v_move <= claims.v_move_max)
    return TwoStage(t_star=np.where(ok, steps[at], nan), g_k=g_k, g_q=g_q, growth_k=growth_k, growth_q=growth_q,
                    v_move=v_move, stage1=stage1, stage2=stage2, v_flat=v_flat, shows=stage1 & stage2 & v_flat)


def _norm_probe(model) -> dict[str, torch.Tensor]:
    n = model.norms()
    return {"norm_K": n["W_K"], "norm_Q": n["W_Q"], "norm_V": n["W_V"]}


@register
class TopicsTwoStage(Experiment):
    name = "topics-two-stage"
    paper = "004 Topic structure"
    figure = "Fig. 4, §5.1, §8"
    description = ("One-hot one-layer transformer, W^K, W^Q, W^V from near-zero init trained jointly on LDA documents "
                   "over {SGD, Adam} x lr {0.003, 0.01, 0.03} x init {1e-3, 1e-2}: first ||W^V|| grows while "
                   "||W^K||, ||W^Q|| stay near zero, then they grow while ||W^V|| is flat (headline: Adam lr 0.01 "
                   "init 1e-3, >= 80% of members); other settings reported.")
    Config = TopicsTwoStageConfig
    arm_fields = {"model.init_scale": "inits=[...]", "train.lr": "lrs=[...]", "train.optimizer": "optimizers=[...]"}
    profiles = {
        # 2 CPU cores: documents, vocabulary, lrs and inits as in the paper; batch 16 (not 40), 1000 steps
        # (Fig. 4's x-axis), 2 seeds per setting, 16 for the headline (the fewest whose 16/16 clears 0.8).
        "quick": {"members": 2, "headline_members": 16, "model": MODEL,
                  "train": {"steps": 1000, "batch": 16, "eval_every": 100, "eval_batches": 2}},
        # The authors' budget (≈ 5,000 steps at batch 40), 3 seeds per setting, 20 for the headline;
        # the predicate still reads Fig. 4's first 1000 steps (horizon).
        "paper": {"members": 3, "headline_members": 20, "model": MODEL,
                  "train": {"steps": 5000, "batch": 40, "eval_every": 250, "eval_batches": 8}},
    }

    @staticmethod
    def arms(cfg: TopicsTwoStageConfig) -> list[str]:
        return list(cfg.optimizers)

    def run(self, cfg: TopicsTwoStageConfig, ctx: RunContext) -> None:
        model = cfg.model.updated({"p_m": cfg.task.p_m, "p_c": cfg.task.p_c, "p_r": cfg.task.p_r,
                                   "authors_compat": cfg.authors_compat})
        objective = masked_objective(cfg, "ce")
        for opt in cfg.optimizers:
            per_member = member_settings(cfg, opt)
            seeds = member_seeds(cfg.seed, len(per_member))
            setting_of = dict(zip(seeds, per_member))

            def build(chunk: list[int], setting_of=setting_of) -> TopicAttention:
                # each member alone with its own init scale, then one ensemble (members never mix)
                alone = [TopicAttention(model.updated({"init_scale": setting_of[s].init}), [s]) for s in chunk]
                return assemble(TopicAttention(model, chunk), alone)

            tcfg: TopicsTrain = cfg.train.updated({"optimizer": "adamw" if opt == "adam" else "sgd",
                                                   "lr": cfg.lrs[0]})
            trainer = Trainer(tcfg, ctx.device, ctx.progress, label=opt, objective=objective, probes=[_norm_probe],
                              probe_every=1, member_lr={s: setting_of[s].lr for s in seeds})
            ctx.fit(opt, trainer, build, seeds, topic_data(cfg, objective))

    def trivial_error(self, cfg: TopicsTwoStageConfig, arm: str) -> float:
        return trivial_masked_error(cfg, "ce")

    @staticmethod
    def curves(cfg: TopicsTwoStageConfig, run: Run, arm: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(steps (S,), {norm name: (E, S)})`` of ``arm`` up to ``cfg.horizon``."""
        metrics = run.metrics()
        out = {}
        for name in NORMS:
            steps, vals = member_curves(metrics, arm, name)
            keep = steps <= cfg.horizon
            out[name] = vals[:, keep]
        return steps[keep], out

    def analyse(self, cfg: TopicsTwoStageConfig, run: Run) -> Analysis:
        c = cfg.claims
        out = Analysis(measurements={"horizon": cfg.horizon})
        head = setting_name(cfg.headline_optimizer, cfg.headline_lr, cfg.headline_init)
        group = out.group("two-stage-headline",
                          f"Fig. 4 / §5.1: in the headline setting {head}, at least {c.share_min:.0%} of the members "
                          f"show two stages: g_K(t*), g_Q(t*) ≤ {c.g_kq_max} at t* = first step with g_V ≥ {c.g_v}, "
                          f"W^K and W^Q grow ≥ {c.kq_growth_min}x by step {cfg.horizon}, ‖W^V‖ moves ≤ "
                          f"{c.v_move_max:.0%} after t*")
        table = {}
        for arm in self.arms(cfg):
            steps, n = self.curves(cfg, run, arm)
            ts = two_stage(steps, n["norm_K"], n["norm_Q"], n["norm_V"], c)
            per_member = member_settings(cfg, arm)
            for s in settings(cfg, arm):
                idx = [e for e, ms in enumerate(per_member) if ms == s]
                shows = ts.shows[idx].astype(float)
                iv = proportion_interval(shows.tolist())
                table[s.name] = {
                    "members": len(idx), "two_stage": int(shows.sum()), "share": float(shows.mean()),
                    "share_interval": [iv.lo, iv.hi],
                    "stage1": int(ts.stage1[idx].sum()), "stage2": int(ts.stage2[idx].sum()),
                    "v_flat": int(ts.v_flat[idx].sum()),
                    "t_star": ts.t_star[idx].tolist(), "g_K_at_t_star": ts.g_k[idx].tolist(),
                    "g_Q_at_t_star": ts.g_q[idx].tolist(), "growth_K": ts.growth_k[idx].tolist(),
                    "growth_Q": ts.growth_q[idx].tolist(), "v_move_after_t_star": ts.v_move[idx].tolist(),
                }
                if s.name == head:
                    group.value(head, shows, c.share_min, 0.0, "ge", proportion=True, arms=[arm],
                                statement=f"{head}: share of members showing two stages ≥ {c.share_min:.0%}")
                else:
                    t = table[s.name]
                    med = np.nanmedian(t["t_star"]) if np.isfinite(t["t_star"]).any() else float("nan")
                    out.notes.append(f"{s.name} (reported, no verdict: §8 says it depends on init and lr): "
                                     f"{t['two_stage']}/{t['members']} members two-stage (stage 1 held "
                                     f"{t['stage1']}, K/Q doubled {t['stage2']}, V flat {t['v_flat']}); "
                                     f"median t* = {med:g}")
        out.measurements["settings"] = table
        h = table.get(head)
        if h is not None:
            out.notes.insert(0, f"Headline {head}: {h['two_stage']}/{h['members']} members two-stage (stage 1 held "
                                f"{h['stage1']}, K/Q doubled {h['stage2']}, V flat {h['v_flat']}); t* = "
                                f"{', '.join(f'{x:g}' for x in h['t_star'][:8])}{' ...' if h['members'] > 8 else ''}")
        out.notes.append("Init: U[0, init_scale) entrywise (the authors' code), a nonzero-mean start; under Adam "
                         "every coordinate moves by about lr per step whatever its gradient's size, so §8's "
                         "argument (∇W^K carries W^Q ≈ 0) is an SGD argument.")
        if cfg.authors_compat:
            out.notes.append(AUTHORS_NOT_REPRODUCED)
        return out

    def plot(self, cfg: TopicsTwoStageConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        head = setting_name(cfg.headline_optimizer, cfg.headline_lr, cfg.headline_init)
        all_settings = [s for arm in self.arms(cfg) for s in settings(cfg, arm)]
        colors = {s.name: plt.cm.tab20(i % 20) for i, s in enumerate(all_settings)}
        fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
        labels = {"norm_K": "‖W^K‖_F", "norm_Q": "‖W^Q‖_F", "norm_V": "‖W^V‖_F"}
        for arm in self.arms(cfg):
            steps, n = self.curves(cfg, run, arm)
            per_member = member_settings(cfg, arm)
            seen = set()
            for e, s in enumerate(per_member):
                for ax, name in zip(axes, NORMS):
                    ax.plot(steps, n[name][e], color=colors[s.name], lw=1.4 if s.name == head else 0.7,
                            alpha=0.9 if s.name == head else 0.6, ls="-" if arm == "adam" else "--",
                            label=s.name if s.name not in seen and name == "norm_K" else None)
                seen.add(s.name)
        for ax, name in zip(axes, NORMS):
            ax.set_ylabel(labels[name])
        axes[-1].set_xlabel("step")
        axes[0].legend(fontsize=6, ncol=3)
        share = analysis.measurements.get("settings", {}).get(head, {})
        fig.suptitle(f"Fig. 4 — norms along training, one curve per member (paper: stage 1 ≈ steps 0-400, stage 2 "
                     f"400-1000)\nheadline {head}: {share.get('two_stage', '?')}/{share.get('members', '?')} two-stage",
                     fontsize=9)
        paths = [save_figure(fig, figdir / "fig4_norms.png")]
        table = analysis.measurements.get("settings", {})
        if table:
            names = list(table)
            fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(names)), 3.8))
            shares = [table[k]["share"] for k in names]
            lo = [table[k]["share"] - table[k]["share_interval"][0] for k in names]
            hi = [table[k]["share_interval"][1] - table[k]["share"] for k in names]
            ax.bar(range(len(names)), shares, yerr=[lo, hi], color=[colors.get(k, "C0") for k in names], capsize=3)
            ax.axhline(cfg.claims.share_min, ls="--", c="k", lw=0.8, label=f"headline threshold {cfg.claims.share_min}")
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("share of members two-stage (Wilson 95 %)")
            ax.set_ylim(0, 1.05)
            ax.legend(fontsize=7)
            paths.append(save_figure(fig, figdir / "two_stage_share_per_setting.png"))
        return paths
