"""Is every ensemble faster than its loop? One training step of each model family tdlab ships, on a CPU.

For every family (the table :data:`FAMILIES`; one or more model variants each) at the shapes of its
experiment's ``quick`` profile (read from the experiment's own config, built with the experiment's own
builders where it has them), in one process:

* **ensemble**: one model of E members (every parameter ``(E, ...)``) stepped once per training step;
* **loop**: E one-member models stepped one after another (what training without ensembles costs);
* **chunked**: the E members as a loop over ensembles of ``c`` members, for ``c`` in {1, 2, 4, E} and the
  size :func:`tdlab.train.trainer.auto_chunk` picks for the family's batch and sequence length (what the
  Trainer runs on a CPU). ``loop/ensemble`` ≥ 1 means the ensemble is not slower; ``chunked ratio`` is
  ``loop / (auto-chunk loop)``; ``best chunk`` is the fastest ``c`` timed (for tuning ``auto_chunk``).

A step is the family's real objective (:mod:`tdlab.train.objectives`: next token, last position, masked
tokens; the regression trainer's query loss for the linear-attention models) through
``bench/timing.py``'s :func:`objective_steps` (prepare, forward, backward of the summed per-member
loss, one ``torch.optim.AdamW`` step), inside :func:`tdlab.train.cpu.flush_denormals` as the Trainer runs
it. The random data (right shape and vocabulary) is drawn once per family, member ``e``'s slice is the
same in every layout; data generation is not timed (masks of the masked-token objective are, as in
training).

Timing: each layout runs ``--steps`` steps once untimed (warm-up), then ``--repeats`` times; the best of
each clock is kept and divided by ``--steps``. Two clocks are printed: **cpu** = ``time.process_time()``
(CPU seconds of this process, all its threads: little affected by other processes on a shared machine,
but with 2 threads it counts both, OpenMP's spin-waiting included, so on a loaded machine the
2-thread rows are unreliable) and **wall** = ``time.perf_counter()``. Ratios are given for both. A full
run (all families, E = 8, threads 1 and 2, defaults) takes several minutes on 2 quiet cores; avdigits
and topics-real dominate.

Check: once per variant (at the first thread count, dropout off via ``eval()``), the ensemble and the
loop are each trained ``--steps`` steps from the same seeds on the same data; members are independent,
so the largest |difference| of any parameter must be at float rounding (printed; an "ensemble ≠ loop"
flag marks one above ``--tol``).

Usage::

    python bench/bench_ensembles.py [FAMILY ...] [--members 8] [--threads 1 2] [--steps 3] [--repeats 3]
        [--markdown] [--tol 1e-4]

Families (default: all; the experiment whose quick profile gives the shapes):

* ``markov-sec2``, ``markov-gpt2``: :class:`~tdlab.models.gpt.GPT` of ``markov-init``, next token;
* ``kth-markov``: the 2-layer pre-LN GPT of ``markov-icl-depth``, next token;
* ``attn-only``: the deepest attention-only GPT of ``markov-icl-depth-linear`` (bench_icl_linear.py), next token;
* ``norm-attn``: :class:`~tdlab.models.normalised_attention.NormalisedAttention` of ``markov-icl-construction``
  (the experiment that trains it), next token;
* ``anchors``: the seed-001 post-LN GPT of ``anchors-bias`` (γ-init, γ per member), last position;
* ``anchors-mlp``: :class:`~tdlab.models.emb_mlp.EmbMLP` of ``anchors-mlp`` and the Def. 2 model
  (:class:`~tdlab.models.emb_mlp.Def2Transformer`, A.3 widths: ``d_m >= vocab``) on its inputs, last position;
* ``topics``: :class:`~tdlab.models.topic_attention.TopicAttention` of ``topics-attn`` and ``topics-wv``'s
  uniform-attention setting, masked tokens;
* ``topics-real``: the BERT-shaped encoder of ``topics-real`` (bench_topics_real.py), masked tokens;
* ``avdigits``: the full multimodal CA model and bi-CA of ``icl-avdigits`` (bench_avdigits.py), last position
  (the experiment's chunk is auto_chunk's with the conv tokeniser's full-resolution maps as ``member_bytes``);
* ``linear-attn``: LSA and the tied LCA_T (one / two parameters) of ``icl-lsa-vs-lca``, float64, query loss
  (the experiment steps them by GD with backtracking; here AdamW: the step's cost is the loss and its
  gradient; its RegressionTrainer never chunks, so auto chunk = E).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from timing import objective_steps
from torch import nn

from tdlab.experiments.base import get
from tdlab.seeding import Purpose, generators, member_seeds
from tdlab.theory.icl_stats import PromptStats
from tdlab.train.cpu import flush_denormals
from tdlab.train.objectives import LastPosition, NextToken
from tdlab.train.regression import member_state, predict
from tdlab.train.trainer import auto_chunk

DEVICE = "cpu"


@dataclass(frozen=True)
class Case:
    """One model variant of a family.

    ``build(seeds)`` makes the ensemble of ``len(seeds)`` members; ``data(E)`` the sample of E members
    (leading member axis: a tensor, a dict of tensors or :class:`PromptStats`), drawn once; ``objective``
    has ``prepare(sample, gens)`` and ``loss(model, batch) -> (E,)``; ``batch`` x ``seq_len`` is what
    :func:`auto_chunk` is asked about (the tokens one member's step sees); ``seq_len=None``: the family's
    trainer never chunks (auto chunk = E)."""

    family: str
    shapes: str
    build: Callable[[list[int]], nn.Module]
    data: Callable[[int], Any]
    objective: Any
    batch: int
    seq_len: int | None
    lr: float = 1e-3
    member_bytes: int = 0  # a member's largest activation that is not an output (auto_chunk's member_bytes)


class QueryLoss:
    """The regression trainer's loss (``RegressionTrainer``, ``target="response"``): mean over the
    prompts of ``(y_q - ŷ_q)^2``, per member, on prompt statistics; quacks like an objective."""

    def prepare(self, sample: PromptStats, gens: Sequence[torch.Generator]) -> PromptStats:
        return sample

    def loss(self, model: nn.Module, stats: PromptStats) -> torch.Tensor:
        return ((stats.y_query - predict(model, stats)) ** 2).mean(-1)


# ---------------------------------------------------------------------------------------------
# Data (drawn once; member e's slice is the same in every layout)


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def tokens(E: int, B: int, T: int, V: int, low: int = 0) -> torch.Tensor:
    """Uniform token ids in ``[low, V)``, ``(E, B, T)``."""
    return torch.randint(low, V, (E, B, T), generator=_gen())


def labelled(E: int, B: int, T: int, V: int, classes: int) -> dict[str, torch.Tensor]:
    """``{"tokens": (E, B, T), "label": (E, B)}`` for :class:`LastPosition`."""
    return {"tokens": tokens(E, B, T, V), "label": torch.randint(0, classes, (E, B), generator=_gen())}


def take(sample: Any, lo: int, hi: int) -> Any:
    """Members ``lo..hi-1`` of a sample."""
    if isinstance(sample, torch.Tensor):
        return sample[lo:hi]
    if isinstance(sample, PromptStats):
        return PromptStats.cat([sample.member(e) for e in range(lo, hi)], 0)
    return {k: take(v, lo, hi) for k, v in sample.items()}


def quick(name: str) -> Any:
    """The experiment's quick-profile config."""
    return get(name).make_config("quick")


def gamma_of(gammas: Sequence[float]) -> Callable[[int], float]:
    """Member seed -> its γ: one of the experiment's γ values, a function of the seed alone (so a member
    has the same γ in every layout)."""
    return lambda seed: float(gammas[seed % len(gammas)])


# ---------------------------------------------------------------------------------------------
# Families: each returns its variants at its experiment's quick shapes


def markov(arch: str) -> Callable[[], list[Case]]:
    """``markov-init`` quick (seed 000 Sec. 2 / GPT-2 model, binary chain), next token."""

    def cases() -> list[Case]:
        from tdlab.models.gpt import GPT

        cfg = quick("markov-init")
        m, t = cfg.arm_model(arch, "standard"), cfg.train
        return [
            Case(
                f"markov-{arch}",
                f"d{m.d} L{m.layers} V{m.vocab} B{t.batch} T{t.seq_len}",
                lambda s: GPT(m, s),
                lambda E: tokens(E, t.batch, t.seq_len + 1, m.vocab),
                NextToken(),
                t.batch,
                t.seq_len,
                t.lr,
            )
        ]

    return cases


def gpt_cell(family: str, experiment: str, model: Callable[[Any], Any]) -> Callable[[], list[Case]]:
    """A seed-003 in-context Markov GPT: ``model(cfg)`` picks the experiment's cell config; next token."""

    def cases() -> list[Case]:
        from tdlab.models.gpt import GPT

        cfg = quick(experiment)
        m, t = model(cfg), cfg.train
        shapes = f"d{m.d} L{m.layers} H{m.heads} mlp={m.mlp} norm={m.norm_placement} V{m.vocab} B{t.batch} T{t.seq_len}"
        return [
            Case(
                family,
                shapes,
                lambda s: GPT(m, s),
                lambda E: tokens(E, t.batch, t.seq_len + 1, m.vocab),
                NextToken(),
                t.batch,
                t.seq_len,
                t.lr,
            )
        ]

    return cases


def norm_attn() -> list[Case]:
    """``markov-icl-construction`` quick's trained normalised-attention model, next token."""
    from tdlab.models.normalised_attention import NormalisedAttention

    cfg = quick("markov-icl-construction")
    m, t = cfg.model, cfg.train
    return [
        Case(
            "norm-attn",
            f"d{m.d} L{m.layers} V{m.vocab} B{t.batch} T{t.seq_len}",
            lambda s: NormalisedAttention(m, s),
            lambda E: tokens(E, t.batch, t.seq_len + 1, m.vocab),
            NextToken(),
            t.batch,
            t.seq_len,
            t.lr,
        )
    ]


def anchors() -> list[Case]:
    """``anchors-bias`` quick: the seed-001 post-LN GPT, γ-init per member, last-position label."""
    from tdlab.experiments.paper001_reasoning_bias.common.training import gamma_gpt

    cfg = quick("anchors-bias")
    m, B, L = cfg.model_for_task(), cfg.train.batch, cfg.task.L
    gamma = gamma_of(cfg.gammas)
    shapes = f"d{m.d} d_k{m.d_attn} d_ff{m.d_ff} L{m.layers} V{m.vocab} B{B} T{L}"
    return [
        Case(
            "anchors",
            shapes,
            lambda s: gamma_gpt(m, s, {x: gamma(x) for x in s}),
            lambda E: labelled(E, B, L, m.vocab, m.vocab),
            LastPosition(),
            B,
            L,
            cfg.train.lr,
        )
    ]


def anchors_mlp() -> list[Case]:
    """``anchors-mlp`` quick: Emb-MLP (Def. 1) on ``[z_p, a..]`` (L = q + 1) and the Def. 2 one-layer model
    (A.3 widths: its output lives in R^{d_m}, so d_m >= vocab), γ per member, last-position label."""
    from tdlab.models.emb_mlp import Def2Config, Def2Transformer, EmbMLP

    cfg = quick("anchors-mlp")
    m, B, L, V = cfg.model_for_task(), cfg.train.batch, cfg.task.q + 1, cfg.task.d_vob
    d2 = Def2Config(vocab=V, activation=m.activation, fan=m.fan)
    gamma = gamma_of(cfg.gammas)

    def data(E):
        return labelled(E, B, L, V, V)

    return [
        Case(
            "anchors-mlp/emb-mlp",
            f"d_m{m.d_m} d_f{m.d_f} V{V} B{B} T{L}",
            lambda s: EmbMLP(m, s, [gamma(x) for x in s]),
            data,
            LastPosition(),
            B,
            L,
            cfg.train.lr,
        ),
        Case(
            "anchors-mlp/def2",
            f"d_m{d2.d_m} d_k{d2.d_k} d_f{d2.d_f} V{V} B{B} T{L}",
            lambda s: Def2Transformer(d2, s, [gamma(x) for x in s]),
            data,
            LastPosition(),
            B,
            L,
            cfg.train.lr,
        ),
    ]


def topic_case(experiment: str, variant: str, update: dict[str, Any]) -> Case:
    """The topic model of ``experiment``'s quick profile (``update`` applied): LDA documents
    (N ~ U{n_min..n_max}, padded), masked tokens (CE, masked positions only)."""
    from tdlab.experiments.paper004_topics.common.training import masked_objective
    from tdlab.models.topic_attention import TopicAttention
    from tdlab.tasks.topics import Topics

    cfg = quick(experiment)
    task = Topics(cfg.task)
    m = cfg.model.updated({"vocab": task.cfg.T * task.cfg.v + 1, **update})
    B, N = cfg.train.batch, cfg.train.seq_len
    return Case(
        f"topics/{variant}",
        f"V{m.vocab} onehot={m.onehot} B{B} N<={N}",
        lambda s: TopicAttention(m, s),
        lambda E: task.sample(generators(member_seeds(0, E), Purpose.TRAIN_DATA), B, N),
        masked_objective(cfg, "ce"),
        B,
        N,
        cfg.train.lr,
    )


def topics() -> list[Case]:
    """``topics-attn`` quick (one-hot, trained attention) and ``topics-wv`` quick's uniform-attention setting."""
    return [topic_case("topics-attn", "attn", {}), topic_case("topics-wv", "uniform-attn", {"uniform_attn": True})]


def topics_real() -> list[Case]:
    """``topics-real`` quick: the BERT-shaped encoder (post-LN, bidirectional, tied output) over a
    ``max_vocab``-word vocabulary, masked tokens at the masked positions (as bench_topics_real.py)."""
    from tdlab.experiments.paper004_topics.common.real_text import (
        OFFSET,
        encoder_config,
        masked_objective,
    )
    from tdlab.models.gpt import GPT

    cfg = quick("topics-real")
    V, B, T = cfg.corpus.max_vocab + OFFSET + 1, cfg.train.batch, cfg.train.seq_len
    m = encoder_config(cfg, V)
    return [
        Case(
            "topics-real",
            f"d{m.d} L{m.layers} H{m.heads} V{V} B{B} T{T}",
            lambda s: GPT(m, s),
            lambda E: tokens(E, B, T, V, low=OFFSET),
            masked_objective(cfg, V),
            B,
            T,
            cfg.train.lr,
        )
    ]


def avdigits() -> list[Case]:
    """``icl-avdigits`` quick: the full multimodal CA model and the bi-CA baseline on (image, spectrogram)
    pairs (2 x 28 x 28), 10-class label."""
    from tdlab.experiments.paper002_cross_attention.avdigits import build_model
    from tdlab.models.multimodal_ca import activation_bytes

    cfg = quick("icl-avdigits")
    m, B, S = cfg.model, cfg.train.batch, cfg.model.image_size

    def data(E: int) -> dict[str, torch.Tensor]:
        return {
            "inputs": torch.rand(E, B, 2, S, S, generator=_gen()),
            "targets": torch.randint(0, m.classes, (E, B), generator=_gen()),
        }

    shapes = f"d{m.d} L{m.layers} H{m.heads} d_h{m.d_h} B{B} 2x{S}x{S}"
    # the experiment's chunk (trainer_config): auto_chunk with the conv tokeniser's full-resolution maps
    return [
        Case(
            f"avdigits/{arm}",
            shapes,
            lambda s, a=arm: build_model(cfg, a, s),
            data,
            LastPosition(),
            B,
            cfg.train.seq_len,
            cfg.train.lr,
            activation_bytes(m, B),
        )
        for arm in ("full", "bi-ca")
    ]


def linear_attn() -> list[Case]:
    """``icl-lsa-vs-lca`` quick: LSA and the tied LCA_T (one / two parameters, T = fixed_depth) from
    their experiment inits, float64, on N prompts of context L (statistics, the trainer's fast path)."""
    from tdlab.experiments.paper002_cross_attention.common.synthetic import lca_builder
    from tdlab.models.linear_attention import LSA
    from tdlab.theory.icl_stats import sample_stats

    cfg = quick("icl-lsa-vs-lca")
    task, t, T = cfg.task.build(), cfg.train, cfg.fixed_depth

    def data(E):
        return sample_stats(task, generators(member_seeds(0, E), Purpose.TRAIN_DATA), t.prompts, t.context)

    shapes = f"d{task.d} N{t.prompts} L{t.context}"
    builds = {
        "lsa": lambda s: LSA(task.d, s, dtype=torch.float64),
        "lca-one": lca_builder(task, "one", T),
        "lca-two": lca_builder(task, "two", T),
    }
    # RegressionTrainer trains every member at once (no chunking): auto chunk = E
    return [
        Case(f"linear-attn/{k}", shapes + ("" if k == "lsa" else f" T{T}"), b, data, QueryLoss(), t.prompts, None, t.lr)
        for k, b in builds.items()
    ]


FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "markov-sec2": markov("sec2"),
    "markov-gpt2": markov("gpt2"),
    # markov-icl-depth quick's 2-layer pre-LN cell (k = 1, absolute positions)
    "kth-markov": gpt_cell("kth-markov", "markov-icl-depth", lambda c: c.arm_model(2, "absolute")),
    # markov-icl-depth-linear quick's deepest attention-only cell (no MLP, no LayerNorm, relative k/v)
    "attn-only": gpt_cell("attn-only", "markov-icl-depth-linear", lambda c: c.cell_model("attn", max(c.depths), 1)),
    "norm-attn": norm_attn,
    "anchors": anchors,
    "anchors-mlp": anchors_mlp,
    "topics": topics,
    "topics-real": topics_real,
    "avdigits": avdigits,
    "linear-attn": linear_attn,
}


