"""``topics-wv``: seed 004 (Li, Li & Risteski, ICML 2023), Figs. 2, 9, 10, 6 and Thm. 2 (§5.2, App. E, App. G.1).

One-hot embeddings (Eq. 7) on LDA documents (§6.1), the four panels {CE, squared} × {SGD, Adam} at lr
0.01, in three settings:

* ``l2`` (Fig. 2): uniform attention (W^K = W^Q = 0 frozen), only W^V (and biases) trained, with L2;
* ``no-l2`` (Fig. 9): the same without L2 (Fig. 6: W^V "sometimes" diagonal);
* ``attn`` (Fig. 10): W^K, W^Q trained jointly with W^V (with L2).

and a ``population`` arm: Thm. 2's exact setting -- the population objective of Assumption 1 (every
τ-subset document is its exact masked distribution), squared loss, b^pred = 0, no b^V, small L2,
full-batch Adam from a near-zero init, its rate annealed to 0 (``population.lr_schedule``).

Measured per member (word rows/columns of W^V): the block contrast z of the trained W^V and of the same
member's initial W^V (read from the stored ``ARM@init`` arrays), the row block-sum gap g, the mean same-topic (S)
and different-topic (D) entries and the uniformity u; per seed, the final test losses of the W^V-only arm
(``l2``) and the all-weights arm (``attn``: W^K, W^Q, W^V, same L2, loss and optimiser); the population arm's
relative distance to W^{V*}, logged at every evaluation (so its end drift is known), beside the exact ridge
optimum's at the λ that ran.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-wv``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch.optim.lr_scheduler import CosineAnnealingLR

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Hypothesis
from tdlab.config import Config
from tdlab.experiments.base import Analysis, Experiment, register
from tdlab.experiments.paper004_topics.common.training import (
    PANELS,
    Panels,
    StageClaims,
    TopicsExperimentConfig,
    fit_topics,
    gap_bound,
    init_block_z,
    loss_kind,
    masked_loss_floor,
    paired_loss_excess_share,
    panel_name,
    record_floor_stage,
    record_gap_stage,
    stacked,
)
from tdlab.models.topic_attention import TopicModelConfig
from tdlab.probes.blocks import block_ratio_stat, block_stats
from tdlab.report.standard_figures import Matrices, draw_figures
from tdlab.run_context import RunContext, init_arm
from tdlab.run_view import RunView
from tdlab.seeding import Purpose, generators, member_seeds
from tdlab.theory.topics import (
    c3,
    dv,
    min_population_loss,
    moment_loss,
    population_moments,
    ridge_wv,
    trivial_masked_error,
    wv_star,
    wv_star_entries,
)
from tdlab.train.optim import EagerAdam

SETTINGS = {"l2": "Fig. 2", "no-l2": "Fig. 9", "attn": "Fig. 10"}
UNIFORM_ATTENTION = ("l2", "no-l2")  # the settings with W^K = W^Q = 0 frozen (Lemma 1's assumption)
POPULATION = "population"
DISTANCE = "wv_star_rel_distance"  # the population arm's ‖W − W^{V*}‖/‖W^{V*}‖, logged at every evaluation


class WVClaims(StageClaims):
    z_min: float = Field(3.0, gt=0.0)  # block contrast gained in training (ours, fixed before any run)
    z_drift: float = Field(1.0, gt=0.0)  # z still moving by more than this over the last tenth: not converged (ours)
    gap_rel_tol: float = Field(0.10, gt=0.0, lt=1.0)  # g = c3 ± 10 % (Lemma 1 / Thm. 4; ours)
    pop_rel_tol: float = Field(0.05, gt=0.0, lt=1.0)  # ‖W − W*‖/‖W*‖ ≤ 5 % (ours)
    diagonal_u: float = Field(0.2, ge=0.0, lt=1.0)  # Fig. 6: a member's W^V "diagonal" when u ≤ this
    # Fig. 6 "sometimes shows a diagonal pattern" (F.4: "often occurs" without L2; Table 4 kept 7 of 10 runs as
    # diagonal). "sometimes": the share of diagonal no-L2 members lies in [fig6_share_min, 1 − fig6_share_min]
    # (neither never nor always); "often": in [fig6_often_min, 1]. Both ours: the seed gives no share.
    fig6_criterion: Literal["sometimes", "often"] = "sometimes"
    fig6_share_min: float = Field(0.1, gt=0.0, lt=0.5)  # "sometimes": at least one run in ten, not every run
    fig6_often_min: float = Field(0.5, gt=0.0, lt=1.0)  # "often": at least half the runs
    # §5.2 / App. G "only slightly worse": the W^V-only arm's loss exceeds the all-weights arm's by at most this
    # share of the gap from the uniform predictor's loss to the all-weights model's floor (ours: the seed gives no
    # number; the same share as topics-embed's §4 twin)
    worse_share_max: float = Field(0.1, gt=0.0, lt=1.0)
    # Fig. 2 / Thm. 2: S and D of the trained W^V within this share of the block contrast c3/v of W^V*'s entries
    # (ours; the same 10 % as gap_rel_tol on g = v(S − D); D* = −0.0076 is below it, so D is tested for being
    # near zero rather than at the block level)
    block_mean_rel_tol: float = Field(0.10, gt=0.0, lt=1.0)
    # Figs. 9, 10 captions: "the mean of the ... entries corresponding to the block positions is ... over 10x the
    # magnitude of the mean of ... non-block entries" (the seed's number)
    block_ratio_min: float = Field(10.0, gt=0.0)
    block_ratio_drift: float = Field(
        0.1, gt=0.0
    )  # the ratio statistic still moving by more than this: not converged (ours)


class PopulationConfig(Config):
    """Thm. 2's setting: exact population objective (Assumption 1), squared loss, b^pred = 0, no b^V."""

    tau: int = Field(3, ge=1, le=4096)  # topics per document (uniform-τ, §3.1); Thm. 2 does not depend on τ < T
    l2: float = Field(1e-5, gt=0.0, le=1.0)  # "small" λ (the readings, experiments.yaml)
    init_scale: float = Field(1e-3, gt=0.0, le=1.0)  # near-zero init: the min-norm limit is the one small inits reach
    lr: float = Field(0.01, gt=0.0, le=10.0)  # full-batch Adam
    steps: int = Field(3000, ge=1, le=1_000_000)
    # At a constant rate Adam reaches the ridge optimum and then leaves it in bursts of size ~lr (its second
    # moment decays with the gradient), so the last step's distance samples a burst: a 1e-15 change of the init
    # moves it from 0.013 to 0.018 at quick's sizes, where the optimum's is 0.005. "cosine" anneals the rate to 0
    # (torch's CosineAnnealingLR) and ends at the optimum for every init; "constant" is the plain Adam.
    lr_schedule: Literal["cosine", "constant"] = "cosine"


