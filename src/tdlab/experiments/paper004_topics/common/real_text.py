"""The real-text side of seed 004 (Li, Li & Risteski, ICML 2023), shared by ``topics-real``, ``topics-real-cooc``
and ``topics-real-two-stage``: the corpus, its LDA topics, the BERT-shaped encoder and its training, App. G.3's
measures, and the experiments' common base.

What runs (said plainly in every report): the seed's *method* -- LDA topics of a Wikipedia sample (gensim's
``LdaModel``, stop words dropped), App. G.3's ambiguity threshold θ, same-topic vs different-topic ratios of
input-embedding cosine, dot product and (debiased) attention over distinct word pairs -- on gensim's shipped
Wikipedia *sample* (or Lee, or the user's text); ``model.checkpoint=DIR`` (a local Hugging Face checkpoint,
:mod:`tdlab.models.hf_encoder`) measures a pretrained model instead of training a small encoder here. Whose rows
are the seed's (``provenance="paper"``), why the encoder is BERT's and how attention is pooled are readings
the experiments share, declared in the seed's ``experiments.yaml`` (``pretrained_rows``, ``real_encoder``,
``attention_pooling``).

The encoder: tdlab's :class:`~tdlab.models.gpt.GPT` with ``arch="gpt2", causal=False`` (bidirectional
attention), post-LN blocks (``norm="post"``; ``"pre"`` an option), learned absolute positions, GELU MLP, the
output layer **tied** to the token table, no biases. Vocabulary: ``[MASK]`` = 0, ``[PAD]`` = 1, the corpus
words 2..n+1 (``encode_windows(offset=2)``), ``[UNK]`` = n+2.
Training: §3.2's masking rule (= BERT's): each position selected with p_m = 0.15, a selected word becomes
[MASK] with 1 − p_c − p_r = 0.8, stays with p_c = 0.1, becomes a random corpus word with p_r = 0.1, Eq. (4)'s
cross-entropy on the selected positions (:class:`~tdlab.train.objectives.MaskedTokens`, masks redrawn every
step); documents cut into windows of ``train.seq_len`` words (short tails dropped: no padding), the last
``heldout`` share of the windows held out (``test_loss``), the rest iterated in shuffled epochs
(:class:`~tdlab.train.data.FixedDataset`). Every member is a seed (own init, masks and epoch order); the
untrained copy of each member (``mlm@init``) is the control, as the seed's "randomly initialized BERT".

The training stage (:data:`PAST_UNIGRAM`): a trained encoder's rows are judged only when its held-out loss
is below the unigram model's (the training words' frequencies, on the same held-out windows); log n, the
health gate's uniform predictor, is far easier to beat.

Measures (:mod:`tdlab.probes.topic_pairs`; App. G.3): for each θ, each topic keeps its top ⌊θn⌋ + 1 words
(n = LDA vocabulary); ``single`` (Table 1) gives a word only its most probable topic, ``multi`` (Table 5) every
topic that keeps it. Ratios are mean(same-topic) / mean(different-topic) over distinct word pairs: the
input-embedding cosine and dot product (rows of the token table), and the attention between positions
holding such words, each window's weights × len/100 (G.3's debiasing), averaged over layers and heads (per
layer and head in the report).
Attention is read on ``attn_windows`` unmasked windows spread evenly over the corpus. The tokenised corpus
and the LDA fit are cached in the run directory (``cache/``): a resumed run does not refit.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
import torch
from pydantic import Field, model_validator

from tdlab.claims import ArmHealth, Measurements, Stage, assess_arm
from tdlab.claims.declare import Hypothesis, Provenance
from tdlab.config import Config, ConfigError, Distinct
from tdlab.experiments.axes import AtlasAxis
from tdlab.experiments.base import Experiment, ExperimentConfig
from tdlab.models.gpt import GPT, GPTConfig
from tdlab.probes import topic_pairs as tp
from tdlab.probes.topic_pairs import model_attention, model_embeddings
from tdlab.run_context import RunContext, init_arm
from tdlab.run_view import RunView
from tdlab.runs import Run
from tdlab.seeding import derive_seed, member_seeds
from tdlab.tasks.lda_topics import LDAConfig, Topics, assign, fig3_words, fit_lda, topic_word_sets
from tdlab.tasks.text_corpus import Corpus, CorpusConfig, encode_windows, load_corpus, unigram_loss
from tdlab.train.data import FixedDataset
from tdlab.train.objectives import MaskedTokens
from tdlab.train.trainer import FitResult, Probe, TrainConfig, Trainer

MASK_ID, PAD_ID = 0, 1  # special tokens below the corpus words
OFFSET = 2  # corpus word id w -> model id w + 2; [UNK] = len(vocab) + 2 (Corpus.unk_id + OFFSET)
ARM = "mlm"  # the trained encoder; its untrained copy is init_arm(ARM)
MEASURE_ARMS = {"trained": "measure/trained", "untrained": "measure/untrained"}  # where the measures are stored
MODES: tuple[Literal["single", "multi"], ...] = ("single", "multi")
MEASURES = ("cosine", "dot", "attention")
# The atlas axis of the claims read from the trained encoder: its training length, around the paper profile's 20,000.
STEPS_AXIS = AtlasAxis("train.steps", (5000, 20000, 40000), quick=(500, 1000), label="steps")

PAST_UNIGRAM = Stage(
    "past-unigram",
    "the encoder's held-out masked-token loss is below the unigram model's (the "
    "training windows' word frequencies, on the same held-out windows): it has learnt more than "
    "word frequencies",
)


# What the seed's real-text statements assume and which data they ran on (topics-real, -cooc, -two-stage).
PRETRAINED = Hypothesis(
    "a pretrained model (model.checkpoint): Tables 1, 2, 5 and Fig. 3 measure pretrained Hugging Face checkpoints; "
    "an encoder trained here is not one",
    lambda cfg: bool(cfg.model.checkpoint),
)


def trained_model_stage(cfg: TopicsRealConfig) -> Stage | None:
    """The stage a trained-model row needs: :data:`PAST_UNIGRAM` for the encoder trained here, none for a
    pretrained checkpoint (nothing is trained in the run)."""
    return None if cfg.model.checkpoint else PAST_UNIGRAM


class EncoderConfig(Config):
    """The BERT-shaped encoder (module docstring); sizes of the ``paper`` profile are BERT-small's."""

    d: int = Field(64, ge=2, le=4096)  # quick: d = 64; paper: 512 (BERT-small)
    layers: int = Field(2, ge=1, le=64)  # paper: 4 (BERT-small)
    heads: int = Field(4, ge=1, le=64)  # paper: 8 (BERT-small)
    norm: Literal["post", "pre"] = "post"  # BERT: post-LN
    tie_weights: bool = True  # BERT ties the output layer to the token table
    init_std: float = Field(0.02, gt=0.0, le=10.0)  # BERT: N(0, 0.02²)
    # A local Hugging Face checkpoint folder of BERT, RoBERTa, ALBERT, ELECTRA or BART (the seed's five, Tables 1, 5):
    # measure it instead of training (extra "hf"; never downloads; tdlab.models.hf_encoder.READERS).
    checkpoint: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> EncoderConfig:
        if self.d % self.heads:
            raise ValueError(f"model.d={self.d} must be divisible by model.heads={self.heads}")
        return self


