"""The anchors' embedding-cosine claims of anchors-mlp that anchors-embedding makes too (Figs. 3A, 4A): the three
cosine claims with their rows (the reasoning anchors' label-law cosines of the theory are
:func:`tdlab.theory.anchors.reasoning_theory_cosines`)."""

from __future__ import annotations

from typing import Any

from tdlab.claims import ClaimSpec, Measurements
from tdlab.claims.declare import Threshold
from tdlab.experiments.paper001_reasoning_bias.common.training import DIRECTION, SMALL_INIT, Reading

# Our thresholds on the anchors' cosine structure: the seed gives no level for "high similarity" or "decreases with
# |s_i − s_j|", and no planted case from its theory fixes one between an unshaped embedding (0) and its limit.
MEM_COS_THRESHOLD = Threshold(
    "ours",
    "mem_cos_min = 0.8 on the mean off-diagonal cosine: our reading of 'high similarity'",
)


RSN_RHO_THRESHOLD = Threshold(
    "ours",
    "rsn_rho_max = −0.8 on the Spearman ρ with |s_i − s_j|: our reading of 'decreases with the increase of "
    "|s_i − s_j|'",
)


def anchor_cosine_claims(
    prefix: str, figure: str, section: str, where: str, quotes: tuple[str, str, str]
) -> tuple[ClaimSpec, ...]:
    """The three statements of Figs. 3A and 4A about the anchors' embedding cosines at γ = 0.8 (thresholds
    from the config section ``section``); rows from :func:`anchor_cosine_rows`. ``where`` and ``quotes`` (memory
    aligned, memory above reasoning, reasoning ordered): the seed's words for the figure at hand."""
    shared: dict[str, Any] = {"where": where, "form": "settings", "hypotheses": (SMALL_INIT,), "horizon": "budget"}
    return (
        ClaimSpec(
            f"{prefix}-memory-anchors-aligned",
            f"Small init (γ = 0.8): the memory anchors' embeddings are highly similar to each other ({figure})",
            quote=quotes[0],
            **shared,
            threshold=MEM_COS_THRESHOLD,
            test="value",
            relation="ge",
            expected=f"{section}.mem_cos_min",
            tolerance=0.0,
            quantity=f"mean off-diagonal cosine of the memory anchors' embeddings at a {figure} snapshot",
        ),
        ClaimSpec(
            f"{prefix}-memory-above-reasoning",
            f"Small init (γ = 0.8): memory anchors are more alike than reasoning anchors ({figure})",
            quote=quotes[1],
            **shared,
            threshold=DIRECTION,
            test="compare",
            relation="gt",
            margin=0.0,
            quantity=f"mean off-diagonal cosine, memory − reasoning anchors, at a {figure} snapshot (paired by member)",
        ),
        ClaimSpec(
            f"{prefix}-reasoning-anchors-ordered",
            f"Small init (γ = 0.8): the reasoning anchors' cosine falls with |s_i − s_j| ({figure})",
            quote=quotes[2],
            **shared,
            threshold=RSN_RHO_THRESHOLD,
            test="value",
            relation="le",
            expected=f"{section}.rsn_rho_max",
            tolerance=0.0,
            quantity="Spearman ρ of cos(w^s_i, w^s_j) with |s_i − s_j| over reasoning-anchor pairs",
        ),
    )


def anchor_cosine_rows(
    out: Measurements,
    prefix: str,
    arm: str,
    epoch: int,
    m: dict[str, list[float]],
    reading: Reading,
    gamma: float,
    mem_cos_min: float,
    rsn_rho_max: float,
) -> None:
    """The rows of :func:`anchor_cosine_claims` for one snapshot (``m``: :func:`~tdlab.probes.embedding.anchor_cosine_readings`'
    ``mem_cos``, ``rsn_cos`` and ``rsn_rho``, per member)."""
    ctx = {"gamma": gamma, "epoch": epoch}
    key, when = f"epoch{epoch}", f"γ = {gamma:g}, epoch {epoch}"
    out.row(
        f"{prefix}-memory-anchors-aligned",
        key,
        m["mem_cos"],
        arms=[arm],
        provenance=reading.provenance,
        context=ctx,
        label=f"{when}: mean off-diagonal cos of memory anchors ≥ {mem_cos_min:g} (t); {reading.label}",
    )
    out.row(
        f"{prefix}-memory-above-reasoning",
        key,
        m["mem_cos"],
        m["rsn_cos"],
        arms=[arm],
        provenance=reading.provenance,
        context=ctx,
        label=f"{when}: mean off-diagonal cos, memory − reasoning anchors > 0; {reading.label}",
    )
    out.row(
        f"{prefix}-reasoning-anchors-ordered",
        key,
        m["rsn_rho"],
        arms=[arm],
        provenance=reading.provenance,
        context=ctx,
        label=f"{when}: Spearman ρ(cos, |s_i − s_j|) of reasoning anchors ≤ {rsn_rho_max:g} (t); {reading.label}",
    )