class TopicsWVConfig(TopicsExperimentConfig):
    members: int = Field(3, ge=1, le=4096)
    model: TopicModelConfig = TopicModelConfig(onehot=True)  # Eq. 7: W^E = I frozen
    panels: Panels = list(PANELS)  # Figs. 2, 9, 10: {CE, squared} x {SGD, Adam}
    settings: list[str] = list(SETTINGS)  # l2 (Fig. 2), no-l2 (Fig. 9), attn (Fig. 10)
    l2: float = Field(1e-4, ge=0.0, le=1.0)  # λ of the "L2" panels (Eq. 2; seed silent: "mild")
    population: PopulationConfig | None = PopulationConfig()  # None: skip the Thm. 2 population arm
    claims: WVClaims = WVClaims()

    @model_validator(mode="after")
    def _check(self) -> TopicsWVConfig:
        if not set(self.settings) <= set(SETTINGS) or len(set(self.settings)) != len(self.settings):
            raise ValueError(f"settings: choose among {list(SETTINGS)} without repeats, got {self.settings}")
        if not self.model.onehot:
            raise ValueError("model.onehot: Figs. 2, 9, 10 freeze one-hot embeddings; leave it true")
        if self.population is not None and self.population.tau >= self.task.T:
            raise ValueError(f"population.tau must be below task.T = {self.task.T} (Thm. 2 needs τ < T)")
        return self


