"""``topics-attn``: seed 004 (Li, Li & Risteski, ICML 2023), Tables 3 and 4 (App. G.2), Thms. 3 and 5.

The one-hot model of Eq. 7 (``W^E = I`` frozen) with ``W^K``, ``W^Q``, ``W^V`` and the biases trained jointly
under the cross-entropy loss (Eq. 4) on §6.1's LDA documents, no L2, for Adam lr {0.003, 0.01, 0.03} and SGD
lr {0.01, 0.03} (Table 3's rows; "SGD 0.003" failed to train in the paper and is left out there too). Each optimiser is one ensemble
with per-member learning rates (``Trainer(member_lr=...)``, exact). Table 4 reports 10 Adam runs each at
lr 0.003 and 0.01: those settings get ``table4_seeds`` members (the others ``members``), and every member
is classified by its trained ``W^V``, as the paper selects runs by the pattern of ``W^V``.

Classification (statistics of :func:`tdlab.probes.blocks.block_stats` on the word block of ``W^V``: block
contrast ``z`` and uniformity ``u``): **block**, **diagonal**, **mixed** or **unstructured**.

Attention (App. G.3 and :func:`tdlab.probes.blocks.model_attention_averages`): ``heldout_docs`` fresh
*unmasked* documents per member (their own random stream), cut to their first 100 tokens before the forward
pass, weights scaled by ``n/100`` (n = the cut length); averages over all position pairs (``i = j`` included)
of the same word ``a_sw``, same topic-different word ``a_st``, different topics ``a_dt``. Measured before the
first step and at the end (a trainer probe).

Rows, per setting, are means over its block / diagonal members. A row depends on exactly those members: its
health and training stage (:data:`~.training.FLOOR_CLOSED`) are theirs (``{setting}/{class}``), so that an
untrained member elsewhere in the ensemble holds nothing back. The paper's rows are shown beside ours
(measurements, notes, figure); their numbers are copied from App. G.2.

Its readings of the seed and its claims are declared in the seed's ``experiments.yaml`` (``tdlab explain
topics-attn``).

The stage's reference is a true lower bound of every member's cross-entropy: the Bayes loss of a predictor that
knows θ and sees the masked position's own token (:func:`~.training.masked_loss_floor`, 2.896 nats at §6.1's
setting), so the gate (half way from log(Tv) = 4.605 to it: 3.751) asks of every member that it trained. The
loss of predicting each masked word's document distribution (E[H(p)] = 3.149 nats) is not a bound: a kept or
replaced word at the query position tells the model about its target, and a paper-profile member ended at
3.130.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ArmHealth, GroupResult, Measurements, Sample
from tdlab.claims.declare import Hypothesis, Provenance
from tdlab.experiments.base import Analysis, Experiment, register
from tdlab.experiments.paper004_topics.common.training import (
    Optimizer,
    Rates,
    StageClaims,
    TopicsExperimentConfig,
    fit_topics,
    masked_loss_floor,
    record_gap_stage,
    setting_health,
)
from tdlab.models.topic_attention import TopicAttention, TopicModelConfig
from tdlab.probes.blocks import block_stats, pooled_attention_averages
from tdlab.run_context import RunContext
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import generators, member_seeds
from tdlab.tasks.topics import Topics
from tdlab.theory.topics import c3, trivial_masked_error
from tdlab.theory.topics_landscape import assumption4

ATTN = ("attn_sw", "attn_st", "attn_dt")  # metric names of a_sw, a_st, a_dt
HELDOUT = "heldout-attention"  # the random stream of the held-out documents (tdlab.seeding purpose)
NORM_LEN = 100  # G.3: "normalize the sentence length to 100"
MODEL: dict[str, Any] = {"onehot": True}  # in the profiles too, so that --set model.x merges into it
KINDS = ("block", "diagonal", "mixed", "unstructured")

# App. G.2, Table 3 (block-wise W^V, CE, one-hot): mean ± std over 3 runs ("SGD 0.01": 1 run, no std).
TABLE3: dict[str, dict[str, tuple[float, float | None]]] = {
    "adam/lr0.003": {"a_sw": (0.00759, 0.00171), "a_st": (0.0108, 0.000657), "a_dt": (0.00689, 0.000160)},
    "adam/lr0.01": {"a_sw": (0.00811, 0.000705), "a_st": (0.010, 0.000392), "a_dt": (0.00707, 0.000178)},
    "adam/lr0.03": {"a_sw": (0.00453, 0.000346), "a_st": (0.0116, 0.000460), "a_dt": (0.00665, 0.000200)},
    "sgd/lr0.01": {"a_sw": (0.0105, None), "a_st": (0.0106, None), "a_dt": (0.00673, None)},
    "sgd/lr0.03": {"a_sw": (0.0140, 0.00158), "a_st": (0.0103, 0.000357), "a_dt": (0.00641, 0.0000239)},
}
# App. G.2, Table 4 (diagonal W^V, CE, Adam): mean ± std over 7 runs selected out of 10.
TABLE4: dict[str, dict[str, tuple[float, float | None]]] = {
    "adam/lr0.003": {"a_sw": (0.0916, 0.000901), "a_st": (0.00185, 0.000170), "a_dt": (0.00256, 0.0000332)},
    "adam/lr0.01": {"a_sw": (0.0918, 0.00244), "a_st": (0.00182, 0.000474), "a_dt": (0.00256, 0.000109)},
}


class AttnClaims(StageClaims):
    """Classification thresholds and the Table 3 ratio (ours, fixed before any run)."""

    z_min: float = Field(3.0, gt=0.0)  # W^V has topic structure: block contrast z ≥ this (as topics-wv)
    u_block: float = Field(0.5, gt=-10.0, le=10.0)  # block member: uniformity u ≥ this
    u_diag: float = Field(0.2, gt=-10.0, le=10.0)  # diagonal member: u ≤ this (topics-wv's Fig. 6 rule)
    st_over_dt_min: float = Field(1.2, gt=0.0)  # Table 3: a_st / a_dt ≥ this (paper 1.41-1.74)

    @model_validator(mode="after")
    def _check(self) -> AttnClaims:
        if self.u_diag >= self.u_block:
            raise ValueError(
                f"u_diag={self.u_diag} must be below u_block={self.u_block} (the classes must not overlap)"
            )
        return self


class TopicsAttnConfig(TopicsExperimentConfig):
    members: int = Field(3, ge=1, le=4096)  # seeds per setting (Table 3: 3 runs)
    table4_seeds: int = Field(10, ge=1, le=4096)  # seeds of the Table 4 settings (Table 4: 10 runs)
    adam_lrs: Rates = [0.003, 0.01, 0.03]  # Table 3's Adam rows
    sgd_lrs: Rates = [0.01, 0.03]  # Table 3's SGD rows (SGD 0.003 did not train in the paper)
    table4_lrs: Rates = [0.003, 0.01]  # Table 4's rows (Adam)
    heldout_docs: int = Field(200, ge=1, le=1_000_000)  # held-out unmasked documents per member (seed silent)
    heldout_chunk: int = Field(50, ge=1, le=1_000_000)  # documents per forward pass (memory only)
    cut: int = Field(100, ge=1, le=65536)  # G.3: documents cut to their first 100 tokens
    model: TopicModelConfig = TopicModelConfig(**MODEL)  # Eq. 7, d = d_a = V, N(0, 0.02²) init (seed silent)
    claims: AttnClaims = AttnClaims()

    @model_validator(mode="after")
    def _check(self) -> TopicsAttnConfig:
        if not self.adam_lrs and not self.sgd_lrs:
            raise ValueError("adam_lrs / sgd_lrs: list at least one learning rate")
        if not set(self.table4_lrs) <= set(self.adam_lrs):
            raise ValueError(f"table4_lrs: Table 4's settings are Adam ones; each must be in adam_lrs={self.adam_lrs}")
        m = self.model
        if not m.onehot or m.uniform_attn or m.embed_only or m.frozen_wv:
            raise ValueError(
                "model: Tables 3-4 train W^K, W^Q, W^V on one-hot inputs; set onehot=true and leave "
                "uniform_attn, embed_only, frozen_wv unset"
            )
        if m.vocab != self.task.T * self.task.v + 1:
            raise ValueError(f"model.vocab must be T*v + 1 = {self.task.T * self.task.v + 1}")
        if self.task.T < 2 or self.task.v < 2:
            raise ValueError("task.T, task.v: the W^V block statistics need T >= 2 and v >= 2")
        return self


def _lambda5(cfg: TopicsAttnConfig) -> float:
    return c3(cfg.task.p_m, cfg.task.p_c) / (cfg.task.v - 1)


def _converged_to(kind: str, text: str) -> Hypothesis:
    """Tables 3 and 4 report only the runs whose W^V converged to the table's pattern: a row is the paper's
    only when it has at least one member of that class (a setting without one is outside the statement)."""
    return Hypothesis(text, lambda cfg, row: row.context.get("class") == kind and row.measured.n > 0, on="row")


BLOCK_RUNS = _converged_to(
    "block",
    "W^V converged to a block-wise pattern closer to uniform within blocks (Table 3's runs): the row has at least "
    "one member classified block",
)
DIAGONAL_RUNS = _converged_to(
    "diagonal",
    "W^V converged to a diagonal pattern (Table 4's runs, Def. 2's D^V): the row has at least one member "
    "classified diagonal",
)
ASSUMPTION_4 = Hypothesis(
    "Assumption 4 (Thms. 3, 5): p_m < 1/2, p_c = p_r ∈ (0, 1/2)",
    lambda cfg: assumption4(cfg.task.p_m, cfg.task.p_c, cfg.task.p_r),
)


def _table4_thm5_same_topic_over_same_word_below_lambda5_expected(cfg: Any, row: Any) -> float:
    return _lambda5(cfg)


def setting_name(optimizer: str, lr: float) -> str:
    """``"adam/lr0.01"`` (the rows of Tables 3 and 4)."""
    return f"{optimizer}/lr{lr:g}"


def member_lrs(cfg: TopicsAttnConfig, optimizer: str) -> list[float]:
    """The learning rate of every member of arm ``optimizer``, in member order (each lr's members contiguous:
    ``table4_seeds`` for Adam's Table 4 rates, ``members`` otherwise)."""
    lrs = cfg.adam_lrs if optimizer == "adam" else cfg.sgd_lrs
    out: list[float] = []
    for lr in lrs:
        n = max(cfg.members, cfg.table4_seeds) if optimizer == "adam" and lr in cfg.table4_lrs else cfg.members
        out.extend([lr] * n)
    return out


def classify(u: np.ndarray, z: np.ndarray, claims: AttnClaims | None = None) -> np.ndarray:
    """Each member's ``W^V`` pattern: ``"block"``, ``"diagonal"``, ``"mixed"`` or ``"unstructured"``.

    Args:
        u: ``(E,)`` uniformity of the word block of ``W^V`` (:func:`block_stats`).
        z: ``(E,)`` block contrast of the same block.
    Returns:
        ``(E,)`` array of class names (module docstring for the rule); NaN statistics are ``"unstructured"``.
    """
    claims = AttnClaims() if claims is None else claims
    u, z = np.asarray(u, dtype=float), np.asarray(z, dtype=float)
    structured = np.isfinite(u) & (z >= claims.z_min)
    out = np.full(u.shape, "unstructured", dtype=object)
    out[structured & (u >= claims.u_block)] = "block"
    out[structured & (u <= claims.u_diag)] = "diagonal"
    out[structured & (u > claims.u_diag) & (u < claims.u_block)] = "mixed"
    return out


@dataclass(frozen=True)
class SettingAttention:
    """One setting's members: their attention averages, ``W^V`` class and final loss (fields ``(E_s,)``)."""

    name: str  # e.g. "adam/lr0.01"
    arm: str
    index: np.ndarray  # the members' indices within the arm
    a_sw: np.ndarray
    a_st: np.ndarray
    a_dt: np.ndarray
    cls: np.ndarray  # classify(u, z)
    u: np.ndarray  # uniformity of W^V (NaN when unknown)
    z: np.ndarray  # block contrast of W^V
    loss: np.ndarray  # final test loss

    def of(self, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keep = self.cls == kind
        return self.a_sw[keep], self.a_st[keep], self.a_dt[keep]

    def group(self, kind: str) -> str:
        """The name under which this setting's ``kind`` members are gated (``"adam/lr0.01/block"``)."""
        return f"{self.name}/{kind}"


def _probe(cfg: TopicsAttnConfig):
    """``model -> {attn_sw, attn_st, attn_dt, wv_u, wv_z: (E,)}`` on each member's own held-out documents."""
    task, T, v = Topics(cfg.task), cfg.task.T, cfg.task.v

    def probe(model: TopicAttention) -> dict[str, torch.Tensor]:
        device = model.W_V.device
        docs = task.sample(generators(model.seeds, HELDOUT, device), cfg.heldout_docs, cfg.task.n_max, device)
        avg = pooled_attention_averages(
            model, docs["tokens"], docs["key_mask"], T, v, cfg.heldout_chunk, cut=cfg.cut, norm_len=NORM_LEN
        )
        st = block_stats(model.value_matrix().double(), T, v)
        return {"attn_sw": avg[0], "attn_st": avg[1], "attn_dt": avg[2], "wv_u": st.u, "wv_z": st.z}

    return probe


def _paper_row(name: str, table: dict) -> dict | None:
    row = table.get(name)
    return None if row is None else {k: {"mean": m, "std": s} for k, (m, s) in row.items()}


@register
class TopicsAttn(Experiment[TopicsAttnConfig]):
    Config = TopicsAttnConfig

    @staticmethod
    def arms(cfg: TopicsAttnConfig) -> list[Optimizer]:
        grid: tuple[tuple[Optimizer, list[float]], ...] = (("adam", cfg.adam_lrs), ("sgd", cfg.sgd_lrs))
        return [opt for opt, lrs in grid if lrs]

    def run(self, cfg: TopicsAttnConfig, ctx: RunContext) -> None:
        model = cfg.model.updated(
            {"p_m": cfg.task.p_m, "p_c": cfg.task.p_c, "p_r": cfg.task.p_r, "authors_compat": cfg.authors_compat}
        )
        probe = _probe(cfg)
        for opt in self.arms(cfg):
            lrs = member_lrs(cfg, opt)
            seeds = member_seeds(cfg.seed, len(lrs))
            # the attention probe runs before the first step and at the end only (probe_every = steps)
            fit_topics(
                ctx,
                cfg,
                opt,
                model,
                "ce",
                opt,
                seeds,
                train=cfg.train.updated({"lr": lrs[0]}),
                probes=[probe],
                probe_every=cfg.train.steps,
                member_lr=dict(zip(seeds, lrs, strict=True)),
            )

    def trivial_error(self, cfg: TopicsAttnConfig, arm: str) -> float:
        return trivial_masked_error(cfg.task, "ce")

    def settings(self, cfg: TopicsAttnConfig, run: RunView) -> list[SettingAttention]:
        """Every setting's members with their final attention averages and ``W^V`` class, from the stored run."""
        out = []
        for arm in self.arms(cfg):
            lrs = np.asarray(member_lrs(cfg, arm))
            vals = {n: run.final(arm, n) for n in (*ATTN, "wv_u", "wv_z", "test_loss")}
            cls = classify(vals["wv_u"], vals["wv_z"], cfg.claims)
            for lr in dict.fromkeys(lrs.tolist()):
                k = lrs == lr
                out.append(
                    SettingAttention(
                        setting_name(arm, lr),
                        arm,
                        np.flatnonzero(k),
                        vals["attn_sw"][k],
                        vals["attn_st"][k],
                        vals["attn_dt"][k],
                        cls[k],
                        vals["wv_u"][k],
                        vals["wv_z"][k],
                        vals["test_loss"][k],
                    )
                )
        return out

    def health(self, cfg: TopicsAttnConfig, run: Run | RunView) -> dict[str, ArmHealth]:
        """Every arm's health, and that of each setting's block and diagonal members (the rows' arms)."""
        run = run if isinstance(run, RunView) else RunView(run)
        out = super().health(cfg, run)
        triv = trivial_masked_error(cfg.task, "ce")
        for s in self.settings(cfg, run):
            groups = {s.group(kind): s.index[s.cls == kind] for kind in ("block", "diagonal")}
            out.update(setting_health(run, s.arm, {k: v for k, v in groups.items() if len(v)}, triv))
        return out

    def measure(self, cfg: TopicsAttnConfig, run: RunView) -> Measurements:
        """One row per setting and claim on its block / diagonal members; their training stage; the class
        counts, attention averages and the paper's rows per setting."""
        v, c = cfg.task.v, cfg.claims
        # the stage's reference is a true lower bound of every member's loss (optimum_masked_loss is not one)
        triv, opt = trivial_masked_error(cfg.task, "ce"), masked_loss_floor(cfg, "ce", True)
        out = Measurements(
            {"c3": c3(cfg.task.p_m, cfg.task.p_c), "lambda5": _lambda5(cfg), "uniform_loss": triv, "optimum_loss": opt}
        )
        table4 = {setting_name("adam", lr) for lr in cfg.table4_lrs}
        for s in self.settings(cfg, run):
            for kind in ("block", "diagonal"):
                keep = s.cls == kind
                if keep.any():
                    record_gap_stage(out, s.group(kind), s.loss[keep], triv, opt, c.gap_share, reference="Bayes floor")
            sw, st, dt = s.of("block")
            prov: Provenance = "paper" if s.name in TABLE3 else "ours"
            arms, ctx = [s.group("block")], {"setting": s.name, "class": "block"}
            with np.errstate(divide="ignore", invalid="ignore"):
                out.row(
                    "table3-same-topic-over-different-topic",
                    s.name,
                    Sample(st / dt),
                    arms=arms,
                    provenance=prov,
                    context=ctx,
                    label=f"{s.name}: a_st / a_dt ≥ {c.st_over_dt_min} ({len(st)} block members)",
                )
                out.row(
                    "table3-thm3-topic-average-above-different-topic",
                    s.name,
                    Sample(((v - 1) * st + sw) / (v * dt)),
                    arms=arms,
                    provenance=prov,
                    context=ctx,
                    label=f"{s.name}: ((v − 1) a_st + a_sw) / (v a_dt) > 1 ({len(st)} block members)",
                )
            sw, st, dt = s.of("diagonal")
            if s.name in table4 or len(sw):
                prov = "paper" if s.name in TABLE4 else "ours"
                arms, ctx = [s.group("diagonal")], {"setting": s.name, "class": "diagonal"}
                with np.errstate(divide="ignore", invalid="ignore"):
                    out.row(
                        "table4-same-word-then-different-topic-then-same-topic",
                        s.name,
                        Sample(np.minimum(sw / dt, dt / st)),
                        arms=arms,
                        provenance=prov,
                        context=ctx,
                        label=f"{s.name}: min(a_sw / a_dt, a_dt / a_st) > 1 ({len(sw)} diagonal members)",
                    )
                    out.row(
                        "table4-thm5-same-topic-over-same-word-below-lambda5",
                        s.name,
                        Sample(st / sw),
                        arms=arms,
                        provenance=prov,
                        context=ctx,
                        label=f"{s.name}: a_st / a_sw < λ5 = {_lambda5(cfg):.4f} ({len(sw)} diagonal members)",
                    )
            entry = {
                "classes": {k: int((s.cls == k).sum()) for k in KINDS},
                "class": s.cls.tolist(),
                "wv_u": s.u.tolist(),
                "wv_z": s.z.tolist(),
                "a_sw": s.a_sw.tolist(),
                "a_st": s.a_st.tolist(),
                "a_dt": s.a_dt.tolist(),
                "final_test_loss": s.loss.tolist(),
                "gap_closed": ((triv - s.loss) / (triv - opt)).tolist(),
                "paper_table3": _paper_row(s.name, TABLE3),
                "paper_table4": _paper_row(s.name, TABLE4),
            }
            for kind in ("block", "diagonal"):
                sw, st, dt = s.of(kind)
                if len(sw):
                    entry[f"{kind}_mean"] = {
                        "a_sw": float(sw.mean()),
                        "a_st": float(st.mean()),
                        "a_dt": float(dt.mean()),
                    }
            out.values[s.name] = entry
        out.values["at_init_mean"] = {
            n: float(np.nanmean(np.concatenate([run.initial(arm, n) for arm in self.arms(cfg)]))) for n in ATTN
        }
        return out

    def notes(self, cfg: TopicsAttnConfig, measured: Measurements, groups: list[GroupResult]) -> list[str]:
        c = cfg.claims
        notes = []
        for name, entry in measured.values.items():
            if not isinstance(entry, dict) or "classes" not in entry:
                continue
            k = entry["classes"]
            line = (
                f"{name}: W^V block {k['block']}, diagonal {k['diagonal']}, mixed {k['mixed']}, unstructured "
                f"{k['unstructured']}; share of the uniform-to-optimum loss gap closed "
                + "/".join(f"{x:.2f}" for x in entry["gap_closed"])
            )
            for kind, table, label in (("block", TABLE3, "Table 3"), ("diagonal", TABLE4, "Table 4")):
                ours, paper = entry.get(f"{kind}_mean"), table.get(name)
                if ours:
                    line += f"; {kind} mean a_sw/a_st/a_dt = {ours['a_sw']:.4g}/{ours['a_st']:.4g}/{ours['a_dt']:.4g}"
                if ours and paper:
                    line += f" ({label}: {paper['a_sw'][0]:.4g}/{paper['a_st'][0]:.4g}/{paper['a_dt'][0]:.4g})"
            notes.append(line)
            u, z = np.asarray(entry["wv_u"]), np.asarray(entry["wv_z"])
            weak = (np.asarray(entry["class"]) == "unstructured") & (u >= c.u_block)
            if weak.any():  # reported, not judged: the z gate was fixed before any run
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = np.asarray(entry["a_st"])[weak] / np.asarray(entry["a_dt"])[weak]
                notes.append(
                    f"{name}: {int(weak.sum())} member(s) with uniform blocks "
                    f"(u ≥ {c.u_block}, u = {', '.join(f'{x:.2f}' for x in u[weak])}) but weak contrast z = "
                    f"{', '.join(f'{x:.2f}' for x in z[weak])} < {c.z_min}: not classified "
                    f"block, not judged; their a_st / a_dt = {', '.join(f'{x:.2f}' for x in r)}"
                )
        return [*super().notes(cfg, measured, groups), *notes]

    def plot(self, cfg: TopicsAttnConfig, run: RunView, analysis: Analysis, figdir: Path) -> list[Path]:
        from tdlab.report.figures import plt, save_figure

        found = self.settings(cfg, run)
        paths = []
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
        for ax, kind, table, title in (
            (axes[0], "block", TABLE3, "Table 3 — block-wise W^V members"),
            (axes[1], "diagonal", TABLE4, "Table 4 — diagonal W^V members"),
        ):
            names = [s.name for s in found if (s.cls == kind).any() or s.name in table]
            for j, key in enumerate(("a_sw", "a_st", "a_dt")):
                ours = []
                for n in names:
                    s = next(x for x in found if x.name == n)
                    vals = dict(zip(("a_sw", "a_st", "a_dt"), s.of(kind), strict=True))[key]
                    ours.append(float(vals.mean()) if len(vals) else np.nan)
                paper = [table[n][key][0] if n in table else np.nan for n in names]
                x = np.arange(len(names)) + (j - 1) * 0.27
                ax.bar(x - 0.06, ours, width=0.12, color=f"C{j}", label=f"{key} ours")
                ax.bar(x + 0.06, paper, width=0.12, color=f"C{j}", alpha=0.4, hatch="//", label=f"{key} paper")
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, fontsize=8)
            ax.set_ylabel("average attention (× n/100)")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=6, ncol=3)
        paths.append(save_figure(fig, figdir / "tables3_4_attention.png"))
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, s in enumerate(found):
            ax.scatter(s.u, s.z, label=s.name, color=f"C{i}", s=18)
        ax.axvline(cfg.claims.u_block, ls="--", c="k", lw=0.8)
        ax.axvline(cfg.claims.u_diag, ls=":", c="k", lw=0.8)
        ax.axhline(cfg.claims.z_min, ls="-.", c="gray", lw=0.8)
        ax.set_xlabel("uniformity u of W^V (1 uniform blocks, 0 diagonal)")
        ax.set_ylabel("block contrast z of W^V")
        ax.set_title("W^V class per member (block right of --, diagonal left of ..., above -.)", fontsize=8)
        ax.legend(fontsize=7)
        paths.append(save_figure(fig, figdir / "wv_classes.png"))
        return paths