class RealTrain(TrainConfig):
    """Optimisation of the encoder (the seed trains no model here: BERT's recipe, scaled)."""

    steps: int = Field(1000, ge=1, le=10_000_000)
    batch: int = Field(32, ge=1, le=1_000_000)
    seq_len: int = Field(64, ge=4, le=4096)  # words per window (the seed's "sentence" for the debiasing)
    lr: float = Field(1e-3, gt=0.0, le=100.0)  # BERT: 1e-4 at batch 256 for a 110M model; small models take more
    beta2: float = Field(0.999, ge=0.0, lt=1.0)  # BERT's Adam
    weight_decay: float = Field(0.01, ge=0.0, le=10.0)  # BERT
    warmup_steps: int = Field(100, ge=0)  # BERT warms up (10k of 1M steps); ours: 100
    schedule: Literal["cosine", "constant"] = "cosine"
    eval_every: int = Field(250, ge=1)
    eval_batches: int = Field(4, ge=1, le=100_000)  # held-out batches per evaluation


class RealClaims(Config):
    ratio_min: float = Field(1.0, gt=0.0)  # "same-topic / different-topic > 1" (Tables 1, 5)
    control_tol: float = Field(0.05, gt=0.0, lt=1.0)  # untrained control's attention ratio within 1 ± 0.05 (ours)
    control_z: float = Field(
        3.0, gt=0.0, le=10.0
    )  # untrained cosine gap within ± 3 null sd (ours, fixed before any run)


