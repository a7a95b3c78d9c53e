"""``markov-icl-construction``: seed 003 ("Attention with Markov", talk), Part II, slide "Intuition".

The talk's reading of its 3-layer result: attention weights ``att_{T,n} ∝ exp(κ cos(v_n, u_T))`` realise
a k-th order induction head ("capture context", then "match contexts & count"). Two parts:

* **The construction, no training** (horizon ``static``; :func:`tdlab.models.normalised_attention.construction`):
  the 3-layer normalised-attention model with weights set by hand against the order-k add-α in-context
  estimator (:func:`tdlab.theory.kgram.kgram_probs`) on the same fresh sequences of
  :class:`~tdlab.tasks.markov_kth.InContextMarkov`, for a grid of κ: the gap is the mean KL of the
  estimator's next-token law from the construction's (:func:`tdlab.probes.icl_estimator.construction_gaps`),
  an exact computation with no seed noise (``deterministic`` samples).
* **The same model, trained** (3 layers, cosine attention, learned κ, relative key/value embeddings,
  random init): its last layer's context-matching score (:func:`tdlab.probes.attention.context_matching_score`:
  attention mass on keys whose preceding k tokens equal the query's current k-context) against the
  construction's on the same sequences, each as its excess over chance (uniform causal attention),
  measured once, at the end of training.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
markov-icl-construction``).

Metric layout: arm ``construction/k{k}``: per κ index ``i`` (the step column) ``kappa``, ``gap``
(mean per-position KL(estimator || construction), nats per token, member 0), ``max_kl`` (its largest
value), ``loss_gap`` (construction's loss − estimator's on the realised tokens, either sign); arm
``train/k{k}`` the trainer's curves, ``train/k{k}/probe`` ``probe_loss``, ``est_loss_order{j}``
(``j = 0..k``), ``match_score_layer{l}``, ``match_chance_layer{l}``, ``construction_score``,
``kappa_layer{l}`` per member.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator

from tdlab.claims import GroupResult, Measurements, Sample
from tdlab.claims.calibration import planted_pair
from tdlab.claims.declare import Hypothesis
from tdlab.config import Config, Distinct
from tdlab.experiments.base import Analysis, Experiment, ExperimentConfig, register
from tdlab.experiments.paper003_attention_markov.common.estimator_stage import (
    PAST_LOWER_ORDER,
    PROBE_DATA,
    record_stage,
)
from tdlab.models.normalised_attention import NormalisedAttention, NormAttnConfig, construction
from tdlab.probes.attention import attention_patterns, context_match_mask, context_matching_score, plot_attention_maps
from tdlab.probes.icl_estimator import construction_gaps
from tdlab.report.standard_figures import Curves, Panel, Series
from tdlab.run_context import Fit, RunContext
from tdlab.run_view import RunView
from tdlab.runs import RunDirError
from tdlab.seeding import derive_seed, generators, member_seeds
from tdlab.tasks.markov_kth import InContextMarkov
from tdlab.theory.kgram import estimator_losses
from tdlab.train.cpu import cpu_threads
from tdlab.train.trainer import TrainConfig, Trainer, next_token_loss


def construction_arm(k: int) -> str:
    return f"construction/k{k}"


def train_arm(k: int) -> str:
    return f"train/k{k}"


class ConstructionClaimConfig(Config):
    # The hand-set model is exact only as κ → ∞: its gap (mean KL per token) to the estimator at the
    # largest κ of the grid must be below 1e-3 nats (ours; ~0.2% of the order-1 estimator's loss).
    tol_nats: float = Field(1e-3, gt=0.0, le=1.0)
    # "Decreases with κ": each step along the grid lowers the gap; rises below this size are float
    # rounding of two equal numbers, not a rise (ours).
    rounding: float = Field(1e-12, ge=0.0, le=1e-3)
    # Trained layer-3 context-matching score above chance >= this fraction of the construction's above
    # chance, on the same sequences (ours: the talk shows attention maps, no number).
    score_fraction: float = Field(0.5, gt=0.0, le=2.0)
    # The stage the trained claim needs (estimator_stage.PAST_LOWER_ORDER): past the order-(k-1) estimator
    # by this share of the gap to the order-k one (seed 000's plateau-escape share; why: estimator_stage).
    stage_share: float = Field(0.25, gt=0.0, lt=1.0)


class ConstructionProbeConfig(Config):
    sequences: int = Field(128, ge=4, le=100_000)  # fresh sequences (per member) for gaps and scores (ours)
    seq_len: int = Field(64, ge=8, le=4096)  # their length (ours; the training length by default below)
    map_len: int = Field(32, ge=4, le=512)  # tokens drawn in the attention maps


class ConstructionModelConfig(NormAttnConfig):
    """The trained model: 3 layers (talk), d = 16, κ learned from 8, relative k/v clipped at 8 (ours)."""

    d: int = Field(16, ge=2, le=1024)
    layers: int = Field(3, ge=1, le=16)


class ConstructionTrainConfig(TrainConfig):
    """Ours (the talk gives no schedule): AdamW lr 1e-2, cosine, T = 64, batch 32, 600 steps."""

    steps: int = Field(600, ge=1, le=10_000_000)
    batch: int = Field(32, ge=1, le=1_000_000)
    seq_len: int = Field(64, ge=2, le=65536)
    lr: float = Field(1e-2, gt=0.0, le=100.0)
    eval_every: int = Field(50, ge=1)
    eval_batches: int = Field(4, ge=1, le=100_000)


class MarkovICLConstructionConfig(ExperimentConfig):
    members: int = Field(3, ge=1, le=4096)
    ks: Annotated[list[Annotated[int, Field(ge=1, le=8)]], Field(min_length=1), Distinct] = [
        1,
        2,
    ]  # construction orders (talk: any k)
    kappas: list[float] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 400.0]  # κ grid (ours)
    train_ks: Annotated[list[Annotated[int, Field(ge=1, le=8)]], Distinct] = [
        1,
        2,
    ]  # orders the normalised-attention model is trained on
    alpha: float = Field(1.0, gt=0.0, le=100.0)  # Dirichlet(α) rows; the add-α estimator is then Bayes
    model: ConstructionModelConfig = ConstructionModelConfig()
    train: ConstructionTrainConfig = ConstructionTrainConfig()
    probe: ConstructionProbeConfig = ConstructionProbeConfig()
    claims: ConstructionClaimConfig = ConstructionClaimConfig()
    cpu_threads: int | None = Field(1, ge=1, le=1024)

    @field_validator("kappas")
    @classmethod
    def _kappas(cls, v: list[float]) -> list[float]:
        if len(v) < 2 or any(b <= a for a, b in itertools.pairwise(v)) or v[0] <= 0:
            raise ValueError("must list at least two increasing positive values")
        return v

    @model_validator(mode="after")
    def _check(self) -> MarkovICLConstructionConfig:
        for k in self.ks:
            if self.kappas[0] <= (k - 1) * math.log(2) / 2:
                raise ValueError(f"kappas: the construction of order k={k} needs κ > (k - 1) ln2 / 2")
        if self.train_ks and self.model.readout != "linear":
            raise ValueError("model.readout must be 'linear' for the trained model")
        if self.probe.map_len > self.probe.seq_len:
            raise ValueError("probe.map_len must not exceed probe.seq_len")
        return self


THREE_LAYERS = Hypothesis(
    "3 layers (talk, Part II, main result; the construction's are fixed at 3): model.layers = 3",
    lambda cfg: cfg.model.layers == 3,
)


def _matching_cases(cfg: MarkovICLConstructionConfig, context: Any) -> tuple[Sample, Sample]:
    """Planted ratios at the run's members: the construction's own matching (ratio 1: the trained head is the
    construction's) against uniform causal attention (ratio 0: chance, no context matching), each spread by a
    fifth of its distance to ``claims.score_fraction``."""
    f = cfg.claims.score_fraction
    return planted_pair(1.0, 0.0, min(f, abs(1.0 - f)) / 5, cfg.members)


def _gap_panel(cfg: MarkovICLConstructionConfig, cons: dict[str, dict]) -> Panel:
    """Each order's mean and largest per-position KL against κ (log–log; an exact 0 drawn at 1e-17), the
    tolerance as a reference line."""
    series = []
    for key, c in cons.items():
        if c["gap"]:
            series.append(Series(c["kappa"], np.maximum(c["gap"], 1e-17), f"{key}: mean KL", "o-"))
            series.append(Series(c["kappa"], np.maximum(c["max_kl"], 1e-17), f"{key}: max KL", "x--"))
    return Panel(
        "Construction vs order-k Laplace estimator",
        series=series,
        reference={"tolerance": cfg.claims.tol_nats},
        xscale="log",
        yscale="log",
    )


@register
class MarkovICLConstruction(Experiment[MarkovICLConstructionConfig]):
    Config = MarkovICLConstructionConfig

    def run(self, cfg: MarkovICLConstructionConfig, ctx: RunContext) -> None:
        seeds = member_seeds(cfg.seed, cfg.members)
        with cpu_threads(cfg.cpu_threads, ctx.device):
            for k in cfg.ks:
                task = InContextMarkov(k, 2, cfg.alpha)
                g = torch.Generator().manual_seed(derive_seed(cfg.seed, "construction", k))
                x = task.sample([g], cfg.probe.sequences, cfg.probe.seq_len)[0]
                rows = []
                for i, (kap, (gap, kl, lgap)) in enumerate(
                    zip(cfg.kappas, construction_gaps(x, k, cfg.kappas, cfg.alpha), strict=True)
                ):
                    rows += [(i, 0, "kappa", kap), (i, 0, "gap", gap), (i, 0, "max_kl", kl), (i, 0, "loss_gap", lgap)]
                ctx.store_rows(construction_arm(k), rows)
            fits = [
                Fit(
                    train_arm(k),
                    Trainer(cfg.train, ctx.device, ctx.progress, label=train_arm(k)),
                    lambda s: NormalisedAttention(cfg.model, s),
                    seeds,
                    InContextMarkov(k, 2, cfg.alpha),
                )
                for k in cfg.train_ks
            ]
            for fit, result in zip(
                fits, ctx.fit_all(fits), strict=True
            ):  # the orders train at once on one-thread lanes
                model = fit.build(seeds)
                model.load_state_dict({n: torch.stack([s[n] for s in result.states]) for n in result.states[0]})
                ctx.store_rows(f"{fit.arm}/probe", self.probe(model.to(ctx.device), fit.task, cfg, seeds, ctx.device))

    @staticmethod
    def probe_tokens(
        task: InContextMarkov, cfg: MarkovICLConstructionConfig, seeds: list[int], device: str = "cpu"
    ) -> torch.Tensor:
        return task.sample(generators(seeds, PROBE_DATA, device), cfg.probe.sequences, cfg.probe.seq_len, device)

    @classmethod
    @torch.no_grad()
    def probe(
        cls,
        model: NormalisedAttention,
        task: InContextMarkov,
        cfg: MarkovICLConstructionConfig,
        seeds: list[int],
        device: str = "cpu",
    ) -> list[tuple[int, int, str, float]]:
        """Loss vs the order-0..k estimators, every layer's matching score, and the construction's score
        (largest κ) on the same fresh sequences of each member."""
        model.eval()
        k, step = task.k, cfg.train.steps
        x = cls.probe_tokens(task, cfg, seeds, device)  # (E, S, T)
        loss = next_token_loss(model(x[..., :-1]), x[..., 1:]).double()  # (E,)
        est = {j: v.mean(-1) for j, v in estimator_losses(x, k, 2, cfg.alpha).items()}
        pats = attention_patterns(model, x)
        built = construction(k, cfg.kappas[-1], cfg.alpha, members=len(seeds)).to(x.device)
        cpat = attention_patterns(built, x)[-1]
        cscore, _ = context_matching_score(cpat, x[:, :, None], k, keep_dims=1)
        rows = []
        for e in range(len(seeds)):
            rows += [(step, e, "probe_loss", float(loss[e])), (step, e, "construction_score", float(cscore[e]))]
            rows += [(step, e, f"est_loss_order{j}", float(v[e])) for j, v in est.items()]
        for layer, pat in enumerate(pats):
            score, chance = context_matching_score(pat, x[:, :, None], k, keep_dims=1)
            kap = model.blocks[layer].log_kappa.exp()
            for e in range(len(seeds)):
                rows += [
                    (step, e, f"match_score_layer{layer}", float(score[e])),
                    (step, e, f"match_chance_layer{layer}", float(chance[e])),
                    (step, e, f"kappa_layer{layer}", float(kap[e])),
                ]
        return rows

    def trivial_error(self, cfg: MarkovICLConstructionConfig, arm: str) -> float:
        return math.log(2)

    def measure(self, cfg: MarkovICLConstructionConfig, run: RunView) -> Measurements:
        cl = cfg.claims
        out = Measurements(
            {"tol_nats": cl.tol_nats, "score_fraction": cl.score_fraction, "stage_share": cl.stage_share}
        )
        cons: dict[str, dict] = {}
        for k in cfg.ks:
            arm = construction_arm(k)
            if not run.has(arm, "gap"):
                continue  # not measured (a run cut off before this order): the rows it would give are absent
            # one draw of sequences, stored as member 0 with the κ index in the step column
            gaps, kls, kaps, lgaps = (run.curves(arm, n)[1][0].tolist() for n in ("gap", "max_kl", "kappa", "loss_gap"))
            cons[f"k{k}"] = {"kappa": kaps, "gap": gaps, "max_kl": kls, "loss_gap": lgaps}
            out.row(
                "construction-reaches-estimator",
                f"k{k}",
                Sample([gaps[-1]], deterministic=True),
                context={"k": k, "kappa": kaps[-1]},
                label=f"k={k}: gap at κ={kaps[-1]:g} ≤ {cl.tol_nats} nats",
            )
            out.row(
                "construction-gap-decreases-with-kappa",
                f"k{k}",
                Sample([max(b - a for a, b in itertools.pairwise(gaps))], deterministic=True),
                context={"k": k},
                label=f"k={k}: every step along κ = {', '.join(f'{v:g}' for v in kaps)} lowers the gap "
                f"(rises ≤ {cl.rounding:g} count as rounding)",
            )
        out.values["construction"] = cons
        tr: dict[str, dict] = {}
        last = cfg.model.layers - 1
        for k in cfg.train_ks:
            arm, pa = train_arm(k), f"{train_arm(k)}/probe"
            if not run.has(pa, "probe_loss"):
                continue  # not probed (a run cut off before this order)
            score, chance = run.final(pa, f"match_score_layer{last}"), run.final(pa, f"match_chance_layer{last}")
            cscore, loss = run.final(pa, "construction_score"), run.final(pa, "probe_loss")
            lower, est = run.final(pa, f"est_loss_order{k - 1}"), run.final(pa, f"est_loss_order{k}")
            record_stage(out, arm, loss, lower, est, cl.stage_share, k)
            # Above chance: uniform causal attention already scores `chance` (~0.6 at k = 1), a large
            # fraction of the construction's raw score, so the raw ratio would not test matching.
            ratio = (score - chance) / (cscore - chance)
            tr[f"k{k}"] = {
                "score_last_layer": score.tolist(),
                "construction_score": cscore.tolist(),
                "ratio": ratio.tolist(),
                "chance_last_layer": chance.tolist(),
                "score_by_layer": [run.final(pa, f"match_score_layer{i}").tolist() for i in range(cfg.model.layers)],
                "kappa_by_layer": [run.final(pa, f"kappa_layer{i}").tolist() for i in range(cfg.model.layers)],
                "gap": (loss - est).tolist(),
                "gap_vs_lower_order": (loss - lower).tolist(),
                "past_lower_order": out.stages[arm][PAST_LOWER_ORDER.id].passed,
                "eval_gap_drift": run.drift(arm, "test_loss", minus="test_loss@bayes"),
            }
            out.row(
                "trained-matches-like-construction",
                f"k{k}",
                Sample(ratio),
                arms=[arm],
                context={"k": k},
                label=f"k={k}: (trained layer-{last + 1} score − chance) / (construction's (κ={cfg.kappas[-1]:g}) − chance) "
                f"≥ {cl.score_fraction}",
            )
        out.values["trained"] = tr
        return out

    def notes(self, cfg: MarkovICLConstructionConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        notes = []
        for key, c in measured.values["construction"].items():
            notes.append(
                f"construction {key}: gap by κ "
                + ", ".join(f"{a:g}: {g:.2e}" for a, g in zip(c["kappa"], c["gap"], strict=True))
                + f" nats (mean KL); largest per-position KL at the largest κ {c['max_kl'][-1]:.2e}; "
                "loss gap on the realised tokens " + ", ".join(f"{g:+.1e}" for g in c["loss_gap"]) + "."
            )
        for key, t in measured.values["trained"].items():
            notes.append(
                f"trained {key}: gap to the estimator {np.mean(t['gap']):+.4f} nats (vs the order-{int(key[1:]) - 1} "
                f"one {np.mean(t['gap_vs_lower_order']):+.4f}; {sum(t['past_lower_order'])}/{len(t['gap'])} members "
                f"past that stage; drift {t['eval_gap_drift']:+.4f}); layer scores "
                + ", ".join(f"{np.mean(s):.3f}" for s in t["score_by_layer"])
                + f" (chance {np.mean(t['chance_last_layer']):.3f}); construction {np.mean(t['construction_score']):.3f}; "
                "learned κ by layer " + ", ".join(f"{np.mean(v):.1f}" for v in t["kappa_by_layer"]) + "."
            )
        return [*super().notes(cfg, measured, groups), *notes]

    figures = (
        Curves(
            "construction_gap.png",
            lambda cfg, m: [_gap_panel(cfg, m["construction"])],
            xlabel="κ",
            ylabel="nats",
            legend=7,
        ),
    )

    def plot(self, cfg: MarkovICLConstructionConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        """The declared gap against κ, then the trained model's and the construction's attention maps (their own)."""
        from tdlab.report.figures import save_figure

        paths = super().plot(cfg, run, analysis, figdir)
        seeds = member_seeds(cfg.seed, cfg.members)
        for k in cfg.train_ks:
            try:
                states = run.arrays(train_arm(k))
            except RunDirError:  # an arm that did not finish has no arrays
                continue
            model = NormalisedAttention(cfg.model, seeds)
            model.load_state_dict(states)
            task = InContextMarkov(k, 2, cfg.alpha)
            x = self.probe_tokens(task, cfg, seeds)[:, :1, : cfg.probe.map_len]
            pats = [p[0, 0, 0] for p in attention_patterns(model, x)]
            built = attention_patterns(construction(k, cfg.kappas[-1], cfg.alpha, members=len(seeds)), x)
            maps = pats + [p[0, 0, 0] for p in built]
            titles = [f"trained layer {i + 1}" for i in range(len(pats))] + [
                f"construction layer {i + 1}" for i in range(len(built))
            ]
            fig = plot_attention_maps(
                maps,
                x[0, 0].tolist(),
                titles,
                context_match_mask(x[0, 0], k),
                f"k = {k}, member 0: trained vs hand-set (κ = {cfg.kappas[-1]:g}); red = context matches",
            )
            paths.append(save_figure(fig, figdir / f"attention_k{k}.png"))
        return paths
