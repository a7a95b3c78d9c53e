"""``topics-real-two-stage``: seed 004 (Li, Li & Risteski, ICML 2023), Fig. 5 (App. A, §8): two-stage
dynamics of a 4-layer, 4-head encoder trained on Wikipedia.

Fig. 5's setting: "All weight matrices (key W^K, query W^Q, value W^V in each layer) are initialized to
random matrices near zero, and simultaneously trained"; per layer it plots ‖W^K‖_F, ‖W^Q‖_F, ‖W^V‖_F (heads
concatenated) after each step and the rotation of W^V, the cosine distance (1 − cos(W^V_t, W^V_{t−10}))/2,
over the first 400 steps, and reads: stage 1 (steps ≈ 0-100) W^K, W^Q stay near 0 while ‖W^V‖ grows and W^V
turns fast; stage 2 (≈ 100-400) W^K, W^Q grow, "much later than W^V".

What runs: the encoder and data of :mod:`~tdlab.experiments.paper004_topics.common.real_text` (masked-token training of
a BERT-shaped encoder on gensim's Wikipedia sample, several seeds as one ensemble) with ``layers = heads = 4``,
every other parameter at its BERT init (N(0, 0.02²)), and W^Q, W^K, W^V of every layer redrawn near zero
(``qkv_init="uniform"``: W ~ U[0, init_scale) entrywise; ``"normal"``: N(0, init_scale²)), each member from its
own seed. Norms and rotation are logged every step by a trainer probe (the rotation from step 10 on, once it has
10 steps of history; a resumed fit loses that history: rotations resume 10 steps later).

Per layer: the two-stage rule of ``topics-two-stage`` (:func:`tdlab.probes.curves.lags`,
:func:`~.common.lags.value_first_claim`) on the norm curves, and the mean rotation of W^V over stage 1 (steps
10-100) against stage 2 (steps 101-400). Its readings of the seed and its claims are declared in the seed's
``experiments.yaml`` (``tdlab explain topics-real-two-stage``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.declare import Hypothesis
from tdlab.experiments.base import register
from tdlab.experiments.paper004_topics.common.lags import KQ_GREW, LagClaims, lag_sample
from tdlab.experiments.paper004_topics.common.real_text import (
    ARM,
    EncoderConfig,
    RealTextExperiment,
    RealTrain,
    TopicsRealConfig,
    encoder_config,
    fit_encoder,
    prepare_data,
    run_info,
    what_ran,
    write_info,
)
from tdlab.models.gpt import GPT
from tdlab.models.init import near_zero_qkv_init_
from tdlab.probes.attention import WEIGHT_NORMS, WV_ROTATION, AttentionWeightProbe
from tdlab.probes.curves import lags, rotation_means
from tdlab.report.standard_figures import Curves, Line, Panel
from tdlab.run_context import RunContext
from tdlab.run_view import RunView

FIG5_LABELS = {"norm_K": "‖W^K‖_F", "norm_Q": "‖W^Q‖_F", "norm_V": "‖W^V‖_F", WV_ROTATION: "rotation of W^V"}


class TwoStageRealClaims(LagClaims):
    stage1_end: int = Field(100, ge=1)  # Fig. 5: stage 1 ≈ steps 0-100
    horizon: int = Field(400, ge=2)  # Fig. 5: the first 400 steps


class RealTwoStageConfig(TopicsRealConfig):
    model: EncoderConfig = EncoderConfig(layers=4, heads=4)  # Fig. 5: 4 layers x 4 heads
    train: RealTrain = RealTrain(steps=400, warmup_steps=0, schedule="constant")  # Fig. 5: 400 steps
    qkv_init: Literal["uniform", "normal"] = "uniform"  # module docstring
    init_scale: float = Field(1e-3, gt=0.0, le=1.0)  # "near zero" (the authors' synthetic code: 1e-3)
    rotation_lag: int = Field(10, ge=1, le=10_000)  # Fig. 5: W^V_t vs W^V_{t-10}
    attn_windows: int = Field(1, ge=1)  # not measured here
    # Another claims model than topics-real's (this run reads none of its fields): pydantic replaces a field's
    # type in a subclass; mypy sees the override as incompatible with the base class's.
    claims: TwoStageRealClaims = TwoStageRealClaims()  # type: ignore[assignment]

    @model_validator(mode="after")
    def _check_two_stage(self) -> RealTwoStageConfig:
        c = self.claims
        if c.stage1_end <= self.rotation_lag or c.stage1_end >= c.horizon:
            raise ValueError(
                f"claims.stage1_end={c.stage1_end} must lie between rotation_lag={self.rotation_lag} and "
                f"claims.horizon={c.horizon}"
            )
        if c.horizon > self.train.steps:
            raise ValueError(
                f"claims.horizon={c.horizon} exceeds train.steps={self.train.steps}: train at least "
                "as many steps as the claims read"
            )
        if self.model.checkpoint:
            raise ValueError("model.checkpoint: Fig. 5 is about training from near zero; a checkpoint is not trained")
        return self


# "near zero" is the seed's only word on the scale; §8 says the two stages are not usually visible "using the
# common default hyperparameters", so near zero is read as below the other weights' BERT init (model.init_std).
NEAR_ZERO_QKV = Hypothesis(
    "W^K, W^Q, W^V initialised near zero (Fig. 5; §8): init_scale below the BERT init std model.init_std of the "
    "other weights (the 'common default hyperparameters' under which §8 sees no two stages)",
    lambda cfg: cfg.init_scale < cfg.model.init_std,
)


@register
class TopicsRealTwoStage(RealTextExperiment[RealTwoStageConfig]):
    Config = RealTwoStageConfig

    def run(self, cfg: RealTwoStageConfig, ctx: RunContext) -> None:
        data = prepare_data(cfg, ctx.writer.path / "cache", ctx.progress)
        gcfg = encoder_config(cfg, data.vocab)

        def build(seeds: list[int]) -> GPT:
            return near_zero_qkv_init_(GPT(gcfg, seeds), cfg.init_scale, cfg.qkv_init)

        fit_encoder(ctx, cfg, data, build=build, probes=[AttentionWeightProbe(cfg.rotation_lag)], probe_every=1)
        write_info(ctx, data)

    @staticmethod
    def curves(cfg: RealTwoStageConfig, run: RunView, name: str, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """``(steps (S,), values (E, S))`` of ``{name}/L{layer}`` up to the horizon."""
        steps, vals = run.curves(ARM, f"{name}/L{layer}")
        keep = steps <= cfg.claims.horizon
        return steps[keep], vals[:, keep]

    def measure(self, cfg: RealTwoStageConfig, run: RunView) -> Measurements:
        """Per layer: the two-stage lags (one row), the stage-1 and stage-2 rotation means (one row); the stage
        (K/Q growth, the smallest over layers per member)."""
        c = cfg.claims
        out = Measurements({"corpus": run_info(run)})
        per_layer: dict[str, Any] = {}
        growth = []
        for layer in range(cfg.model.layers):
            n = {}
            for name in WEIGHT_NORMS:
                steps, n[name] = self.curves(cfg, run, name, layer)  # the same steps for every weight
            lg = lags(steps, n["norm_K"], n["norm_Q"], n["norm_V"], c.half)
            growth.append(lg.growth)
            out.row(
                "value-grows-first",
                f"L{layer}",
                lag_sample(lg, steps),
                arms=[ARM],
                context={"layer": layer},
                label=f"layer {layer}: mean lag of W^K, W^Q behind W^V ≥ {c.lag_share:g} of the horizon",
            )
            rs, r = self.curves(cfg, run, WV_ROTATION, layer)
            s1, s2 = rotation_means(rs, r, c.stage1_end, c.horizon)
            out.row(
                "value-rotates-fast-in-stage-1",
                f"L{layer}",
                Sample(s1),
                Sample(s2),
                arms=[ARM],
                context={"layer": layer},
                label=f"layer {layer}: mean rotation of W^V over stage 1 > over stage 2",
            )
            per_layer[f"L{layer}"] = {
                "t_half_K": lg.t_k.tolist(),
                "t_half_Q": lg.t_q.tolist(),
                "t_half_V": lg.t_v.tolist(),
                "lag": lg.lag.tolist(),
                "kq_growth": lg.growth.tolist(),
                "first_step_kq_over_v": lg.first_step.tolist(),
                "rotation_stage1": s1.tolist(),
                "rotation_stage2": s2.tolist(),
            }
        out.stage(
            ARM,
            KQ_GREW,
            np.min(np.stack(growth), axis=0),
            c.kq_growth_min,
            "gt",
            evidence="min over layers of min(‖W^K‖, ‖W^Q‖) at the horizon / at the start",
        )
        out.values["layers"] = per_layer
        return out

    def notes(self, cfg: RealTwoStageConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        info = measured.values["corpus"]
        layers = measured.values["layers"]
        return [
            what_ran(  # leads: every verdict below is on this corpus
                cfg,
                info.get("provenance", "the configured corpus"),
                control=False,
                setting=("Fig. 5's setting (W^K, W^Q, W^V from near zero, trained jointly)"),
            ),
            *super().notes(cfg, measured, groups),
            "Under AdamW the first steps of W^K, W^Q are damped by eps (their gradients carry W^Q, W^K ≈ init, "
            "Eq. 5): their first-step norm change relative to W^V's, per layer (member median): "
            + ", ".join(f"{k} {np.median(v['first_step_kq_over_v']):.2g}" for k, v in layers.items())
            + ".",
        ]

    figures = (
        Curves(
            "fig5_two_stage.png",
            lambda cfg, m: [
                Panel(
                    f"layer {layer}",
                    [Line(ARM, f"{name}/L{layer}", label=FIG5_LABELS[name])],
                    marks={
                        f"stage 1 ends (step {cfg.claims.stage1_end})": cfg.claims.stage1_end,
                        "horizon": cfg.claims.horizon,
                    },
                    ylabel=FIG5_LABELS[name],
                )
                for name in (*WEIGHT_NORMS, WV_ROTATION)
                for layer in range(cfg.model.layers)
            ],
            title="Fig. 5 — W^K, W^Q, W^V norms and W^V rotation (1 − cos(W^V_t, W^V_t−10))/2, members' mean, "
            "band and each member\n(paper: stage 1 ≈ 0-100, stage 2 ≈ 100-400)",
            xlabel="step",
            size=(3.6, 2.6),
            legend=6,
            columns=lambda cfg: cfg.model.layers,
        ),
    )