# Ambiguity thresholds θ (App. G.3): at least one, each in (0, 1), each once.
Thetas = Annotated[list[Annotated[float, Field(gt=0.0, lt=1.0)]], Field(min_length=1), Distinct]


class TopicsRealConfig(ExperimentConfig):
    """Fields of both ``topics-real`` experiments (and ``topics-real-two-stage``'s data)."""

    members: int = Field(3, ge=1, le=4096)  # seeds of the encoder, trained as one ensemble
    corpus: CorpusConfig = CorpusConfig()  # default: gensim's shipped Wikipedia sample
    lda: LDAConfig = LDAConfig()  # §6.2: 100 topics (paper profile); quick 20
    model: EncoderConfig = EncoderConfig()
    train: RealTrain = RealTrain()
    thetas: Thetas = [0.002, 0.005, 0.01]  # quick; paper: Table 1's 0.0005, 0.001, 0.002
    p_m: float = Field(0.15, ge=0.0, le=1.0)  # §3.2 / BERT: share of positions selected
    p_c: float = Field(0.1, ge=0.0, le=1.0)  # §3.2 / BERT: a selected word kept
    p_r: float = Field(0.1, ge=0.0, le=1.0)  # §3.2 / BERT: a selected word replaced by a random word
    heldout: float = Field(0.05, gt=0.0, lt=1.0)  # share of windows held out for test_loss (ours)
    attn_windows: int = Field(256, ge=1, le=1_000_000)  # windows the attention is read on (ours)
    claims: RealClaims = RealClaims()

    @model_validator(mode="after")
    def _check(self) -> TopicsRealConfig:
        if self.p_c + self.p_r > 1.0:
            raise ValueError(f"p_c + p_r must be at most 1, got {self.p_c + self.p_r}")
        return self


def theta_key(theta: float) -> str:
    """``"0.002"``: θ as it appears in metric names."""
    return f"{theta:g}"


# ----------------------------------------------------------------------------------------------
# Data: corpus, LDA (both cached in the run directory), windows


@dataclass
class RealData:
    corpus: Corpus
    topics: Topics
    windows: torch.Tensor  # (N, T) model ids
    n_test: int  # the last n_test windows are held out

    @property
    def vocab(self) -> int:
        """Model vocabulary: [MASK], [PAD], the words, [UNK]."""
        return len(self.corpus.vocab) + OFFSET + 1


def _lda_cache(cache: Path, cfg: TopicsRealConfig) -> Path:
    key = json.dumps(
        {"corpus": cfg.corpus.model_dump(mode="json"), "lda": cfg.lda.model_dump(mode="json"), "seed": cfg.seed},
        sort_keys=True,
    )
    return cache / f"lda-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