def _c3(cfg: TopicsWVConfig) -> float:
    return c3(cfg.task.p_m, cfg.task.p_c)


def _thm2_entry(cfg: TopicsWVConfig, block: str) -> float:
    """W^V*'s same-topic (``block="same"``) or different-topic (``"diff"``) word-word entry (Thm. 2)."""
    t = cfg.task
    return wv_star_entries(t.T, t.v, t.p_m, t.p_c, t.p_r)[block]


def _contrast(cfg: TopicsWVConfig) -> float:
    """c3/v: S − D of every Lemma 1 / Thm. 4 optimum (= g/v), the scale of the block-mean tolerances."""
    return _c3(cfg) / cfg.task.v


def fig6_region(cfg: TopicsWVConfig) -> tuple[float, float]:
    """The share of diagonal no-L2 members Fig. 6's wording allows, under ``claims.fig6_criterion``."""
    c = cfg.claims
    return (c.fig6_share_min, 1.0 - c.fig6_share_min) if c.fig6_criterion == "sometimes" else (c.fig6_often_min, 1.0)


def _wv_star_alternative(cfg: TopicsWVConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted population members at the run's member count: every member at the exact ridge optimum of the λ
    that ran (its distance to W^V*; the penalised population objective is strictly convex, so every seed's
    minimiser is that one point: no spread) and every member at D^V, the diagonal member of the same argmin
    (Def. 2; Fig. 6), the optimum Thm. 2's λ → 0 limit selects W^V* against."""
    t = cfg.task
    star = wv_star(t.T, t.v, t.p_m, t.p_c, t.p_r)
    other = float((dv(t.T, t.v, t.p_m, t.p_c, t.p_r) - star).norm() / star.norm())
    return planted_pair(ridge_distance(cfg), other, 0.0, cfg.members)


def _ridge_near_limit(cfg: TopicsWVConfig) -> bool:
    """Thm. 2's λ → 0, measured small: the exact ridge optimum at the population arm's λ lies within a fifth of
    the tolerance of W^V* (a closed form of the setting)."""
    return cfg.population is not None and ridge_distance(cfg) <= cfg.claims.pop_rel_tol / 5


# Thm. 2 and Thm. 4 set b^pred = 0; the trained arms train b^pred and b^V (§6.1). The block sums' gap g is unchanged
# by a bias (it adds one constant per row, which q's entries summing to 1 carry into W's row), the block means are not.
BPRED_ZERO = Hypothesis(
    "b^pred = 0 and no b^V (Eq. 7; Thms. 2, 4)", lambda cfg: not cfg.model.bias_pred and not cfg.model.bias_v
)
EVERY_PANEL = "the claim covers every panel of Figs. 2, 9, 10 (both losses, both optimisers, each setting)"


def _wv_block_sum_gap_is_c3_expected(cfg: Any, row: Any) -> float:
    return _c3(cfg)


def _wv_block_sum_gap_is_c3_tolerance(cfg: Any, row: Any) -> float:
    return cfg.claims.gap_rel_tol * _c3(cfg)


def _wv_block_means_thm2_expected(cfg: Any, row: Any) -> float:
    return _thm2_entry(cfg, row.context["block"])


def _wv_block_means_thm2_tolerance(cfg: Any, row: Any) -> float:
    return cfg.claims.block_mean_rel_tol * _contrast(cfg)


def _fig6_diagonal_sometimes_expected(cfg: Any, row: Any) -> float:
    return sum(fig6_region(cfg)) / 2


def _fig6_diagonal_sometimes_tolerance(cfg: Any, row: Any) -> float:
    return (fig6_region(cfg)[1] - fig6_region(cfg)[0]) / 2


def ridge_distance(cfg: TopicsWVConfig) -> float:
    """‖W_λ − W^{V*}‖_F/‖W^{V*}‖_F of the closed-form ridge optimum at the population arm's λ."""
    t, p = cfg.task, cfg.population
    assert p is not None  # read only where the population arm is configured
    star = wv_star(t.T, t.v, t.p_m, t.p_c, t.p_r)
    m = population_moments(t.T, t.v, p.tau, t.p_m, t.p_c, t.p_r)
    return float((ridge_wv(m, p.l2) - star).norm() / star.norm())


def fit_population_wv(
    m: dict[str, torch.Tensor],
    seeds: list[int],
    pcfg: PopulationConfig,
    eval_every: int,
    star: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int, str, float]]]:
    """Full-batch Adam on ``L(W) + λ‖W‖²`` from ``N(0, init_scale²)`` per member seed, its rate annealed to 0
    under ``lr_schedule="cosine"``.

    Returns ``(W_0 (E, V, V), W_final (E, V, V), rows)`` with rows ``test_loss`` (the population loss,
    without the penalty) every ``eval_every`` steps, the relative distance to ``star`` (W^{V*}) at the same
    steps when given, and ``accepted_steps``."""
    V = m["qq"].shape[0]
    W0 = torch.stack(
        [torch.randn(V, V, generator=g, dtype=torch.float64) * pcfg.init_scale for g in generators(seeds, Purpose.INIT)]
    )
    W = W0.clone().requires_grad_()
    opt = EagerAdam([W], lr=pcfg.lr)  # torch's Adam, no torch._dynamo import
    schedule = CosineAnnealingLR(opt, T_max=pcfg.steps) if pcfg.lr_schedule == "cosine" else None
    rows: list[tuple[int, int, str, float]] = []
    for step in range(pcfg.steps + 1):
        loss = moment_loss(W, m)
        if step % eval_every == 0 or step == pcfg.steps:
            rows.extend((step, e, "test_loss", float(x)) for e, x in enumerate(loss.detach()))
            if star is not None:
                dist = (W.detach() - star).flatten(1).norm(dim=1) / star.norm()
                rows.extend((step, e, DISTANCE, float(x)) for e, x in enumerate(dist))
        if step == pcfg.steps:
            break
        opt.zero_grad()
        (loss + pcfg.l2 * W.pow(2).sum((1, 2))).sum().backward()
        opt.step()
        if schedule is not None:
            schedule.step()
    rows.extend((pcfg.steps, e, "accepted_steps", float(pcfg.steps)) for e in range(len(seeds)))
    return W0, W.detach(), rows