# ---------------------------------------------------------------------------------------------
# Layouts, timing, check


class Layout:
    """The E members as consecutive chunks of ``chunk`` members, each its own ensemble and AdamW."""

    def __init__(self, case: Case, seeds: list[int], data: Any, chunk: int) -> None:
        self.case = case
        spans = [(lo, min(lo + chunk, len(seeds))) for lo in range(0, len(seeds), chunk)]
        self.models = [case.build(seeds[lo:hi]).to(DEVICE) for lo, hi in spans]
        for model, (lo, hi) in zip(self.models, spans, strict=True):
            if not hasattr(model, "seeds"):  # LSA/LCA keep none; objective_steps draws its generators from them
                model.seeds = seeds[lo:hi]
        self.parts = [take(data, lo, hi) for lo, hi in spans]
        self.opts = [torch.optim.AdamW(m.parameters(), lr=case.lr) for m in self.models]

    def train(self, steps: int) -> None:
        with flush_denormals(DEVICE):
            for model, opt, part in zip(self.models, self.opts, self.parts, strict=True):
                objective_steps(model, opt, self.case.objective, lambda gens, p=part: p, steps, DEVICE)

    def states(self) -> list[dict[str, torch.Tensor]]:
        """Every member's parameters, in member order."""
        return [
            (m.member_state(e) if hasattr(m, "member_state") else member_state(m, e))
            for m in self.models
            for e in range(len(m.seeds))
        ]