def prepare_data(cfg: TopicsRealConfig, cache: Path, progress: bool = True) -> RealData:
    """The corpus (tokenised once, cached as JSON), the LDA fit (cached as ``.npz``; a resumed run or a
    rebuilt report reads it instead of refitting) and the windows. LDA's seed derives from the run's root
    seed (``derive_seed(seed, "lda")``)."""
    cache.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(cfg.corpus, cache_dir=cache)
    f = _lda_cache(cache, cfg)
    topics = None
    if f.is_file():
        try:
            with np.load(f, allow_pickle=False) as z:
                wt = z["word_topic"]
            if wt.shape[1] == len(corpus.vocab):
                topics = Topics(word_topic=wt)
        except (OSError, ValueError, KeyError):
            topics = None  # damaged: refit
    if topics is None:
        topics = fit_lda(corpus, cfg.lda, seed=derive_seed(cfg.seed, "lda") & 0x7FFFFFFF, progress=progress)
        tmp = f.with_suffix(".tmp.npz")
        np.savez(tmp, word_topic=np.asarray(topics.word_topic))
        tmp.replace(f)
    windows, n_test = split_windows(cfg, corpus)
    n = windows.shape[0]
    if n - n_test < cfg.train.batch:
        raise ConfigError(
            f"train.seq_len: the corpus gives {n} windows of {cfg.train.seq_len} words, {n - n_test} "
            f"for training, fewer than one batch of train.batch={cfg.train.batch}; use a larger corpus "
            f"(corpus.max_docs) or a smaller train.seq_len / train.batch"
        )
    return RealData(corpus, topics, windows, n_test)


def split_windows(cfg: TopicsRealConfig, corpus: Corpus) -> tuple[torch.Tensor, int]:
    """``(windows (N, seq_len) model ids, n_test)``: the corpus cut into windows, the last ``n_test`` held out."""
    windows = encode_windows(corpus, cfg.train.seq_len, offset=OFFSET)
    return windows, max(1, round(cfg.heldout * windows.shape[0]))


def corpus_facts(cfg: TopicsRealConfig, cache: Path) -> dict[str, Any]:
    """``{"documents", "unigram_loss"}`` of the run's corpus, recomputed from its cached tokenisation (for a run
    whose ``info.json`` predates them); ``{}`` when the run has no cached corpus."""
    if not list(cache.glob("corpus-*.json")):
        return {}
    corpus = load_corpus(cfg.corpus, cache_dir=cache)
    windows, n_test = split_windows(cfg, corpus)
    return {
        "documents": len(corpus.docs),
        "unigram_loss": unigram_loss(windows, n_test, len(corpus.vocab) + OFFSET + 1, OFFSET),
    }


def encoder_config(cfg: TopicsRealConfig, vocab: int) -> GPTConfig:
    """The encoder's :class:`GPTConfig` (module docstring)."""
    m = cfg.model
    return GPTConfig(
        arch="gpt2",
        vocab=vocab,
        d=m.d,
        layers=m.layers,
        heads=m.heads,
        max_len=cfg.train.seq_len,
        norm=m.norm,
        causal=False,
        tie_weights=m.tie_weights,
        init_std=m.init_std,
    )


def masked_objective(cfg: TopicsRealConfig, vocab: int) -> MaskedTokens:
    """§3.2's masking (BERT's 80/10/10 at p_m = 0.15), random replacements drawn from the corpus words and
    [UNK]; the output layer applied at the selected positions only (``gather_queries``)."""
    return MaskedTokens(
        vocab=vocab,
        mask_id=MASK_ID,
        words=(OFFSET, vocab),
        p_m=cfg.p_m,
        p_c=cfg.p_c,
        p_r=cfg.p_r,
        loss="ce",
        gather_queries=True,
    )


def window_data(cfg: TopicsRealConfig, data: RealData) -> FixedDataset:
    """The windows as a fixed data set: the same text for every member (the corpus is one), each member
    with its own epoch order and masks."""
    split = data.windows.shape[0] - data.n_test

    def make(gen: torch.Generator, device: str | torch.device) -> dict[str, dict[str, torch.Tensor]]:
        w = data.windows.to(device)
        return {"train": {"tokens": w[:split]}, "test": {"tokens": w[split:]}}

    return FixedDataset(
        make, cfg.train.batch, eval_splits=("test",), eval_limit=cfg.train.eval_batches * cfg.train.batch
    )


