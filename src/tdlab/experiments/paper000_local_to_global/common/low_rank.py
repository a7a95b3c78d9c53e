"""What ``markov-rank`` records of its own: the scales of its Fig. 6 rank-one init, and σ₂/σ₁ and
alignments of the claimed matrices recorded during training (seed 000, App. A.3.1, App. C).

* :class:`RankOneInitConfig` — the scales :func:`tdlab.models.init.rank_one_init_` reads ("we randomly
  initialize the weight parameters as rank-one matrices and the embeddings on the hypercube {±1}^d",
  App. A.3.1, Fig. 6: the seed gives no formula nor scales).
* :class:`TrajectoryProbe` — σ₂/σ₁ and alignments recorded during training (a forward pre-hook that
  reads the weights; no forward code is touched), by :mod:`tdlab.probes.sec2_weights`.

The readings of stored parameters (App. C's structure, the per-matrix spectra, the one-extra-bias-step
excess) are :mod:`tdlab.probes.sec2_weights`.
"""

from __future__ import annotations

from pydantic import Field

from tdlab.config import Config
from tdlab.models.gpt import GPT
from tdlab.probes.sec2_weights import weight_matrices
from tdlab.probes.spectrum import embedding_alignment, hypercube_spread, sv_ratio

CLAIMED = ("W_V", "W_1")  # the two matrices Figs. 3 and 6 show and the text's claims are about


class RankOneInitConfig(Config):
    """Scales of the Fig. 6 rank-one init (:func:`tdlab.models.init.rank_one_init_`). Not stated by the
    seed ("randomly initialize the weight parameters as rank-one matrices and the embeddings on the
    hypercube"): ours are our choices, |0.1 N(0,1)| for the embedding and feed-forward scales, N(0, 0.02²) entries for the
    attention factors. They are not the authors' public code's init either: its low-rank init leaves
    W_Q and W_K full-rank Gaussian, while the seed's text (and ours) makes every weight matrix rank one."""

    e_std: float = Field(
        0.1, gt=0.0, le=10.0
    )  # c ~ |N(0, e_std²)|: e = c·α, p_n = -(c/2)·α (App. C Eq. (12), App. D p = e/2)
    w_std: float = Field(0.1, gt=0.0, le=10.0)  # s ~ |N(0, w_std²)|: W_1 = s·ξ α^T, ξ ∈ {±1}^{4d} (App. C Eq. (14))
    attn_std: float = Field(0.02, gt=0.0, le=10.0)  # std of the free factor of W_Q, W_K, W_V, W_O


def _probe_rows(model: GPT, step: int, offset: int) -> list[tuple[int, int, str, float]]:
    """Metrics rows of one trajectory snapshot: sigma2/sigma1 of every matrix, |cos| with e of the
    claimed ones, and the embedding's hypercube spread."""
    state = {k: v.detach() for k, v in model.state_dict().items()}
    mats = weight_matrices(state)
    e = state["e"].double()
    rows: list[tuple[int, int, str, float]] = []
    for name, w in mats.items():
        rows += [(step, offset + i, f"sv_ratio/{name}", float(v)) for i, v in enumerate(sv_ratio(w))]
    for name in CLAIMED:
        best = embedding_alignment(mats[name], e)["best"]
        rows += [(step, offset + i, f"emb_cos/{name}", float(v)) for i, v in enumerate(best)]
    rows += [(step, offset + i, "emb_spread", float(v)) for i, v in enumerate(hypercube_spread(e))]
    return rows


class TrajectoryProbe:
    """Forward pre-hook: before the training forward of step ``k + 1`` (weights after ``k``
    updates), every ``every`` steps, records :func:`_probe_rows`. Evaluation forwards (``eval()``
    mode) are not counted."""

    def __init__(self, every: int, offset: int, members: int) -> None:
        self.every, self.offset, self.members, self.seen = every, offset, members, 0
        self.rows: list[tuple[int, int, str, float]] = []

    def __call__(self, module: GPT, args: tuple) -> None:
        if not module.training:
            return
        if self.seen % self.every == 0:
            self.rows += _probe_rows(module, self.seen, self.offset)
        self.seen += 1