def best_times(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(CPU, wall) seconds of the fastest of ``repeats`` calls of ``fn`` after one untimed call; each
    clock's minimum separately."""
    fn()
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall)


def max_diff(case: Case, seeds: list[int], data: Any, steps: int) -> float:
    """Largest |parameter difference| between the ensemble and the loop after ``steps`` steps (eval mode:
    dropout draws from a global generator, so it would differ by construction)."""
    a, b = Layout(case, seeds, data, len(seeds)), Layout(case, seeds, data, 1)
    for lay in (a, b):
        for m in lay.models:
            m.eval()
        lay.train(steps)
    return max(
        float((x[k].double() - y[k].double()).abs().max())
        for x, y in zip(a.states(), b.states(), strict=True)
        for k in x
    )


@dataclass
class Row:
    """One variant at one thread count: ``ms[chunk] = (cpu, wall)`` ms per step of all members."""

    family: str
    shapes: str
    threads: int
    ms: dict[int, tuple[float, float]]
    members: int
    auto: int

    def ratio(self, chunk: int) -> tuple[float, float]:
        """(cpu, wall) loop time over the time of the ``chunk`` layout."""
        return self.ms[1][0] / self.ms[chunk][0], self.ms[1][1] / self.ms[chunk][1]

    def best(self) -> tuple[int, int]:
        """The fastest chunk size by cpu and by wall time."""
        return min(self.ms, key=lambda c: self.ms[c][0]), min(self.ms, key=lambda c: self.ms[c][1])

    def cells(self) -> list[str]:
        """ensemble ms, loop ms, loop/ensemble, auto chunk, chunked ratio, best chunk: each "cpu / wall"."""
        E = self.members
        auto = f"{self.auto}" + ("" if self.auto < E else " (= E)")
        return [
            both(self.ms[E], ".2f"),
            both(self.ms[1], ".2f"),
            both(self.ratio(E), ".2f"),
            auto,
            both(self.ratio(self.auto), ".2f"),
            both(self.best(), "d"),
        ]