def fit_encoder(
    ctx: RunContext,
    cfg: TopicsRealConfig,
    data: RealData,
    arm: str = ARM,
    *,
    build: Any = None,
    train: TrainConfig | None = None,
    probes: Sequence[Probe] = (),
    probe_every: int = 1,
) -> FitResult:
    """Train the encoder ensemble (one member per seed) on the windows by masked-token prediction and store
    it under ``arm`` (its untrained copy under ``arm@init``)."""
    seeds = member_seeds(cfg.seed, cfg.members)
    gcfg = encoder_config(cfg, data.vocab)
    tcfg = train or cfg.train
    trainer = Trainer(
        tcfg,
        ctx.device,
        ctx.progress,
        label=arm,
        objective=masked_objective(cfg, data.vocab),
        probes=probes,
        probe_every=probe_every,
    )
    return ctx.fit(arm, trainer, build or (lambda s: GPT(gcfg, s)), seeds, window_data(cfg, data))


def load_encoder(gcfg: GPTConfig, seeds: Sequence[int], arrays: dict[str, torch.Tensor]) -> GPT:
    """A :class:`GPT` ensemble holding stored parameters (``{name: (E, ...)}``)."""
    model = GPT(gcfg, list(seeds))
    model.load_state_dict({k: v.to(torch.float32) for k, v in arrays.items()}, strict=True)
    return model.eval()


# ----------------------------------------------------------------------------------------------
# Measures