def _wv_probe(T: int, v: int):
    def probe(model) -> dict[str, torch.Tensor]:
        st = block_stats(model.value_matrix().double(), T, v)
        return {"wv_z": st.z, "wv_g": st.g, "wv_u": st.u, "wv_S": st.S, "wv_D": st.D}

    return probe


POPULATION_FIGURE = "thm2_population_wv.png"


def _wv_figure(setting: str) -> str:
    """The file of one setting's trained W^V, e.g. ``fig2_l2_wv.png``."""
    return f"{SETTINGS[setting].replace('. ', '').lower()}_{setting}_wv.png"


def _setting_wv(setting: str) -> Callable[[TopicsWVConfig, RunView, Mapping[str, Any]], list[tuple[np.ndarray, str]]]:
    """Member 0's trained W^V (word rows and columns) of every panel of ``setting``, titled with its z."""

    def panels(cfg: TopicsWVConfig, run: RunView, m: Mapping[str, Any]) -> list[tuple[np.ndarray, str]]:
        arms = [panel_name(loss, opt, setting) for loss, opt in cfg.panels]
        return [
            (stacked(run, arm, "W_V")[0][1:, 1:].numpy(), f"{arm} (z = {m.get(arm, {}).get('z', [np.nan])[0]:.1f})")
            for arm in arms
        ]

    return panels


def _population_wv(cfg: TopicsWVConfig, run: RunView, _: Mapping[str, Any]) -> list[tuple[np.ndarray, str]]:
    """The population arm's trained W^V of member 0 beside Thm. 2's W^V* (word rows and columns)."""
    t = cfg.task
    star = wv_star(t.T, t.v, t.p_m, t.p_c, t.p_r)[1:, 1:].numpy()
    W = stacked(run, POPULATION, "W_V")[0][1:, 1:].numpy()
    return [(W, "population mode, trained"), (star, "Thm. 2: W^V*")]


