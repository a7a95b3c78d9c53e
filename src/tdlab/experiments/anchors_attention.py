"""``anchors-attention``: seed 001 §4.3, App. C–E, Figs. 5, 12, 14 — the two attention layers of the
``anchors-bias`` transformers (trained here, or ``--set from_run=RUN_DIR``; :class:`ProbeSource`).

Layer 1 (Fig. 5 at γ = 0.8, Fig. 12 at 0.3 and 0.5):

* A — the attention matrix of one training sequence (heatmap);
* B — ``|A_jk − 1/j|·j`` (relative error against the average operator) over all entries ``k <= j``,
  rows ``j >= 2`` (1-based), of ``n_probe`` training sequences per member; claims: median ``<= 0.1`` (t)
  at γ = 0.8, the median falls with γ (paired, neighbouring γ), and both also at initialisation
  (Lemma 1: at small init the attention is ``1/j``);
* C–D — ``W^V`` (paper layout ``d_m × d_k``; torch stores its transpose): ``σ1/σ2 >= 3`` (t) at γ = 0.8 and
  above γ = 0.3 (paired); the top left singular vector (in the embedding space) has ``|cos| >= 0.8`` (t)
  with the mean reasoning-anchor embedding and ``<= 0.3`` (t) with the mean memory-anchor one.

Layer 2 (App. D, Fig. 14; γ = 0.8): on the same sequences, the pre-softmax last row
``l = q_L K^T/√d_k`` (``q_L`` from layer 1's output at the last position):

* share of rows that are ``(p, q)``-cliffs (Def. 3, :func:`tdlab.probes.cliffs.is_cliff`) — reported;
* attention mass on the key and anchors ``p..p+q`` (1-based) ``>= 0.5`` (t);
* the positional score ``q_L (W^pos W^K)^T/√d_k`` over positions ``1..L−1``, averaged over sequences:
  Spearman with the position ``>= 0.8`` (t);
* positional cosines ``cos(w^{pos,i}, w^{pos,j})``, ``i, j <= L−1``: ``ρ <= −0.8`` (t) with ``|i − j|``,
  beside Assumption 4's ``cos(π|i − j|/L)`` (Spearman reported).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, model_validator
from scipy.stats import rankdata

from tdlab.config import Config
from tdlab.experiments.anchors_embedding import ProbeConfig, ProbeSource, _quick
from tdlab.experiments.anchors_bias import AnchorsBias
from tdlab.experiments.anchors_mlp import _heat, pair_spearman
from tdlab.experiments.anchors_training import GammaArms
from tdlab.experiments.base import Analysis, register
from tdlab.models.gpt import GPT
from tdlab.probes.cliffs import is_cliff, window_mass
from tdlab.probes.embedding import cosine_matrix, distance_spearman
from tdlab.report.figures import plt, save_figure
from tdlab.runs import Run

__all__ = ["AttentionClaims", "AnchorsAttentionConfig", "AnchorsAttention", "average_operator_error", "wv_spectrum",
           "layer2_rows", "spearman_rows"]


class AttentionClaims(Config):
    """Thresholds (t) of the claims — ours, fixed before any run (issue 15)."""

    avg_err_max: float = Field(0.1, ge=0.0, le=100.0)  # (t) median |A_jk − 1/j|·j <= 0.1 at γ = 0.8
    sv_ratio_min: float = Field(3.0, ge=1.0, le=1e6)  # (t) W^V σ1/σ2 >= 3 at γ = 0.8
    rsn_align_min: float = Field(0.8, ge=0.0, le=1.0)  # (t) |cos(u1, mean reasoning-anchor emb)| >= 0.8
    mem_align_max: float = Field(0.3, ge=0.0, le=1.0)  # (t) |cos(u1, mean memory-anchor emb)| <= 0.3
    window_mass_min: float = Field(0.5, ge=0.0, le=1.0)  # (t) layer-2 attention mass on p..p+q >= 0.5
    pos_score_spearman_min: float = Field(0.8, ge=-1.0, le=1.0)  # (t) positional score rising: Spearman >= 0.8
    pos_rho_max: float = Field(-0.8, ge=-1.0, le=1.0)  # (t) positional cosines ρ <= -0.8
    small_gamma: float = Field(0.8, ge=0.0, le=10.0)
    large_gamma: float = Field(0.3, ge=0.0, le=10.0)


class AnchorsAttentionConfig(ProbeConfig):
    attn_claims: AttentionClaims = AttentionClaims()

    @model_validator(mode="after")
    def _attn(self) -> AnchorsAttentionConfig:
        if self.model.heads != 1:
            raise ValueError(f"model.heads must be 1 (the seed's model; the probes read one head), got {self.model.heads}")
        if self.model.layers < 2:
            raise ValueError(f"model.layers must be >= 2 (layer 2 is probed), got {self.model.layers}")
        for f in ("small_gamma", "large_gamma"):
            if getattr(self.attn_claims, f) not in self.gammas:
                raise ValueError(f"attn_claims.{f}={getattr(self.attn_claims, f)} must be one of gammas={self.gammas}")
        return self


# ------------------------------------------------------------------------------------------------
# Measures


def average_operator_error(pattern: torch.Tensor) -> torch.Tensor:
    """``|A_jk − 1/j|·j`` over the causal entries ``k <= j`` of rows ``j >= 2`` (1-based).

    Args:
        pattern: ``(..., T, T)`` row-softmax attention.
    Returns:
        ``(..., M)`` float64, ``M = Σ_{j=2}^{T} j`` entries per matrix.
    """
    T = pattern.shape[-1]
    j = torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    keep[0] = False
    err = (pattern.double() - 1.0 / j).abs() * j
    return err[..., keep]


def wv_spectrum(W_V: torch.Tensor, emb: torch.Tensor, rsn: slice, mem: slice) -> dict[str, list[float]]:
    """``W^V``'s singular values and the alignment of its top left singular vector (paper layout
    ``V = X W^V``, ``W^V in R^{d_m x d_k}``: torch's ``(E, d_k, d_m)`` weight is its transpose, so the
    paper's left singular vectors are torch's right ones, in the embedding space).

    Returns:
        ``sv_ratio`` (σ1/σ2), ``rsn_align`` / ``mem_align`` (|cos(u1, mean anchor embedding)|) per member,
        and ``sv`` (E, r) normalised by σ1.
    """
    _, s, vh = torch.linalg.svd(W_V.double(), full_matrices=False)
    u1 = vh[:, 0, :]  # (E, d_m)

    def align(rows: torch.Tensor) -> torch.Tensor:
        m = rows.double().mean(1)
        return ((u1 * m).sum(-1) / (u1.norm(dim=-1) * m.norm(dim=-1))).abs()

    return {"sv_ratio": (s[:, 0] / s[:, 1]).tolist(), "rsn_align": align(emb[:, rsn]).tolist(),
            "mem_align": align(emb[:, mem]).tolist(), "sv": (s / s[:, :1]).tolist()}


def layer2_rows(model: GPT, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Layer 2's pre-softmax last row and positional scores (App. D).

    Args:
        model: a one-head GPT with ``>= 2`` layers; tokens: ``(E, B, L)``.
    Returns:
        ``scores (E, B, L)`` = ``q_L K^T/√d_k``; ``pattern (E, B, L)`` the cached softmaxed last row (a
        check); ``pos_scores (E, B, L−1)`` = ``q_L (W^pos_{1..L−1} W^K)^T/√d_k``; ``pattern1 (E, B, L, L)``
        layer 1's attention.
    """
    L = tokens.shape[-1]
    names = ["blocks.0.out", "blocks.0.attn.pattern", "blocks.1.attn.pattern"]
    _, cache = model.run_with_cache(tokens, names=names)
    x = cache["blocks.0.out"]  # (E, B, L, d): layer 2's input (post-LN)
    attn = model.blocks[1].attn
    Wq, Wk = attn.W_Q.weight, attn.W_K.weight  # (E, d_k, d)
    with torch.no_grad():
        q = torch.einsum("ebd,ekd->ebk", x[:, :, -1], Wq)
        k = torch.einsum("ebtd,ekd->ebtk", x, Wk)
        dk = Wq.shape[1]
        scores = torch.einsum("ebk,ebtk->ebt", q, k) / math.sqrt(dk)
        kp = torch.einsum("etd,ekd->etk", model.wpe[:, : L - 1], Wk)
        pos = torch.einsum("ebk,etk->ebt", q, kp) / math.sqrt(dk)
    return {"scores": scores, "pattern": cache["blocks.1.attn.pattern"][:, :, 0, -1], "pos_scores": pos,
            "pattern1": cache["blocks.0.attn.pattern"][:, :, 0]}