def _cos(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    n = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return n @ n.transpose(-1, -2)


def measure(
    model: GPT | Any, data: RealData, cfg: TopicsRealConfig, *, cooc: bool = False, device: str = "cpu", batch: int = 16
) -> tuple[list[tuple[int, int, str, float]], list[dict[str, torch.Tensor]]]:
    """Every measure of every member of ``model`` (a trained or untrained encoder ensemble, or an
    :class:`~tdlab.models.hf_encoder.HFEncoder`).

    Returns ``(rows, fig3)``: rows ``(0, member, name, value)`` with names ``{mode}/{θ}/{cosine|dot|attention}``,
    ``{mode}/{θ}/attention/L{l}H{h}``, ``{mode}/{θ}/{words|same_pairs|diff_pairs|set_size}``, and with ``cooc``
    ``cooc/{θ}/{attn_same|attn_cooc|cos_same|cos_cooc|pairs}``; ``fig3[e] = {"cos": (9, 9), "ids": (9,)}``.
    Non-finite values (a class without pairs) are left out.
    """
    corpus, topics = data.corpus, data.topics
    emb, E = model_embeddings(model, OFFSET)  # (E, n_words, d), row = corpus word id
    lda_vocab = corpus.lda_vocab
    excluded: frozenset[int] = getattr(model, "excluded", frozenset())  # a checkpoint's words split into several pieces
    n_lda = int(lda_vocab.size)
    configs, accs, cooc_accs, cooc_pairs = [], {}, {}, {}
    for theta in cfg.thetas:
        th = theta_key(theta)
        sets = topic_word_sets(topics, theta, n_lda)
        for mode in MODES:
            a = {w: t for w, t in assign(sets, topics, mode).items() if w not in excluded}
            words, same, diff = tp.same_topic_pairs(a)
            configs.append((th, mode, words, same, diff, len(sets[0])))
            accs[(th, mode)] = tp.PairAttention.from_assignment(a, debias=True, offset=OFFSET)
            if cooc and mode == "single":
                cand = np.array([w for w in lda_vocab if w not in excluded], dtype=np.int64)
                top = tp.top_cooccurring_pairs(corpus.lda_docs, cand, tp.cooc_k(len(sets[0])))
                cooc_pairs[th] = {"same": tp.pair_list(words, same), "cooc": top}
                cooc_accs[th] = tp.PairAttention.from_pairs(cooc_pairs[th], debias=True, offset=OFFSET)
    # attention on unmasked windows spread evenly over the corpus, every member at once
    N = data.windows.shape[0]
    take = np.unique(np.linspace(0, N - 1, min(cfg.attn_windows, N)).round().astype(np.int64))
    for start in range(0, take.size, batch):
        win = data.windows[torch.as_tensor(take[start : start + batch])]  # (B, T) model ids
        pat = model_attention(model, win, device)  # (E, B, L, H, T, T)
        for acc in (*accs.values(), *cooc_accs.values()):
            acc.add(pat, win, batch_dim=1)
    rows: list[tuple[int, int, str, float]] = []

    def put(e: int, name: str, v: float) -> None:
        if math.isfinite(float(v)):
            rows.append((0, e, name, float(v)))

    for th, mode, words, same, diff, size in configs:
        r = tp.embedding_ratios(emb[:, words].double(), same, diff)  # arrays (E,)
        acc = accs[(th, mode)]
        att = np.atleast_1d(acc.ratio(keep_dims=1))  # (E,): mean over layers and heads, then ratio
        heads = np.asarray(acc.per_head())  # (E, L, H)
        for e in range(E):
            put(e, f"{mode}/{th}/cosine", np.atleast_1d(r["cosine"])[e])
            put(e, f"{mode}/{th}/dot", np.atleast_1d(r["dot"])[e])
            put(e, f"{mode}/{th}/cos_gap_z", np.atleast_1d(r["cos_gap_z"])[e])
            put(e, f"{mode}/{th}/attention", att[e] if att.size == E else np.nan)
            for key, v in (
                ("words", len(words)),
                ("same_pairs", int(np.triu(same).sum())),
                ("diff_pairs", int(np.triu(diff).sum())),
                ("set_size", size),
            ):
                put(e, f"{mode}/{th}/{key}", v)
            if heads.ndim == 3:
                for (layer, h), v in np.ndenumerate(heads[e]):
                    put(e, f"{mode}/{th}/attention/L{layer}H{h}", v)
        if th in cooc_pairs and mode == "single":
            means = tp.table2_means(cooc_pairs[th], emb.double(), None, offset=0)
            ca = cooc_accs[th]
            for e in range(E):
                for cls in ("same", "cooc"):
                    put(e, f"cooc/{th}/attn_{cls}", np.asarray(ca.mean(cls))[e].mean())
                    put(e, f"cooc/{th}/cos_{cls}", np.atleast_1d(means[cls]["cosine"])[e])
                put(e, f"cooc/{th}/pairs", len(cooc_pairs[th]["cooc"]))
                put(e, f"cooc/{th}/same_pairs_n", len(cooc_pairs[th]["same"]))
    try:
        ids = np.concatenate(fig3_words(topics, np.array([w for w in lda_vocab if w not in excluded], dtype=np.int64)))
    except ValueError:  # fewer than 3 topics with 3 own words: no Fig. 3 (its claim is then not stated)
        return rows, []
    fig3 = [{"cos": _cos(emb[e, ids]).float(), "ids": torch.as_tensor(ids)} for e in range(E)]
    return rows, fig3


# ----------------------------------------------------------------------------------------------
# The experiments


def write_info(ctx: RunContext, data: RealData, **extra: Any) -> None:
    """``cache/info.json`` (corpus provenance and sizes, the unigram model's held-out loss) and ``cache/vocab.json``
    (the model's word list), which the analysis and the report read."""
    cache = ctx.writer.path / "cache"
    info = {
        "provenance": data.corpus.provenance,
        "vocab": len(data.corpus.vocab),
        "documents": len(data.corpus.docs),
        "unigram_loss": unigram_loss(data.windows, data.n_test, data.vocab, OFFSET),
        **extra,
    }
    (cache / "info.json").write_text(json.dumps(info))
    (cache / "vocab.json").write_text(json.dumps(data.corpus.vocab))


def run_info(run: RunView) -> dict[str, Any]:
    """``cache/info.json`` of a run (``{}`` when absent)."""
    try:
        return json.loads((run.path / "cache" / "info.json").read_text())
    except (OSError, ValueError):
        return {}


def trivial_masked_loss(info: dict[str, Any]) -> float | None:
    """The health gate's trivial predictor of a masked word: uniform over the corpus words, log n (the trained
    encoder's held-out loss must be below it)."""
    n = int(info.get("vocab", 0) or 0)
    return math.log(n) if n > 1 else None


def what_ran(cfg: TopicsRealConfig, corpus: str, control: bool = True, setting: str | None = None) -> str:
    """The report's first line: what ran, on what, with which model, and what it is not."""
    if cfg.model.checkpoint:
        model = (
            f"the local Hugging Face checkpoint {cfg.model.checkpoint} as the 'trained' model and the same "
            f"architecture randomly initialised as the control (no training here)"
        )
    else:
        m = cfg.model
        model = (
            f"a locally trained BERT-shaped encoder ({m.layers} layers, d = {m.d}, {m.heads} heads, {m.norm}-LN, "
            f"{'tied' if m.tie_weights else 'untied'} output, {cfg.train.steps} masked-token steps, "
            f"{cfg.members} seeds)" + (" and its untrained copies as the control" if control else "")
        )
    method = setting or "the seed's method (App. G.3: LDA topics, ambiguity threshold, debiased attention)"
    text = f"What ran: {method} on {corpus}, with {model}; not the seed's full Wikipedia"
    if setting:
        return text + "."
    return (
        text + " and its pretrained BERT/ALBERT/BART/ELECTRA/RoBERTa. The seed's BERT numbers are printed beside "
        "ours as reference only."
    )


RealConfigT = TypeVar("RealConfigT", bound=TopicsRealConfig)


class RealTextExperiment(Experiment[RealConfigT]):
    """What ``topics-real`` and ``topics-real-cooc`` share: the run (train or load, then measure the trained
    and untrained models), the health gate against log n, the :data:`PAST_UNIGRAM` stage, the provenance of
    their rows (the seed's only for a pretrained checkpoint at the seed's θ), and the common notes."""

    cooc = False
    # The seed's θ (Tables 1, 2, 5): a pretrained checkpoint's rows at these are the seed's own.
    PAPER_THETAS = (0.0005, 0.001, 0.002)

    def run(self, cfg: RealConfigT, ctx: RunContext) -> None:
        data = prepare_data(cfg, ctx.writer.path / "cache", ctx.progress)
        info = {
            "provenance": data.corpus.provenance,
            "windows": int(data.windows.shape[0]),
            "test_windows": data.n_test,
            "vocab": len(data.corpus.vocab),
            "lda_vocab": int(data.corpus.lda_vocab.size),
        }
        if cfg.model.checkpoint:
            from tdlab.models.hf_encoder import HFEncoder

            seeds = member_seeds(cfg.seed, 1)
            trained = HFEncoder(cfg.model.checkpoint, data.corpus.vocab, offset=OFFSET)
            control = HFEncoder(cfg.model.checkpoint, data.corpus.vocab, offset=OFFSET, random_init=True, seed=seeds[0])
            info["skipped_words"] = trained.skipped
            info["checkpoint"] = trained.describe()  # the architecture and the matrix read as "the embedding"
            models: dict[str, HFEncoder | GPT] = {"trained": trained, "untrained": control}
        else:
            fit_encoder(ctx, cfg, data)
            gcfg = encoder_config(cfg, data.vocab)
            seeds = member_seeds(cfg.seed, cfg.members)
            w = ctx.writer
            stack = lambda states: {k: torch.stack([s[k] for s in states]) for k in states[0]}  # noqa: E731
            models = {
                "trained": load_encoder(gcfg, seeds, stack(w.load_arrays(ARM))).to(ctx.device),
                "untrained": load_encoder(gcfg, seeds, stack(w.load_arrays(init_arm(ARM)))).to(ctx.device),
            }
        write_info(ctx, data, **info)
        for which, model in models.items():
            rows, fig3 = measure(model, data, cfg, cooc=self.cooc, device=ctx.device)
            ctx.store_rows(MEASURE_ARMS[which], rows)
            ctx.writer.save_arrays(f"fig3/{which}", fig3)

    def health(self, cfg: RealConfigT, run: Run | RunView) -> dict[str, ArmHealth]:
        """The base gate, with the encoder's held-out loss against log n (the uniform predictor)."""
        run = run if isinstance(run, RunView) else RunView(run)
        out = super().health(cfg, run)
        triv = trivial_masked_loss(run_info(run))
        h = out.get(ARM)
        if h is not None and triv is not None:
            out[ARM] = assess_arm(
                ARM,
                h.facts["initial_loss"],
                h.facts["final_loss"],
                accepted_steps=h.facts.get("accepted_steps"),
                test_error=h.facts["final_loss"],
                trivial_error=triv,
                all_finite="non-finite values" not in h.reasons,
            )
        return out

    def facts(self, cfg: RealConfigT, run: RunView) -> dict[str, Any]:
        """``cache/info.json``, completed from the cached corpus when it predates ``documents`` / ``unigram_loss``."""
        info = run_info(run)
        if "unigram_loss" not in info:
            info.update(corpus_facts(cfg, run.path / "cache"))
        return info

    def trained_arms(self, cfg: RealConfigT) -> list[str]:
        """The arms a trained-model row depends on: the encoder, or none for a checkpoint (nothing trained)."""
        return [] if cfg.model.checkpoint else [ARM]

    def provenance(self, cfg: RealConfigT, theta: float | None = None) -> Provenance:
        """``paper`` for a pretrained checkpoint's rows at the seed's θ (or without θ), else ``ours``."""
        paper_theta = theta is None or any(math.isclose(theta, t) for t in self.PAPER_THETAS)
        return "paper" if cfg.model.checkpoint and paper_theta else "ours"

    def start(self, cfg: RealConfigT, run: RunView) -> Measurements:
        """The measurements every real-text analysis starts from: corpus facts and the encoder's stage."""
        info = self.facts(cfg, run)
        out = Measurements({"corpus": info})
        if not cfg.model.checkpoint and run.has(ARM, "test_loss"):
            uni = float(info.get("unigram_loss", math.nan))
            loss = run.final(ARM, "test_loss")
            out.stage(ARM, PAST_UNIGRAM, loss, uni, "lt", evidence="held-out test loss vs the unigram model's")
            out.values["heldout_loss"] = {
                "encoder": loss.tolist(),
                "unigram": uni,
                "uniform": trivial_masked_loss(info),
            }
        return out

    def values(self, run: RunView, which: str, name: str) -> np.ndarray:
        """``(E,)`` stored measure ``name`` of the trained or untrained members (empty when not measured)."""
        arm = MEASURE_ARMS[which]
        v = run.final(arm, name) if run.has(arm, name) else np.zeros(0)
        return v[np.isfinite(v)]  # a member without the measure (no pair of a class) stored none

    def common_notes(self, cfg: RealConfigT, measured: Measurements) -> list[str]:
        info = measured.values["corpus"]
        notes = [what_ran(cfg, info.get("provenance", "the configured corpus"))]
        if cfg.model.checkpoint:
            notes.append(
                "Rows of the checkpoint at the seed's θ ("
                + ", ".join(f"{t:g}" for t in self.PAPER_THETAS)
                + ") are the seed's setting (a pretrained model) and decide the paper groups; other θ are ours."
            )
        docs = info.get("documents")
        if docs:
            notes.append(
                f"LDA: {cfg.lda.topics} topics over {docs} documents ({docs / cfg.lda.topics:.2g} documents per "
                "topic): at this scale a topic is close to a handful of articles, not the seed's 100 topics "
                "over Wikipedia."
            )
        if "skipped_words" in info:
            ck = info.get("checkpoint", {})
            read = (
                (
                    f"{ck['architecture']}: the embedding is {ck['embedding']}, shape {ck['embedding_shape']}; the "
                    f"attention is its encoder's self-attention, every layer and head. "
                )
                if ck
                else ""
            )
            notes.append(
                f"Checkpoint {read}{info['skipped_words']} corpus words are split into several word pieces "
                f"(or unknown) by its tokenizer and are skipped (no single input embedding)."
            )
        return notes