@register
class TopicsWV(Experiment[TopicsWVConfig]):
    Config = TopicsWVConfig

    @staticmethod
    def arms(cfg: TopicsWVConfig) -> list[str]:
        return [panel_name(loss, opt, s) for s in cfg.settings for loss, opt in cfg.panels]

    def run(self, cfg: TopicsWVConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        T, v = cfg.task.T, cfg.task.v
        for setting in cfg.settings:
            model = cfg.model.updated(
                {"vocab": T * v + 1, "uniform_attn": setting != "attn", "authors_compat": cfg.authors_compat}
            )
            train = cfg.train.updated({"l2": 0.0 if setting == "no-l2" else cfg.l2})
            for loss, opt in cfg.panels:
                fit_topics(
                    ctx,
                    cfg,
                    panel_name(loss, opt, setting),
                    model,
                    loss,
                    opt,
                    seeds,
                    train=train,
                    probes=[_wv_probe(T, v)],
                )
        if cfg.population is not None and ctx.done(POPULATION) is None:
            t, p = cfg.task, cfg.population
            m = population_moments(T, v, p.tau, t.p_m, t.p_c, t.p_r)
            star = wv_star(T, v, t.p_m, t.p_c, t.p_r)
            W0, W, rows = fit_population_wv(m, seeds, p, max(1, p.steps // 20), star)
            ctx.store_rows(POPULATION, rows)
            ctx.writer.save_arrays(POPULATION, [{"W_V": w} for w in W])
            ctx.writer.save_arrays(init_arm(POPULATION), [{"W_V": w} for w in W0])

    def trivial_error(self, cfg: TopicsWVConfig, arm: str) -> float:
        if arm == POPULATION:
            return 1.0  # predicting f = 0: E‖e_x‖² = 1
        return trivial_masked_error(cfg.task, loss_kind(arm))

    @staticmethod
    def floor(cfg: TopicsWVConfig, arm: str) -> float:
        """A lower bound of the loss of ``arm``'s model class (:func:`~.training.masked_loss_floor`): the l2 and
        no-l2 settings have uniform attention (position-blind), attn trains W^K, W^Q."""
        return masked_loss_floor(cfg, loss_kind(arm), position_blind=arm.split("/")[0] in UNIFORM_ATTENTION)

    def measure(self, cfg: TopicsWVConfig, run: RunView) -> Measurements:
        """Per panel: the gained block contrast of W^V (end drift of z), g (squared loss, uniform attention),
        u, the training stage; the population arm's distance to W^{V*}; the ridge optimum's."""
        T, v, t, c = cfg.task.T, cfg.task.v, cfg.task, cfg.claims
        out = Measurements({"c3": _c3(cfg)})
        for arm in self.arms(cfg):
            losses = record_floor_stage(out, run, cfg, arm, c.gap_share)
            setting, loss, floor = arm.split("/")[0], losses.loss, self.floor(cfg, arm)
            z, g, u = (run.final(arm, n) for n in ("wv_z", "wv_g", "wv_u"))
            z0 = init_block_z(run, arm, "W_V", T, v)
            ctx = {"setting": setting, "loss": loss, "arm": arm}
            out.row(
                "wv-is-block-structured",
                arm,
                Sample(z - z0, drift=run.drift(arm, "wv_z")),
                arms=[arm],
                context=ctx,
                label=f"{arm} ({SETTINGS[setting]}): z(W^V) trained − at init ≥ {c.z_min:g}",
            )
            if loss == "squared" and setting in UNIFORM_ATTENTION:
                out.row(
                    "wv-block-sum-gap-is-c3",
                    arm,
                    Sample(g, drift=run.drift(arm, "wv_g")),
                    arms=[arm],
                    context=ctx,
                    label=f"{arm} ({SETTINGS[setting]}): g(W^V) ≈ c3",
                )
            st = block_stats(stacked(run, arm, "W_V"), T, v)
            S, D = st.S.numpy(), st.D.numpy()
            if loss == "squared" and setting == "l2":  # Thm. 2's setting: L2, squared loss, uniform attention
                for block, x, metric in (("same", S, "wv_S"), ("diff", D, "wv_D")):
                    drift = run.drift(arm, metric) if run.has(arm, metric) else None
                    out.row(
                        "wv-block-means-thm2",
                        f"{arm}/{block}",
                        Sample(x, drift=drift),
                        arms=[arm],
                        context={**ctx, "block": block},
                        label=f"{arm} (Fig. 2): mean {block}-topic entry of W^V ≈ W^V*'s "
                        f"{_thm2_entry(cfg, block):.4g} (Thm. 2)",
                    )
            if setting in ("no-l2", "attn"):  # Figs. 9, 10
                drift = None
                if run.has(arm, "wv_S") and run.has(arm, "wv_D"):
                    steps, Sc = run.curves(arm, "wv_S")
                    drift = run.curve_drift(
                        arm, steps, block_ratio_stat(Sc, run.curves(arm, "wv_D")[1], c.block_ratio_min)
                    )
                # The captions check the ratio in their third panel only (squared loss, SGD): the other panels'
                # rows are ours, judged and shown, never deciding the group.
                paper_panel = loss == "squared" and arm.rsplit("/", 1)[-1] == "sgd"
                out.row(
                    "wv-block-mean-over-10x-nonblock",
                    arm,
                    Sample(block_ratio_stat(S, D, c.block_ratio_min), drift=drift),
                    arms=[arm],
                    provenance="paper" if paper_panel else "ours",
                    context=ctx,
                    label=f"{arm} ({SETTINGS[setting]}): S ≥ {c.block_ratio_min:g}|D|",
                )
            out.values[arm] = {
                "z": z.tolist(),
                "z_init": z0.tolist(),
                "g": g.tolist(),
                "u": u.tolist(),
                "S": S.tolist(),
                "D": D.tolist(),
                "final_test_loss": losses.final.tolist(),
                "excess_over_floor": (losses.final - floor).tolist(),  # above the arm's model class's floor
                "gap_closed": losses.gap_closed.tolist(),  # to the position-blind floor: the stage
                "loss_floor": floor,
            }
        out.values["thm2_block_means"] = {
            "same": _thm2_entry(cfg, "same"),
            "diff": _thm2_entry(cfg, "diff"),
            "contrast_c3_over_v": _contrast(cfg),
            "ratio_stat_of_wv_star": float(
                block_ratio_stat(_thm2_entry(cfg, "same"), _thm2_entry(cfg, "diff"), c.block_ratio_min)
            ),
        }
        if {"l2", "attn"} <= set(cfg.settings):  # §5.2 / App. G: W^V only vs all of W^K, W^Q, W^V (same seeds)
            for loss, optimiser in cfg.panels:
                only, full = panel_name(loss, optimiser, "l2"), panel_name(loss, optimiser, "attn")
                # the gap the all-weights model can close: down to its floor (its attention may read the query)
                worse = paired_loss_excess_share(run, only, full, trivial_masked_error(t, loss) - self.floor(cfg, full))
                out.values[f"wv_only_excess_share/{loss}/{optimiser}"] = list(worse.values)
                out.row(
                    "wv-only-loss-near-all-trained",
                    f"{loss}/{optimiser}",
                    worse,
                    arms=[only, full],
                    context={"loss": loss, "optimizer": optimiser},
                    label=f"({only} − {full}) final test loss / (uniform − {full}'s floor) ≤ {c.worse_share_max:g}, "
                    "by seed",
                )
        no_l2 = [a for a in self.arms(cfg) if a.startswith("no-l2/")]
        if no_l2:  # Fig. 6: pooled over the no-L2 panels whose every member trained (else all: not evaluable)

            def trained(a: str) -> bool:
                lk = loss_kind(a)
                bound = gap_bound(trivial_masked_error(t, lk), masked_loss_floor(cfg, lk, True), c.gap_share)
                return bool(np.all(np.asarray(out.values[a]["final_test_loss"]) < bound))

            used = [a for a in no_l2 if trained(a)] or no_l2
            diag = np.concatenate([np.asarray(out.values[a]["u"]) <= c.diagonal_u for a in used]).astype(float)
            lo, hi = fig6_region(cfg)
            out.values["fig6_diagonal"] = [int(diag.sum()), int(diag.size)]
            out.values["fig6_arms"] = used
            out.row(
                "fig6-diagonal-sometimes",
                "no-l2",
                Sample(diag, proportion=True),
                arms=used,
                context={"criterion": c.fig6_criterion, "arms": ",".join(used)},
                label=f"no-L2 members with a diagonal W^V (u ≤ {c.diagonal_u:g}), share in [{lo:g}, {hi:g}] "
                f"('{c.fig6_criterion}'; {', '.join(used)})",
            )
        if cfg.population is not None:
            p = cfg.population
            star = wv_star(T, v, t.p_m, t.p_c, t.p_r)
            dist = ((stacked(run, POPULATION, "W_V") - star).flatten(1).norm(dim=1) / star.norm()).numpy()
            drift = run.drift(POPULATION, DISTANCE) if run.has(POPULATION, DISTANCE) else None
            record_gap_stage(
                out, POPULATION, run.final(POPULATION, "test_loss"), 1.0, min_population_loss(v, p.tau), c.gap_share
            )
            out.row(
                "population-wv-is-thm2-optimum",
                POPULATION,
                Sample(dist, drift=drift),
                arms=[POPULATION],
                context={"arm": POPULATION, "l2": p.l2},
                label=f"trained W^V (λ = {p.l2:g}, {p.steps} full-batch Adam steps): relative distance to W^V* ≈ 0",
            )
            ridge = ridge_distance(cfg)
            out.row(
                "ridge-optimum-near-limit",
                POPULATION,
                Sample((ridge,), deterministic=True),
                context={"l2": p.l2},
                label=f"‖W_λ − W^V*‖/‖W^V*‖ of the closed-form ridge optimum, λ = {p.l2:g}",
            )
            out.values[POPULATION] = {
                "rel_distance_to_wv_star": dist.tolist(),
                "ridge_rel_distance": ridge,
                "end_drift_of_distance": drift,
            }
        return out

    def notes(self, cfg: TopicsWVConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        notes = []
        if "fig6_diagonal" in measured.values:
            k, n = measured.values["fig6_diagonal"]
            lo, hi = fig6_region(cfg)
            notes.append(
                f"Fig. 6 (no L2): {k}/{n} members of {', '.join(measured.values['fig6_arms'])} have a diagonal "
                f"W^V (u ≤ {cfg.claims.diagonal_u}); '{cfg.claims.fig6_criterion}' is read as a share in "
                f"[{lo:g}, {hi:g}] (Wilson interval; claims.fig6_criterion)."
            )
        tb = measured.values.get("thm2_block_means")
        if tb:
            notes.append(
                f"Thm. 2's W^V* (thm2_block_means; ratio_stat_of_wv_star is its (S − {cfg.claims.block_ratio_min:g}|D|)"
                "/|S − D|): without L2 (Thm. 4) only S − D = c3/v is fixed, which is the g = c3 claim (g = v(S − D)); "
                "the seed's Fig. 9 squared/SGD means (0.0055 vs −0.00016) sit ~20x below its contrast c3/v: that panel "
                "had not converged."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    figures = (
        *(
            Matrices(
                _wv_figure(setting),
                _setting_wv(setting),
                title=f"{SETTINGS[setting]} — trained W^V of member 0 (paper: one block per topic)",
                columns=2,
                size=(4.25, 3.75),
            )
            for setting in SETTINGS
        ),
        Matrices(POPULATION_FIGURE, _population_wv, columns=2, size=(4.5, 4.0)),
    )

    def plot(self, cfg: TopicsWVConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared W^V matrices of the settings, and of the population arm, that the run trained."""
        ran = {_wv_figure(s) for s in cfg.settings} | ({POPULATION_FIGURE} if cfg.population is not None else set())
        return draw_figures([f for f in self.figures if f.file in ran], cfg, run, analysis.measurements, figdir)
