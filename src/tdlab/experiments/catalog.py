"""Every experiment by name, without importing it: the module whose import registers it (with
:func:`tdlab.experiments.base.register`) and what ``tdlab list`` shows (seed paper, figure, profiles)
and the atlas prints (description).

Why a table: an experiment module imports its tasks, models, theory and their libraries (scipy,
gensim, the anchors' and topics' set-ups); ``tdlab run NAME`` imports NAME's module only
(:func:`tdlab.experiments.base.get`) and ``tdlab list`` none. The entries repeat the classes'
attributes; ``tests/experiments/test_catalog.py`` holds them equal and the table complete, so it
cannot drift (its failure message prints the entry to paste).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "Entry"]


@dataclass(frozen=True)
class Entry:
    """One registered experiment: ``module`` is the dotted path whose import registers it; the rest are
    its class attributes ``paper``, ``figure``, ``description`` and the names of its ``profiles``."""

    module: str
    paper: str
    figure: str
    description: str
    profiles: tuple[str, ...] = ("quick", "standard", "paper")


CATALOG: dict[str, Entry] = {
    # seed000_local_to_global
    "markov-bridge": Entry(
        "tdlab.experiments.seed000_local_to_global.bridge",
        "000 Local to Global",
        "Thms. 2 & 8 (App. G) on the Sec. 2 transformer, (p, q) phase diagram",
        "Bridge from the canonical (e, w) theory to the full Sec. 2 transformer: over a grid of (p, q) on both sides of p+q=1 and at two training budgets, an ensemble trained from the standard init is compared with the basin that Thm. 2 (p+q>1: H(π)) / Thm. 8 (p+q<1: entropy rate) predicts for a Gaussian init (App. G): final test loss − the unigram / Bayes predictor's loss on the same evaluation batches, one row per (p, q, budget). Table, phase diagram, member classes, plateau-escape steps; disagreements are reported with their size in nats.",
    ),
    "markov-icommon": Entry(
        "tdlab.experiments.seed000_local_to_global.icommon",
        "000 Local to Global",
        "Sec. 4 (I_common), Sec. 3 / App. A.1 (one extra bias step)",
        "The Sec. 2 transformer initialised at points sampled in Sec. 4's region I_common (mapped by App. D's canonical parameterisation) and trained on (p, q) cells on both sides of p+q=1: claim, every cell ends at the entropy rate. Canonical (e, w) model in closed form: gradient descent with one extra bias step per iteration ends in the basin the profile analysis predicts for most initial points (Sec. 3).",
    ),
    "markov-init": Entry(
        "tdlab.experiments.seed000_local_to_global.initialisation",
        "000 Local to Global",
        "Fig. 4 (App. A.3.2)",
        "Single-layer transformer on a binary first-order Markov chain from the standard Gaussian init and the seed's proposed init (e=0.5, W1=1, W2=-1), for the Sec. 2 model and the GPT-2 variant. Claims: the proposed init ends at the entropy rate (global minimum); a small standard init ends where Thm. 2/8 place it (H(π) when p+q>1); the standard init leaves the plateau later. Plateau-escape steps measured.",
    ),
    "markov-landscape": Entry(
        "tdlab.experiments.seed000_local_to_global.landscape",
        "000 Local to Global",
        "Fig. 1 (a)-(d) (Thms. 1, 2, 8, Lemma 1)",
        "Gradient flow of the canonical (e, w) model on the exact Markov-chain loss, for p+q<1 and p+q>1: energy contours, critical loci, flow field, trajectories and basins (Fig. 1). Claims: flow limits of N(0, I) inits agree with the basins of Thm. 2 / Thm. 8; small Gaussian inits reach the local minimum with the App. G quadrature probability (≈1 for p+q>1, ≈0 for p+q<1). Sanity: energy conserved along trajectories (Lemma 1).",
    ),
    "markov-landscape-3d": Entry(
        "tdlab.experiments.seed000_local_to_global.landscape_3d",
        "000 Local to Global",
        "Fig. 2, Fig. 5 (Thm. 10, Lemma 14, App. H)",
        "Gradient flow of the (e, w, a) model with the attention scalar near the origin (Figs. 2, 5). Claims: small Gaussian inits end on the local-minimum plane (origin attracts, loss H(π)) for p+q>1 and on a global minimum (origin repels, loss = entropy rate) for p+q<1; endpoints classified with Thm. 10's critical sets. Sanity: energy Eq. (10) conserved (Lemma 14).",
    ),
    "markov-rank": Entry(
        "tdlab.experiments.seed000_local_to_global.rank",
        "000 Local to Global",
        "Fig. 3 and Fig. 6 (App. A.3.1, App. N), App. C",
        "Sec. 2 single-layer transformer trained (AdamW, Table 2; SGD as an option) on the (p, q) = (0.2, 0.3) chain from a standard N(0, 0.001²) init (Fig. 3) and from a random rank-one init with embeddings on the hypercube (Fig. 6). Claims, on the members' mean with its interval, from the trained weights at convergence: W_V and W_1 (and W_Q, W_K, W_2) are approximately rank one (σ₂/σ₁), their embedding-side singular vector is the embedding (|cos|), the embedding's entries are ±c, training converged; App. C's structure of the global minimum; one extra bias step reaches the optimal bias. Sanity: the rank-one init is rank one and stays so (by construction).",
    ),
    # seed001_reasoning_bias
    "anchors-attention": Entry(
        "tdlab.experiments.seed001_reasoning_bias.attention",
        "001 Reasoning bias under small initialisation",
        "Figs. 5, 12, 14 (§4.3, B.8, App. D, E.2–E.3)",
        "Attention of the anchors-bias transformers (γ 0.3, 0.5, 0.8; trained here or --set from_run=RUN): layer 1 as an average operator (|A_jk − 1/j|·j, also at init, Lemma 1), W^V's spectrum and its top singular vector vs anchor embeddings (Figs. 5, 12); layer 2's last row as a (p, q)-cliff, its mass on the key and anchors, positional scores and positional cosines (Fig. 14, Def. 3, Thm. 3, Assumption 4); Thm. 2 read on this model (−∇W^V's top singular vector vs the mean reasoning-anchor embedding at the snapshots); App. E.2's value-path tags (memory sequences untagged, the tag from the anchors on, set by the anchor pair).",
    ),
    "anchors-bias": Entry(
        "tdlab.experiments.seed001_reasoning_bias.bias",
        "001 Reasoning bias under small initialisation",
        "Fig. 2A, Fig. 8 (§4.1, A.1–A.3)",
        "2-layer post-LN transformer on composite anchor functions from γ-init 0.3, 0.5, 0.8 (one ensemble): accuracy on D_mem, D_rsn,train and held-out D_rsn,test per epoch. Claims: at γ=0.8 reasoning is learnt before memory and generalises to M; at γ=0.3 memory and reasoning-train together, no generalisation; AUC_rsn,test − AUC_mem grows with γ.",
    ),
    "anchors-flows": Entry(
        "tdlab.experiments.seed001_reasoning_bias.flows",
        "001 Reasoning bias under small initialisation",
        "Props. 2–3, Thm. 2 (App. B.5, B.8; Eqs. 28, 29, 36)",
        "Def. 2 one-layer transformer on the anchor task from γ-init, full-batch gradient descent (Euler steps of the gradient flow) to stated early flow times: the exact flow of every token embedding against Eq. 28 and the compact Props. 2–3 (Eq. 29), and of W^V against Eq. 36 and Thm. 2 — direction (Frobenius cosine; W^V's displacement vs the mean reasoning-anchor embedding) and rate (speed along Thm. 2's matrix over its own).",
    ),
    "anchors-embedding": Entry(
        "tdlab.experiments.seed001_reasoning_bias.embedding",
        "001 Reasoning bias under small initialisation",
        "Figs. 4, 9, 11 (§4.3, B.7, C)",
        "Embedding space of the anchors-bias transformers (γ 0.3, 0.5, 0.8; trained here or --set from_run=RUN): anchor cosines at snapshots (Fig. 4A), PCA and key nearest-neighbour order (4B, 11), measured reasoning cosines vs Eq. 14's Gaussian vectors (value error) and the exact P^s cosines (4C, 9).",
    ),
    "anchors-labels": Entry(
        "tdlab.experiments.seed001_reasoning_bias.labels",
        "001 Reasoning bias under small initialisation",
        "Fig. 7 (§4.5; caption's left/right)",
        "Memory tasks at γ = 0.8: (left) 4 groups of memory mappings with nested label ranges {30..29+20i}: early predictions stay in each group's range; (right) F_mem,1 (y ~ U(Z)) vs F_mem,2 (y ~ U{z−Σa..z+Σa}): the anchor-dependent label law is learnt faster (T50, AUC).",
    ),
    "anchors-lowrank": Entry(
        "tdlab.experiments.seed001_reasoning_bias.lowrank",
        "001 Reasoning bias under small initialisation",
        "Fig. 13 (App. C)",
        "Singular values s_i/s_1 of W^emb, W^pos, every layer's W^Q, W^K, W^V, W^O, W^f1, W^f2 and the output layer of the anchors-bias transformers (trained here or --set from_run=RUN), per γ; claim per matrix: effective rank falls as γ grows (smaller init, lower rank).",
    ),
    "anchors-mlp": Entry(
        "tdlab.experiments.seed001_reasoning_bias.mlp",
        "001 Reasoning bias under small initialisation",
        "Figs. 2B, 3, 10 (§4.2, B.2, A.3)",
        "Emb-MLP (Def. 1) on [z, a1, a2] from γ-init 0.3, 0.5, 0.8 (one ensemble): accuracy on D_mem, D_rsn,train, D_rsn,test per epoch (Fig. 2B); anchor-embedding cosines at snapshots (Fig. 3A, 10) beside the label-law cosines of Eq. 8/22 (Fig. 3B-C). Claims: reasoning learnt first at γ=0.8; memory anchors aligned, reasoning anchors ordered and valued like P^s at γ=0.8; near-orthogonal anchors at γ=0.3.",
    ),
    "anchors-text": Entry(
        "tdlab.experiments.seed001_reasoning_bias.text",
        "001 Reasoning bias under small initialisation",
        "Figs. 1, 6 (§1, §4.4, A.3)",
        "GPT-2-shaped transformer, γ-init 0.8 (and a 0.3 control), next-token training on a 50/50 mix of PrOntoQA (tdlab's generator) and children's stories (a TinyStories file, or built-in stand-in stories). Claims: PrOntoQA's loss falls faster (Fig. 1); early in training its exclusive tokens' embeddings are less similar than the stories' (Fig. 6), a small-init effect.",
    ),
    # seed002_cross_attention
    "icl-ablations": Entry(
        "tdlab.experiments.seed002_cross_attention.ablations",
        "002 Multi-layer cross-attention (Barnfield, Sen & Sur)",
        "Figs. 5, 6 (App. G)",
        "Ablations at T = 10 trained by GD on l_{N,L_tr} (N = 2000, L_tr = 100): one- and two-parameter LCA, LCA without S_t (Eq. G.1), one-parameter deep LSA without S_t and two-parameter deep LSA (Eq. G.2), the single-layer LSA (Eq. 4.2) and the in-context sample mean; test MSE vs L_te. Claims as App. G states them: removing S_t compromises performance, one-parameter ablations fail to beat the sample mean, two-parameter deep LSA is worse than LCA but beats the sample mean and the LSA.",
    ),
    "icl-avdigits": Entry(
        "tdlab.experiments.seed002_cross_attention.avdigits",
        "002 Multi-modal in-context learning with cross-attention",
        "Table 1 (§7, App. I)",
        "Paper-inspired cross-attention model (F_t attends to fixed tokens X, gated re-injection S_t), its three ablations and a bidirectional CA baseline on corrupted paired image + spoken-digit data (offline avMNIST stand-in). Claims: the full model beats each ablation and the baseline, with fewer parameters than the baseline; decided on the validation-chosen test accuracy, paired over seeds.",
    ),
    "icl-landscape": Entry(
        "tdlab.experiments.seed002_cross_attention.landscape",
        "002 Multi-layer cross-attention (Barnfield, Sen & Sur)",
        "Fig. 4 (App. F)",
        "Log heat maps of the two-parameter loss l(alpha, beta) at T = 10 and T = 5, without and with pre-LayerNorm, |m| ~ U(0, 2): Monte-Carlo estimates on a grid (minimiser polished by Nelder-Mead, jackknife errors over prompt groups), the curve alpha*(beta), and gradient descent from the Thm 6.3 initialisation. Claims: the valley lies along alpha = -beta and nearer it at larger T; pre-LN has a similarly located ravine; GD reaches the stationary point.",
    ),
    "icl-lsa-vs-lca": Entry(
        "tdlab.experiments.seed002_cross_attention.lsa_vs_lca",
        "002 Multi-layer cross-attention (Barnfield, Sen & Sur)",
        "Fig. 2 (Sec. 7; Thms 4.1, 6.2, 6.3; App. H)",
        "Single-layer LSA against one- and two-parameter LCA_T on multi-modal ICL: excess error over the Bayes predictor vs L_te at fixed depth and vs depth T at fixed L_te; learned alpha_T (beta_T) beside the minimiser of the trained loss, trained by GD to convergence on l_{N,L_tr} (N = 2000, L_tr = 100 as in App. H, and a longer L_tr) and on the population loss. Claims: LSA stays above its infinite-context floor (Thm 4.1); LCA is orders of magnitude below LSA; error falls with depth; GD reaches the minimiser of its loss (Thms 6.2, 6.3).",
    ),
    "icl-unrestricted": Entry(
        "tdlab.experiments.seed002_cross_attention.unrestricted",
        "002 Multi-layer cross-attention (Barnfield, Sen & Sur)",
        "Fig. 3 (Sec. 7, App. H)",
        "Less-restricted LCA_T: untied scalars, diagonal and full (W^S_t, W^V_t), initialised at (alpha*, -alpha*) plus sigma_init Gaussian noise (App. H) and trained by GD on l_{N,L_tr}. Layer-wise scalar projections tr(W^S_t)/d, tr(W^V_t)/d and the whitening error ||X F_t^T/L - I||_F/sqrt(d) per layer. Claims: the projections cluster around the tied optimum (in the setting that ran: the untied optimum of l_(L_tr)); the whitening error decreases with the layer index.",
    ),
    # seed003_attention_markov
    "markov-icl-construction": Entry(
        "tdlab.experiments.seed003_attention_markov.icl_construction",
        "003 Attention with Markov (talk), Part II",
        "Intuition: att ∝ exp(κ cos(v_n, u_T)) realises a k-th order induction head",
        "The 3-layer normalised-attention construction (weights set by hand, cosine attention with temperature κ) against the order-k Laplace in-context estimator as κ grows (gap → 0), and the same model trained on in-context Markov chains: its layer-3 context-matching score against the construction's.",
    ),
    "markov-icl-depth": Entry(
        "tdlab.experiments.seed003_attention_markov.icl_depth",
        "003 Attention with Markov (talk), Part II",
        "Memory = k, Depth?: 1/2/3-layer transformers vs the in-context k-gram estimator",
        "In-context k-th order binary Markov chains (one Dirichlet(1) kernel per sequence): pre-LN transformers of depth 1-3 (one head per layer) with absolute, relative (scalar bias or key/value embeddings) or both positional encodings, against the Bayes-optimal add-α k-gram estimator on the same sequences. Claims: for k=1 one layer does not reach the estimator and two layers do (depth > 1: ICL emerges); for k>=2 three layers reach the order-k estimator (constant depth suffices). Attention maps and a context-matching score.",
    ),
    "markov-icl-depth-linear": Entry(
        "tdlab.experiments.seed003_attention_markov.icl_depth_linear",
        "003 Attention with Markov (talk), Part II",
        "Without non-linearities, you need logarithmic depth: attention-only depth 1-5 x k vs MLP+LN",
        "In-context k-th order binary Markov chains: attention-only GPTs (no MLP, no LayerNorm, relative k/v positions) of depth 1-5 and pre-LN GPTs with MLPs of depth 1-3, against the order-k Laplace (Bayes) estimator. Claims: the deepest attention-only model reaches the estimator; the smallest attention-only depth reaching it grows with k (k vs 4k, paired); with MLP + LN 3 layers reach it for every k.",
    ),
    "markov-icl-heads": Entry(
        "tdlab.experiments.seed003_attention_markov.icl_heads",
        "003 Attention with Markov (talk), Part II",
        "Memory = k, Depth?: heads {1, 2, 4} at depth 2 and 3 vs k (1 head per layer suffices at depth 3)",
        "In-context k-th order binary Markov chains: pre-LN GPTs with MLPs, relative k/v positions, heads {1, 2, 4} x depth {2, 3} x k. Claims as the talk states them: at depth 3 one head per layer reaches the order-k Laplace estimator for every k, and more heads are not needed there (prior work: heads/layers should scale with k).",
    ),
    "markov-tying": Entry(
        "tdlab.experiments.seed003_attention_markov.tying",
        "003 Attention with Markov (talk), Part I",
        "Theoretical results: bad local minimum θ_π (tied) vs saddle (untied); Hessian signs",
        "θ_π (e = a = 0, σ(b) = π1) built in the full single-layer Sec. 2 transformer: on the exact population loss L(θ_π) = H(π), ∇L = 0, and the exact Hessian is positive semi-definite with tied embeddings (p+q>1) but has a negative eigenvalue untied. Then training from a small init on a (p, q) grid: tied members leave the H(π) plateau later than untied ones (paired escape steps); p+q<1 chains reach the entropy rate.",
    ),
    # seed004_topics
    "topics-attn": Entry(
        "tdlab.experiments.seed004_topics.attn",
        "004 Topic structure",
        "Tables 3, 4 (App. G.2), Thms. 3, 5",
        "One-hot one-layer transformer, attention and W^V trained jointly (CE, Adam and SGD): members whose W^V is block-wise attend more to their topic (a_st/a_dt >= 1.2, Thm. 3's average above a_dt); members whose W^V is diagonal attend most to the same word, then other topics, least to the same topic (a_st/a_sw < c3/(v-1), Thm. 5). Rows need their members half way to the optimum loss.",
    ),
    "topics-embed": Entry(
        "tdlab.experiments.seed004_topics.embed",
        "004 Topic structure",
        "Fig. 1, §4 (Thm. 1)",
        "One-layer transformer with every part trained on LDA documents, {CE, squared} x {SGD, Adam}, and Thm. 1's embedding-only model: every member's W^E'W^E is topic-structured (permutation test of the within-topic contrast, p <= 0.05, in every row); the embedding-only model's g = c3 (Thm. 1, shown: Assumption 1's infinite documents are not the run's) and a loss within a tenth of the gap to the all-trained model's floor. Rows need the arm half way to the position-blind loss floor.",
    ),
    "topics-landscape": Entry(
        "tdlab.experiments.seed004_topics.landscape",
        "004 Topic structure (Li, Li, Risteski)",
        "Figs. 7, 8 (App. F.5; Thms. 3, 5, Remark 5)",
        "No training: the exact finite-T squared loss L(α, β) of the one-layer model with one-hot embeddings, W^V frozen and Assumption-2 attention (same word β, same topic α, other 1), from App. F.3/F.4's case terms before the asymptotic step, on a log grid α, β ∈ [1e-4, 1e7], T = 100, v = 300, τ ∈ {20, 40, 60, 80}. Fig. 8, block W^V (W_diff = 0, the proof's map): L depends on γ = ((v−1)α + β)/v only (Remark 5, by Monte Carlo at equal γ); γ* > 1, increasing in τ, inside Thm. 3's (λ1(τ−1), λ2 T), λ1 as in the proof and as stated. Fig. 7, diagonal D^V: β* increasing in τ, α*/β* < λ5, β* inside Thm. 5's (λ3 τ, λ4 T) (λ4 as in the proof and as stated), min L below uniform attention L(1, 1).",
    ),
    "topics-real": Entry(
        "tdlab.experiments.seed004_topics.real",
        "004 Topic structure",
        "Tables 1, 5, Fig. 3 (§6.2, App. G.3)",
        "LDA topics of a Wikipedia sample vs a pretrained checkpoint (seed rows) or a locally trained BERT-shaped encoder (ours): same-topic / different-topic ratios of embedding cosine, dot product and debiased attention > 1 per ambiguity threshold (Table 1: one topic per word; Table 5: several, attention only); Fig. 3's 9 x 9 cosine map has higher within-topic cosine; the untrained control (sanity) without topic structure.",
    ),
    "topics-real-cooc": Entry(
        "tdlab.experiments.seed004_topics.real_cooc",
        "004 Topic structure",
        "Table 2 (App. A.2)",
        "Same-topic word pairs vs the top co-occurring pairs of a Wikipedia sample (as many as one topic holds): same-topic pairs get lower attention but higher embedding cosine, in a pretrained checkpoint (seed rows) or a locally trained BERT-shaped encoder (ours) (paper: 0.00659 < 0.00751, 0.468 > 0.316).",
    ),
    "topics-real-two-stage": Entry(
        "tdlab.experiments.seed004_topics.real_two_stage",
        "004 Topic structure",
        "Fig. 5 (App. A, §8)",
        "4-layer, 4-head BERT-shaped encoder on a Wikipedia sample, W^K, W^Q, W^V from near zero, 400 masked-token steps: in every layer W^K, W^Q make half their growth at least a tenth of the horizon after W^V (members' mean; topics-two-stage's rule), and W^V rotates faster over steps 0-100 than over 100-400.",
    ),
    "topics-two-stage": Entry(
        "tdlab.experiments.seed004_topics.two_stage",
        "004 Topic structure",
        "Fig. 4, §5.1, §8",
        "One-hot one-layer transformer, W^K, W^Q, W^V from near-zero init trained jointly on LDA documents over a grid of {SGD, Adam} x lr {0.003, 0.01, 0.03} x init {1e-3, 1e-2} x batch {16, 40} (quick: Adam, lr 0.01): in some setting W^V makes half its growth at least a tenth of the horizon before W^K and W^Q (members' mean; an existence over the grid, one row per setting), judged where W^K, W^Q grew.",
    ),
    "topics-wv": Entry(
        "tdlab.experiments.seed004_topics.wv",
        "004 Topic structure",
        "Figs. 2, 6, 9, 10; Thm. 2; §5.2, App. G.1",
        "One-hot model: W^V trained with uniform attention (with/without L2) or with W^K, W^Q; {CE, squared} x {SGD, Adam}. Training adds >= 3 to W^V's block contrast in every panel; population mode reaches Thm. 2's W^V*; S ≥ 10|D| (Figs. 9, 10); W^V-only loss within a tenth of the gap to the all-weights model's floor; no-L2 W^V sometimes diagonal (Fig. 6); g = c3 and S, D = W^V*'s entries shown (Assumption 1's infinite documents are not the run's). Rows need the arm half way to the position-blind loss floor.",
    ),
}