def both(v: tuple[float, float], fmt: str) -> str:
    return f"{v[0]:{fmt}} / {v[1]:{fmt}}"


def bench(case: Case, E: int, threads: Sequence[int], steps: int, repeats: int) -> tuple[list[Row], float]:
    """Every layout of ``case`` timed at each thread count, and the ensemble-vs-loop check (at the first)."""
    seeds, data = member_seeds(0, E), case.data(E)
    width = case.objective.output_width(None) if hasattr(case.objective, "output_width") else 0  # as the Trainer asks
    auto = E if case.seq_len is None else auto_chunk(E, case.batch, case.seq_len, DEVICE, width, case.member_bytes)
    chunks = sorted({c for c in (1, 2, 4, E, auto) if c <= E})
    layouts = {c: Layout(case, seeds, data, c) for c in chunks}
    rows, diff = [], None
    for n in threads:
        torch.set_num_threads(n)
        if diff is None:
            diff = max_diff(case, seeds, data, steps)
        ms = {
            c: tuple(1e3 * t / steps for t in best_times(lambda lay=lay: lay.train(steps), repeats))
            for c, lay in layouts.items()
        }
        rows.append(Row(case.family, case.shapes, n, ms, E, auto))
    return rows, diff


HEADER = ["ensemble ms/step", "loop ms/step", "loop/ensemble", "auto chunk", "chunked ratio", "best chunk"]