def spearman_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Spearman correlation along the last axis of ``x (..., n)`` with ``y (n,)``: ``(...)`` float64."""
    rx = torch.from_numpy(rankdata(x.double().numpy(), axis=-1))
    ry = torch.from_numpy(rankdata(y.double().numpy())).expand_as(rx)
    rx, ry = rx - rx.mean(-1, keepdim=True), ry - ry.mean(-1, keepdim=True)
    return (rx * ry).sum(-1) / (rx.norm(dim=-1) * ry.norm(dim=-1))


@register
class AnchorsAttention(ProbeSource, AnchorsBias):
    name = "anchors-attention"
    paper = "001 Reasoning bias under small initialisation"
    figure = "Figs. 5, 12, 14 (§4.3, B.8, App. D, E.3)"
    description = (
        "Attention of the anchors-bias transformers (γ 0.3, 0.5, 0.8; trained here or --set from_run=RUN): layer 1 "
        "as an average operator (|A_jk − 1/j|·j, also at init, Lemma 1), W^V's spectrum and its top singular vector "
        "vs anchor embeddings (Figs. 5, 12); layer 2's last row as a (p, q)-cliff, its mass on the key and anchors, "
        "positional scores and positional cosines (Fig. 14, Def. 3, Thm. 3, Assumption 4)."
    )
    Config = AnchorsAttentionConfig
    profiles = {
        "quick": _quick({"n_probe": 1000}),  # anchors-bias's quick scale-down; 1,000 training sequences per member
        "paper": {"members": 3, "schedule": {"epochs": 1000, "eval_epochs": 1, "n_eval": 10_000}, "n_probe": 10_000},
    }

    def measures(self, cfg: AnchorsAttentionConfig, run: Run) -> dict:
        t = cfg.task
        data = self.probe_sequences(cfg)
        tokens = data["tokens"]
        p1 = data["key_pos"] + 1  # 1-based key position
        L = t.L
        ids = torch.arange(1, L)
        out: dict = {}
        for g in cfg.gammas:
            per: dict = {}
            for when in ("init", "end"):
                arrays = run.arrays(self.state_arm(cfg, g, when))
                model = self.model(cfg, arrays)
                r = layer2_rows(model, tokens)
                err = average_operator_error(r["pattern1"]).reshape(tokens.shape[0], -1)
                m = {"avg_err_median": err.median(-1).values.tolist()}
                if when == "end":
                    m.update(wv_spectrum(arrays["blocks.0.attn.W_V.weight"], arrays["wte"],
                                         slice(t.rsn_min, t.rsn_max + 1), slice(t.mem_min, t.mem_max + 1)))
                    m["cliff_share"] = is_cliff(r["scores"], p1, t.q).double().mean(-1).tolist()
                    m["window_mass"] = window_mass(r["scores"], p1, t.q).mean(-1).tolist()
                    m["pattern_check"] = float((torch.softmax(r["scores"].double(), -1) - r["pattern"].double()).abs().max())
                    m["pos_score_mean"] = r["pos_scores"].double().mean(1).tolist()  # (E, L-1)
                    m["pos_score_spearman"] = spearman_rows(r["pos_scores"].double().mean(1), ids).tolist()
                    wpe = arrays["wpe"].double()[:, : L - 1]
                    pc = cosine_matrix(wpe)
                    m["pos_rho"] = distance_spearman(wpe, ids).tolist()
                    d = (ids[:, None] - ids[None, :]).abs().double()
                    assumption = torch.cos(math.pi * d / L)
                    # cosines equal up to float32 noise (equal |i − j| under Assumption 4) are ties, not an order
                    m["pos_vs_assumption4"] = (pair_spearman(torch.round(pc, decimals=6), assumption).tolist()
                                               if L - 1 >= 3 else [])
                    m["pos_cos"] = pc.mean(0).tolist()
                per[when] = m
            out[g] = per
        return out

    def analyse(self, cfg: AnchorsAttentionConfig, run: Run) -> Analysis:
        c = cfg.attn_claims
        m = self.measures(cfg, run)
        out = Analysis(measurements={f"gamma={g:g}": v for g, v in m.items()})
        small, large = c.small_gamma, c.large_gamma
        s_arm, l_arm = GammaArms.arm(small), GammaArms.arm(large)
        ordered = sorted(cfg.gammas)
        for when, label in (("end", "trained"), ("init", "initialisation")):
            grp = out.group(f"layer1-average-operator-{label}",
                            f"Layer 1 attention ≈ the average operator 1/j at small init, closer the smaller the init "
                            f"({label}; Figs. 5B, 12B; Lemma 1)")
            arms = [s_arm] if when == "end" else []
            grp.value("median", m[small][when]["avg_err_median"], c.avg_err_max, 0.0, "le", arms=arms,
                      statement=f"{label}, γ = {small:g}: median over training sequences of |A_jk − 1/j|·j ≤ {c.avg_err_max:g} (t)")
            for lo, hi in zip(ordered, ordered[1:]):
                grp.compare(f"{hi:g}-below-{lo:g}", m[hi][when]["avg_err_median"], m[lo][when]["avg_err_median"], "lt",
                            paired=True, arms=[GammaArms.arm(hi), GammaArms.arm(lo)] if when == "end" else [],
                            statement=f"{label}: median |A_jk − 1/j|·j at γ = {hi:g} minus at γ = {lo:g} < 0")
        e_s, e_l = m[small]["end"], m[large]["end"]
        grp = out.group("layer1-wv-low-rank-reasoning",
                        f"γ = {small:g}: W^V has one dominant singular value whose left singular vector is aligned with the "
                        "reasoning anchors' embeddings and nearly orthogonal to the memory anchors' (Figs. 5C–D, 12C–D)")
        grp.value("sv-ratio", e_s["sv_ratio"], c.sv_ratio_min, 0.0, "ge", arms=[s_arm],
                  statement=f"γ = {small:g}: σ1/σ2 of W^V ≥ {c.sv_ratio_min:g} (t)")
        grp.compare(f"sv-ratio-above-{large:g}", e_s["sv_ratio"], e_l["sv_ratio"], "gt", paired=True, arms=[s_arm, l_arm],
                    statement=f"σ1/σ2 of W^V at γ = {small:g} minus at γ = {large:g} > 0")
        grp.value("rsn-aligned", e_s["rsn_align"], c.rsn_align_min, 0.0, "ge", arms=[s_arm],
                  statement=f"γ = {small:g}: |cos(u1, mean reasoning-anchor embedding)| ≥ {c.rsn_align_min:g} (t)")
        grp.value("mem-orthogonal", e_s["mem_align"], c.mem_align_max, 0.0, "le", arms=[s_arm],
                  statement=f"γ = {small:g}: |cos(u1, mean memory-anchor embedding)| ≤ {c.mem_align_max:g} (t)")
        grp = out.group("layer2-extracts-key",
                        f"γ = {small:g}: layer 2's last row attends to the key and anchors through rising positional "
                        "scores and ordered positional embeddings (App. D, Fig. 14)")
        grp.value("window-mass", e_s["window_mass"], c.window_mass_min, 0.0, "ge", arms=[s_arm],
                  statement=f"γ = {small:g}: mean attention mass of the last row on positions p..p+q ≥ {c.window_mass_min:g} (t)")
        grp.value("positional-score-rising", e_s["pos_score_spearman"], c.pos_score_spearman_min, 0.0, "ge", arms=[s_arm],
                  statement=f"γ = {small:g}: Spearman(q_L (W^pos W^K)ᵀ/√d_k over 1..L−1, position) ≥ {c.pos_score_spearman_min:g} (t)")
        grp.value("positional-cosines-fall", e_s["pos_rho"], c.pos_rho_max, 0.0, "le", arms=[s_arm],
                  statement=f"γ = {small:g}: ρ(cos(w^pos,i, w^pos,j), |i − j|) over 1..L−1 ≤ {c.pos_rho_max:g} (t)")
        chk = out.sanity("layer2-scores-reproduce-pattern",
                         "The recomputed layer-2 scores q_L Kᵀ/√d_k give the model's own attention row after softmax")
        chk.value("max-abs-diff", [m[g]["end"]["pattern_check"] for g in cfg.gammas], 0.0, 1e-5, "close", deterministic=True,
                  statement="max |softmax(scores) − cached pattern| over γ, members and sequences ≤ 1e-5")
        for g in cfg.gammas:
            e = m[g]["end"]
            out.notes.append(
                f"γ = {g:g}: median |A−1/j|·j init {np.mean(m[g]['init']['avg_err_median']):.3f} → end "
                f"{np.mean(e['avg_err_median']):.3f}; W^V σ1/σ2 {np.mean(e['sv_ratio']):.2f}, |cos| with mean rsn / mem "
                f"anchor {np.mean(e['rsn_align']):.2f} / {np.mean(e['mem_align']):.2f}; layer 2: (p, q)-cliff share "
                f"{np.mean(e['cliff_share']):.3f}, mass on p..p+q {np.mean(e['window_mass']):.3f}, positional-score Spearman "
                f"{np.mean(e['pos_score_spearman']):.2f}, positional ρ {np.mean(e['pos_rho']):.2f}, Spearman with Assumption 4's "
                f"cos(π|i−j|/L) {np.mean(e['pos_vs_assumption4']) if e['pos_vs_assumption4'] else float('nan'):.2f} (seed means).")
        out.notes.append("Def. 3 at p = 1 has no l_0: the plateau's lower bound is dropped there (our reading).")
        return out

    # ---- figures --------------------------------------------------------------------------------
    def plot(self, cfg: AnchorsAttentionConfig, run: Run, analysis: Analysis, figdir: Path) -> list[Path]:
        t = cfg.task
        data = self.probe_sequences(cfg)
        tok = data["tokens"][:, :1]  # one training sequence per seed index
        paths = []
        fig, axes = plt.subplots(len(cfg.gammas), 4, figsize=(16, 3.6 * len(cfg.gammas)), squeeze=False)
        for row, g in enumerate(sorted(cfg.gammas, reverse=True)):
            arrays = run.arrays(GammaArms.arm(g))
            model = self.model(cfg, arrays)
            r = layer2_rows(model, data["tokens"])
            a = r["pattern1"][0, 0]
            ax = axes[row][0]
            im = ax.imshow(a.numpy(), vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks(range(t.L), [str(int(v)) for v in tok[0, 0]], fontsize=7)
            ax.set_title(f"γ = {g:g}: A — layer-1 attention, one sequence", fontsize=9)
            plt.colorbar(im, ax=ax, fraction=0.046)
            err = average_operator_error(r["pattern1"]).reshape(-1).numpy()
            axes[row][1].hist(err, bins=50, color="tab:blue")
            axes[row][1].set_title(f"B — |A_jk − 1/j|·j (median {np.median(err):.3f})", fontsize=9)
            sv = np.array(analysis.measurements[f"gamma={g:g}"]["end"]["sv"])
            for k in range(sv.shape[0]):
                axes[row][2].plot(np.arange(1, sv.shape[1] + 1), sv[k], "o-", ms=3)
            axes[row][2].set_yscale("log")
            axes[row][2].set_title("C — singular values of W^V (s_i/s_1, per seed)", fontsize=9)
            _, _, vh = torch.linalg.svd(arrays["blocks.0.attn.W_V.weight"][0].double(), full_matrices=False)
            emb = arrays["wte"][0].double()
            means = torch.stack([emb[t.mem_min: t.mem_max + 1].mean(0), emb[t.rsn_min: t.rsn_max + 1].mean(0)])
            cos = (vh[:5] @ means.T) / (vh[:5].norm(dim=1)[:, None] * means.norm(dim=1)[None, :])
            _heat(axes[row][3], cos.abs().T, 1, "D — |cos(u_k, mean anchor emb)|, rows mem / rsn")
        fig.suptitle("Figs. 5 (γ = 0.8) and 12 — first attention module")
        paths.append(save_figure(fig, figdir / "fig5_fig12_layer1.png"))
        # Fig. 14 at the small γ
        g = cfg.attn_claims.small_gamma
        arrays = run.arrays(GammaArms.arm(g))
        r = layer2_rows(self.model(cfg, arrays), data["tokens"])
        p = int(data["key_pos"][0, 0]) + 1
        fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
        axes[0].bar(np.arange(1, t.L + 1), r["scores"][0, 0].numpy(), color=["tab:orange" if p <= i <= p + t.q else "tab:gray"
                                                                             for i in range(1, t.L + 1)])
        axes[0].set_title(f"A — layer-2 last row before softmax (key at {p}, cliff: "
                          f"{bool(is_cliff(r['scores'][0, 0], p, t.q))})", fontsize=9)
        _, cache = self.model(cfg, arrays).run_with_cache(data["tokens"][:, :1], names=["blocks.1.attn.pattern"])
        im = axes[1].imshow(cache["blocks.1.attn.pattern"][0, 0, 0].numpy(), vmin=0, vmax=1, cmap="viridis")
        plt.colorbar(im, ax=axes[1], fraction=0.046)
        axes[1].set_title("B — layer-2 attention, same sequence", fontsize=9)
        ps = r["pos_scores"].double().mean(1)
        for k in range(ps.shape[0]):
            axes[2].plot(np.arange(1, t.L), ps[k].numpy(), "o-", ms=3)
        axes[2].set_title("C — q_L (W^pos W^K)ᵀ/√d_k (mean over sequences, per seed)", fontsize=9)
        axes[2].set_xlabel("position")
        pc = torch.tensor(analysis.measurements[f"gamma={g:g}"]["end"]["pos_cos"])
        _heat(axes[3], pc, 1, "D — cos(w^pos,i, w^pos,j), i, j ≤ L−1")
        fig.suptitle(f"Fig. 14 — second attention module, γ = {g:g}")
        paths.append(save_figure(fig, figdir / "fig14_layer2.png"))
        return paths