def print_row(r: Row) -> None:
    print(f"  {r.threads} thread(s): " + "   ".join(f"{h} {c}" for h, c in zip(HEADER, r.cells(), strict=True)))
    print("      per chunk size: " + ", ".join(f"{c}: {both(t, '.2f')} ms" for c, t in r.ms.items()))


def markdown(rows: list[Row]) -> None:
    print("| family | shapes | threads | " + " | ".join(HEADER) + " |")
    print("|---" * (3 + len(HEADER)) + "|")
    for r in rows:
        print(f"| {r.family} | {r.shapes} | {r.threads} | " + " | ".join(r.cells()) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "families", nargs="*", metavar="FAMILY", help=f"families to time (default: all): {' '.join(FAMILIES)}"
    )
    ap.add_argument("--members", type=int, default=8, help="ensemble members E")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch.set_num_threads values to time")
    ap.add_argument("--steps", type=int, default=3, help="training steps per timed call")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls after one warm-up (best kept)")
    ap.add_argument("--markdown", action="store_true", help="print one markdown table at the end")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest |ensemble - loop| parameter difference accepted")
    args = ap.parse_args()
    names = args.families or list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        ap.error(f"unknown family {', '.join(unknown)}; choose from {' '.join(FAMILIES)}")
    print(
        f"torch {torch.__version__}, E = {args.members}, threads {args.threads}, {args.steps} steps x best of "
        f"{args.repeats}; times are ms per step of all E members, cpu (process_time) / wall (perf_counter)"
    )
    rows, flagged = [], []
    for name in names:
        for case in FAMILIES[name]():
            t0 = time.perf_counter()
            got, diff = bench(case, args.members, args.threads, args.steps, args.repeats)
            rows += got
            bad = not diff <= args.tol  # NaN counts as a disagreement
            if bad:
                flagged.append(case.family)
            print(
                f"{case.family:22s} {case.shapes}   max |θ_ensemble − θ_loop| after {args.steps} steps: {diff:.1e}"
                f"{'   ENSEMBLE ≠ LOOP' if bad else ''}   ({time.perf_counter() - t0:.1f} s)"
            )
            if not args.markdown:
                for r in got:
                    print_row(r)
    if args.markdown:
        print()
        markdown(rows)
    print(
        "\nEvery time and ratio is cpu / wall: cpu = time.process_time() (CPU seconds of this process, all its "
        "threads), wall = time.perf_counter(); best of the repeats, per step of all members. Ratios >= 1: the "
        "ensemble (or the auto-chunked loop) is not slower than the loop of single models. best chunk: the fastest "
        "chunk size timed (1, 2, 4, E, auto)."
    )
    if flagged:
        print(f"\nensemble and loop disagree beyond {args.tol:g}: {', '.join(flagged)}")


if __name__ == "__main__":
    main()
