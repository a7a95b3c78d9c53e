"""The documentation site's per-seed pages, generated (never typed) — and the strict site build.

``tdlab docs build [--runs DIR] [--site DIR]`` writes, for each seed paper, ``docs/seeds/seedNNN.md``:

* every figure and table of the seed (or, for the seed-003 talk, every result slide), as declared in
  :data:`PAPERS` from a reading of the seed's text, with the experiment(s) that reproduce it or a
  one-line reason it is not reproduced;
* every experiment of the seed from the registry (:func:`tdlab.experiments.base.registry`): the
  figure or table it reproduces (its ``figure`` attribute, verbatim), its description, the
  ``tdlab run NAME`` command (``--profile paper`` too), every declared claim with the verdict and the
  numbers of the newest run of that experiment under ``--runs`` (:func:`tdlab.report.findings.group_line`)
  or how to get one, and that run's figures, copied into ``docs/seeds/figures/``;

then runs ``mkdocs build --strict`` on ``mkdocs.yml``. ``docs/seeds/`` is generated and git-ignored:
without run directories (a clean clone, CI) the pages say "no run yet" and how to get one, and the
build needs no training. Only regular files are read from run directories, never through a symlink
(:func:`tdlab.safeio.copy_inside`), and nothing in them is written.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tdlab.config import ConfigError, echo
from tdlab.pages.records import Published, group_table, load_published
from tdlab.report.mdtext import md_cell, md_code, md_text
from tdlab.runs import Run, RunDirError, list_runs
from tdlab.safeio import built_aside, check_not_in_run, check_output_folder, copy_inside, path_kind

__all__ = [
    "GENERATED",
    "MARKER",
    "PAPERS",
    "BuildResult",
    "Paper",
    "PaperItem",
    "build_site",
    "check_runs",
    "docs_folder",
    "find_config",
    "latest_runs",
    "paper_of",
    "paper_page",
    "paper_pages_present",
    "papers_index",
    "require_mkdocs",
    "write_paper_pages",
]

GENERATED = "seeds"  # the generated folder, inside the docs folder (git-ignored)
MARKER = ".generated-by-tdlab-docs"  # proves a seeds folder is ours to replace
FIGURE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif")


@dataclass(frozen=True)
class PaperItem:
    """One figure or table of a seed (a result slide, for a talk) and what reproduces it.

    Attributes:
        label: as the seed numbers it: ``"Fig. 4"``, ``"Table 2"`` (for a talk: ``"Part I: "`` and the
            slide's own title).
        shows: one line from its caption: what it shows.
        experiments: the experiments that reproduce it (any seed's); empty when it is not reproduced.
        note: why it is not reproduced (when ``experiments`` is empty), or what to know about how.
    """

    label: str
    shows: str
    experiments: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Paper:
    """A seed paper (or talk) and the inventory of its figures and tables.

    Attributes:
        number: ``"000"`` ... ``"004"``, the prefix of its experiments' ``paper`` attribute.
        title: the paper's title and authors as the seed gives them.
        short: the title in the navigation.
        notes: pages of the docs folder about this seed, ``(title, path)``.
        items: every figure and table of the seed, in the seed's order.
    """

    number: str
    title: str
    short: str
    notes: tuple[tuple[str, str], ...]
    items: tuple[PaperItem, ...]


_I = PaperItem
# Read from the seed texts (shared/seeds/NNN_*.txt): every "Figure N" and "Table N" caption, in order.
PAPERS: tuple[Paper, ...] = (
    Paper(
        "000",
        "Local to Global: Learning Dynamics and Effect of Initialization for Transformers",
        "Local to Global",
        (("Markov landscape and gradient flow", "markov_theory.md"),),
        (
            _I(
                "Fig. 1",
                "gradient flow of the canonical (e, w) parameters along energy contours, p + q < 1 and > 1 "
                "(Thms. 1, 2, 8, Lemma 1)",
                ("markov-landscape",),
            ),
            _I(
                "Fig. 2",
                "gradient flow of (e, w, a) with the attention scalar a: Gaussian init near the origin for "
                "p + q below and above one (§ A.2)",
                ("markov-landscape-3d",),
            ),
            _I(
                "Fig. 3",
                "W_1 and W_V across training from a standard Gaussian init: rank one at convergence (App. A.3.1)",
                ("markov-rank",),
            ),
            _I(
                "Fig. 4",
                "loss curves of the standard Gaussian init and the proposed init, p = 0.5, q = 0.8 (App. A.3.2)",
                ("markov-init",),
                "`markov-bridge` carries Thms. 2 and 8 over a (p, q) grid on the same transformer",
            ),
            _I(
                "Fig. 5",
                "gradient flow in ℝ³ near the origin: the local minima repel for p + q < 1 and attract for "
                "p + q > 1 (Thm. 10, Lemma 14, App. H)",
                ("markov-landscape-3d",),
            ),
            _I("Fig. 6", "W_1 and W_V from a rank-one init: rank one throughout training (App. N)", ("markov-rank",)),
            _I(
                "Table 1",
                "the parameters of the transformer and their shapes",
                (),
                "not reproduced: a description of the Sec. 2 model, not a result; `tdlab.models.gpt` builds it "
                '(`arch="sec2"`)',
            ),
            _I(
                "Table 2",
                "settings and parameters of the experiments",
                (),
                "settings, not a result: [`markov-init`](#markov-init)'s paper profile uses them "
                "(`tdlab run markov-init --profile paper`: 8000 iterations, N = 1024, d = 8, 5 repetitions)",
            ),
            _I(
                "Thms. 2, 8 (App. G)",
                "where a small standard init ends on either side of p + q = 1, on the Sec. 2 "
                "transformer rather than the canonical model",
                ("markov-bridge",),
            ),
            _I(
                "Sec. 4, Sec. 3 / App. A.1",
                "initialisation in I_common reaches the entropy rate; one extra bias step suffices",
                ("markov-icommon",),
            ),
        ),
    ),
    Paper(
        "001",
        "An Analysis for Reasoning Bias of Language Models with Small Initialization (Yao, Zhang, Xu)",
        "Reasoning bias",
        (("Anchor functions", "anchors.md"), ("PrOntoQA and stories", "anchors_text.md")),
        (
            _I(
                "Fig. 1",
                "training loss of PrOntoQA and TinyStories in one next-token training on the mixed data",
                ("anchors-text",),
                "stand-in stories unless `--set data.stories=FILE` points at TinyStories",
            ),
            _I(
                "Fig. 2",
                "A: loss and accuracy on D_mem, D_rsn,train, D_rsn,test for γ = 0.3, 0.5, 0.8 (transformer); "
                "B: accuracy of Emb-MLP at γ = 0.3 and 0.8",
                ("anchors-bias", "anchors-mlp"),
                "2A: `anchors-bias`; 2B: `anchors-mlp`",
            ),
            _I(
                "Fig. 3",
                "Emb-MLP: anchor cosine matrices at epochs 50 and 900, the label laws P^s, embedding vs law",
                ("anchors-mlp",),
            ),
            _I(
                "Fig. 4",
                "transformer embedding structure at small init: anchor cosines, PCA, Eq. 14",
                ("anchors-embedding",),
            ),
            _I(
                "Fig. 5",
                "the first attention module at small init: attention map, the average operator, W^V",
                ("anchors-attention",),
            ),
            _I(
                "Fig. 6",
                "cosine similarity of the embeddings of PrOntoQA and TinyStories tokens",
                ("anchors-text",),
                "stand-in stories unless `--set data.stories=FILE`",
            ),
            _I(
                "Fig. 7",
                "left: targets and predictions of 4 memory groups; right: learning speed of F_mem,1 vs F_mem,2",
                ("anchors-labels",),
            ),
            _I(
                "Fig. 8",
                "schematic of the synthetic composition task",
                ("anchors-bias",),
                "a schematic: `tdlab.tasks.anchors` builds the task every anchors experiment trains on",
            ),
            _I(
                "Fig. 9",
                "measured anchor cosines against the theoretical approximation of Eq. 12",
                ("anchors-embedding",),
            ),
            _I("Fig. 10", "Emb-MLP anchor cosines at γ = 0.3, 0.5", ("anchors-mlp",)),
            _I("Fig. 11", "transformer embedding space at γ = 0.3, 0.5", ("anchors-embedding",)),
            _I("Fig. 12", "the first attention module at γ = 0.3 and 0.5", ("anchors-attention",)),
            _I("Fig. 13", "singular values of every parameter matrix per initialisation scale", ("anchors-lowrank",)),
            _I(
                "Fig. 14",
                "the second attention module: the key-extracting row, its heat map, positional scores",
                ("anchors-attention",),
            ),
            _I(
                "Props. 2–3, Thm. 2",
                "the small-initialisation gradient flows of the embeddings (Eqs. 28, 29) and of W^V "
                "(Eq. 36, Thm. 2) on the Def. 2 model",
                ("anchors-flows",),
                "Thm. 2 on the trained post-LN model and App. E's value path: `anchors-attention`",
            ),
        ),
    ),
    Paper(
        "002",
        "Multi-layer Cross-attention is Provably Optimal for Multi-modal In-context Learning (Barnfield, Sen, Sur)",
        "Multi-modal cross-attention",
        (("In-context regression", "icl.md"), ("avMNIST stand-in", "icl_avdigits.md")),
        (
            _I(
                "Fig. 1",
                "re-injection of the covariates X through the CA_T (LCA_T) embeddings",
                (),
                "not reproduced: a schematic of the model, no data; `tdlab.models.linear_attention` implements LCA_T",
            ),
            _I(
                "Fig. 2",
                "ICL error of the one- and two-parameter LCA models and LSA against L_te and depth T",
                ("icl-lsa-vs-lca",),
            ),
            _I(
                "Fig. 3",
                "less-restricted LCA parametrisations: layerwise scalar projections, whitening error",
                ("icl-unrestricted",),
            ),
            _I(
                "Table 1",
                "avMNIST classification: the paper-inspired model, three ablations, a bidirectional CA transformer",
                ("icl-avdigits",),
                "stand-in data (MNIST-5k digits with espeak-ng speech) unless your avMNIST arrays are given",
            ),
            _I(
                "Fig. 4",
                "log-scale heat maps of the two-parameter loss ℓ(α, β) at depths T = 10 and 5",
                ("icl-landscape",),
            ),
            _I(
                "Fig. 5",
                "in-context performance of the LCA models, ablations without S_t, and the sample mean",
                ("icl-ablations",),
            ),
            _I(
                "Fig. 6",
                "in-context performance of the LCA models, deep LSA, the LSA model of (4.2), the sample mean",
                ("icl-ablations",),
            ),
        ),
    ),
    Paper(
        "003",
        "Attention with Markov: A Markovian Tale of Transformers (talk)",
        "Attention with Markov",
        (("Markov landscape and gradient flow", "markov_theory.md"),),
        (
            _I(
                "Part I: Single-layer transformers sometimes fail to learn even first-order Markov chains!",
                "the loss of a tied single-layer transformer stuck at H(π)",
                ("markov-tying",),
            ),
            _I(
                "Part I: Theoretical results",
                "θ_π is a bad local minimum with weight tying and a saddle without; "
                "∇L(θ_π) = 0, L(θ_π) = H(π); Intuition: the Hessian's signs",
                ("markov-tying",),
            ),
            _I(
                "Part I: How does the flow look like?",
                "the (e, w) gradient flow for p + q < 1 (global minima) and p + q > 1 (stuck at local minima)",
                ("markov-landscape",),
                "seed 000's Fig. 1",
            ),
            _I(
                "Part I: Can we escape it?",
                "initialise in the right region and converge to a global minimum",
                ("markov-init", "markov-icommon"),
                "seed 000's Fig. 4 and Sec. 4",
            ),
            _I(
                "Part II: In-context learning (ICL) emerges!",
                "Depth > 1: 2- and 3-layer transformers against the in-context k-gram estimator",
                ("markov-icl-depth",),
            ),
            _I(
                "Part II: What we know so far",
                "Memory = k, Depth?: should heads and layers scale with k?",
                ("markov-icl-heads", "markov-icl-depth"),
            ),
            _I(
                "Part II: Main result (constant depth suffices)",
                "3 layers, 1 head per layer, relative PE and layer norm represent any order-k in-context estimator",
                ("markov-icl-depth", "markov-icl-heads"),
            ),
            _I(
                "Part II: Without non-linearities, you need logarithmic depth",
                "attention-only depth against k",
                ("markov-icl-depth-linear",),
            ),
            _I(
                "Part II: Match contexts & count",
                "Intuition: att ∝ exp(κ cos(v_n, u_T)) realises a k-th order induction head",
                ("markov-icl-construction",),
            ),
        ),
    ),
    Paper(
        "004",
        "How Do Transformers Learn Topic Structure: Towards a Mechanistic Understanding (Li, Li, Risteski)",
        "Topic structure",
        (("Topic model", "topics.md"), ("Real text", "topics_real.md")),
        (
            _I(
                "Fig. 1",
                "embedding dot products trained on synthetic topic data: cross-entropy / squared loss, SGD / Adam",
                ("topics-embed",),
            ),
            _I(
                "Fig. 2",
                "trained W^V with L2 regularisation, frozen uniform attention and one-hot embedding",
                ("topics-wv",),
            ),
            _I(
                "Fig. 3",
                "word-embedding cosines of a pretrained BERT on Wikipedia encode topics",
                ("topics-real",),
                "the seed's rows need a pretrained model: `--set model.checkpoint=DIR`",
            ),
            _I(
                "Fig. 4",
                "two-stage dynamics of a single-layer transformer on LDA data",
                ("topics-two-stage",),
                "`tdlab atlas run topics-two-stage` searches optimiser × lr × init × authors_compat for where the stages appear",
            ),
            _I(
                "Table 1",
                "pretrained models on Wikipedia: same- vs different-topic embedding and attention ratios, "
                "one topic per word",
                ("topics-real",),
                "needs `--set model.checkpoint=DIR` for seed rows",
            ),
            _I(
                "Fig. 5", "two-stage dynamics of a 4-layer, 4-head transformer on Wikipedia", ("topics-real-two-stage",)
            ),
            _I(
                "Table 2",
                "BERT's topic-wise behaviour is not explained by co-occurrence alone",
                ("topics-real-cooc",),
                "needs `--set model.checkpoint=DIR` for seed rows",
            ),
            _I("Fig. 6", "without L2 regularisation W^V is sometimes diagonal (Thm. 4)", ("topics-wv",)),
            _I("Fig. 7", "squared-loss landscape under diagonal W^V, τ = 20 … 80", ("topics-landscape",)),
            _I(
                "Fig. 8",
                "squared-loss landscape for block-wise W^V with uniform blocks, τ = 20 … 80",
                ("topics-landscape",),
            ),
            _I("Fig. 9", "trained W^V without L2 regularisation, frozen attention and embedding", ("topics-wv",)),
            _I("Fig. 10", "trained W^V with frozen one-hot embedding and trained attention", ("topics-wv",)),
            _I("Table 3", "average attention weights when W^V converges to near-uniform blocks", ("topics-attn",)),
            _I("Table 4", "average attention weights when W^V converges to a diagonal pattern", ("topics-attn",)),
            _I(
                "Table 5",
                "as Table 1, each word assigned one or more topics",
                ("topics-real",),
                "needs `--set model.checkpoint=DIR` for seed rows",
            ),
            _I(
                "§5.2, App. G.1",
                "training only W^V is only slightly worse than training all weights; the block means "
                "of the trained W^V against Thm. 2's W^V* and Figs. 9–10's S ≥ 10|D|",
                ("topics-wv",),
            ),
        ),
    ),
)


def paper_of(exp: Any) -> str:
    """The paper number of an experiment: the first three characters of its ``paper`` attribute."""
    return str(exp.paper)[:3]


# Text for markdown: no raw HTML (``<v, α>`` is not a tag), no link, emphasis or code span from the text.
_md = md_text
_cell = md_cell


def latest_runs(runs: Path | None, warn: Callable[[str], None] | None = None) -> dict[str, tuple[Run, dict[str, Any]]]:
    """The newest finished run of each experiment under ``runs`` (newest ``summary.json``; sweep points,
    which run overridden settings, and staging folders are skipped), with its checked summary.
    A run directory whose summary cannot be read is skipped with a warning."""
    from tdlab.report.findings import read_summary

    found: dict[str, tuple[float, str, Run, dict[str, Any]]] = {}
    if runs is None or not Path(runs).is_dir():
        return {}
    for run in list_runs(Path(runs), warn):
        if not (run.path / "summary.json").is_file():
            continue
        try:
            if run.config.get("sweep"):
                continue
            run, s = read_summary(run.path)
            when = os.stat(run.path / "summary.json").st_mtime
        except (RunDirError, OSError) as exc:
            if warn is not None:
                warn(f"skipped {run.path}: {exc}")
            continue
        key = (when, run.path.name)
        if s["experiment"] not in found or key > found[s["experiment"]][:2]:
            found[s["experiment"]] = (*key, run, s)
    return {name: (run, s) for name, (_, _, run, s) in found.items()}


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # every figure name tdlab writes


def _copy_figures(run: Run, summary: Mapping[str, Any], dest: Path, warn: Callable[[str], None] | None) -> list[str]:
    """Copy the run's figures (``summary.json``'s ``figures``, regular image files of the run) to ``dest``;
    their names, in order."""
    names = []
    listed = summary.get("figures")
    for rel in listed if isinstance(listed, list) else []:
        p = Path(str(rel))
        if p.is_absolute() or ".." in p.parts or p.suffix.lower() not in FIGURE_SUFFIXES:
            if warn is not None:
                warn(f"{run.path}: figure {rel!r} skipped (not an image inside the run)")
            continue
        if not _PLAIN_NAME.fullmatch(p.name):  # '#', ')' or a space in a link target breaks the strict build
            if warn is not None:
                warn(f"{run.path}: figure {rel!r} skipped (a name of letters, digits, '_', '.', '-' only)")
            continue
        try:
            copy_inside(run.path, p, dest / p.name)
        except (RunDirError, OSError) as exc:
            if warn is not None:
                warn(f"{run.path}: figure {rel!r} not copied: {exc}")
            continue
        names.append(p.name)
    return names


def _run_line(run: Run, s: Mapping[str, Any]) -> str:
    from tdlab.report.findings import decided_by

    wall = s.get("wall_time_s")
    wall_s = f", {wall:.0f} s" if isinstance(wall, (int, float)) and not isinstance(wall, bool) else ""
    env = s.get("env")
    if not isinstance(env, dict):
        env = {}
    how = decided_by(s)
    decided = f"; decided by {_md(how)}" if how != s.get("profile", "?") else ""
    return (
        f"**Latest run:** `{md_code(run.path.name)}` — {_md(s.get('profile', '?'))} profile, {_md(s.get('members', '?'))} "
        f"members, seed {_md(s.get('seed', '?'))}, {_md(env.get('device', '?'))}{wall_s}, "
        f"status {_md(s.get('status', '?'))}{decided}."
    )


def _counts(groups: Sequence[Mapping[str, Any]]) -> str:
    """``held/total, N fails, N not resolved, N not evaluable`` (the findings table's words)."""
    n = {v: sum(g.get("verdict") == v for g in groups) for v in ("holds", "fails", "not resolved", "not evaluable")}
    return f"{n['holds']}/{len(groups)}" + "".join(f", {k} {v}" for v, k in n.items() if v != "holds" and k)


def _atlas_lines(exp: Any, atlas: AbstractSet[str]) -> list[str]:
    """The experiment's atlas axes (quick and paper ranges) and a link to its atlas page when the
    docs build found one (``atlas``: experiments with a page in the site's ``atlas/``)."""
    decl = getattr(exp, "atlas_axes", None)
    if decl is None:
        return []
    name = exp.name
    axes = "; ".join(
        f"`{a.field}` (quick {', '.join(map(str, a.range('quick')))}; paper {', '.join(map(str, a.values))})"
        for a in decl.axes
    )
    lines = ["### Atlas", "", f"Axes: {axes}.", ""]  # the declaration's own fields and values, as code spans
    if name in atlas:
        lines.append(
            f"Where each claim holds over these axes: [the atlas page of `{name}`](atlas/experiments/{name}.html)."
        )
    else:
        lines.append(
            f"No atlas of `{name}` in these runs: `tdlab atlas run {name} --runs runs`, then "
            f"`tdlab docs build --runs runs` links its maps here."
        )
    return [*lines, ""]


def _experiment_section(
    exp: Any, found: tuple[Run, dict[str, Any]] | None, figures: Sequence[str], atlas: AbstractSet[str] = frozenset()
) -> list[str]:
    from tdlab.report.findings import group_line

    name = exp.name
    lines = [
        f"## `{name}` {{#{name}}}",
        "",
        f"**Reproduces:** {exp.figure}",
        "",
        _md(exp.description),
        "",
        "```bash",
        f"tdlab run {name}                  # quick profile: minutes on 2 CPU cores",
    ]
    if "paper" in getattr(exp, "profiles", {}):
        lines.append(f"tdlab run {name} --profile paper  # the seed's own settings")
    lines += ["```", ""]
    groups: dict[str, Mapping[str, Any]] = {}
    if found is None:
        lines += [
            '!!! note "No run yet"',
            f"    No run of `{name}` was found: run `tdlab run {name}`, then "
            f"`tdlab docs build --runs runs` to show its verdicts here.",
            "",
        ]
    else:
        run, s = found
        for key in ("claims", "sanity"):
            for g in s.get(key, []):
                groups[g["id"]] = g
        lines += [_run_line(run, s), ""]
        arms = s.get("arms")
        if not isinstance(arms, dict):
            arms = {}
        untrained = [(a, h) for a, h in arms.items() if isinstance(h, dict) and not h.get("trained", True)]
        for arm, h in untrained:
            reasons = h.get("reasons")
            if not isinstance(reasons, list):
                reasons = []
            lines.append(
                f"- arm `{md_code(arm)}` **{_md(h.get('status', 'not trained'))}**: {_md('; '.join(map(str, reasons)))}"
            )
        if untrained:
            lines.append("")
    for kind, title in (("paper", "Paper claims"), ("sanity", "Sanity checks")):
        specs = [c for c in exp.claims if c.kind == kind]
        if not specs:
            continue
        lines += [f"### {title}", ""]
        for c in specs:
            if found is None:
                lines.append(f"- **no run yet** `{c.id}` — {_md(c.statement)}. Run `tdlab run {name}`.")
            elif c.id in groups:
                lines.append(f"- {group_line(groups[c.id])}")
            else:
                lines.append(
                    f"- **not in the run** `{c.id}` — {_md(c.statement)}. Declared after the run was judged: "
                    f"`tdlab report RUN_DIR` re-judges it."
                )
        lines.append("")
    lines += _atlas_lines(exp, atlas)
    if figures:
        lines += ["### Figures of the run", ""]
        lines += [f"![{name}: {f}](figures/{name}/{f})" for f in figures]
        lines.append("")
    return lines


def _experiment_link(name: str, here: str, where: Mapping[str, str]) -> str:
    number = where.get(name)
    if number is None:
        return f"`{name}` (not in the registry)"
    page = "" if number == here else f"seed{number}.md"
    return f"[`{name}`]({page}#{name})"


def paper_page(
    paper: Paper,
    experiments: Sequence[Any],
    found: Mapping[str, tuple[Run, dict[str, Any]]],
    figures: Mapping[str, Sequence[str]],
    where: Mapping[str, str],
    atlas: AbstractSet[str] = frozenset(),
    published: Published | None = None,
) -> str:
    """The markdown of one seed's page: its figure and table inventory, a verdict overview, the verdicts at
    the seed's own settings from the published records (``published``), then one section per experiment
    (``where``: every experiment's seed, for links across seed pages; ``atlas``: the experiments whose atlas
    page the build copied into the site)."""
    lines = [
        f"# Seed {paper.number} — {_md(paper.title)}",
        "",
        "*Generated by `tdlab docs build` from the experiment registry and the newest run of each "
        "experiment; do not edit.*",
        "",
    ]
    if paper.notes:
        lines += ["Notes on this seed: " + ", ".join(f"[{t}](../{p})" for t, p in paper.notes) + ".", ""]
    lines += [
        "## Figures and tables of the seed {#figures-and-tables}",
        "",
        "| figure / table | what it shows | reproduced by |",
        "|---|---|---|",
    ]
    for item in paper.items:
        if item.experiments:
            by = ", ".join(_experiment_link(n, paper.number, where) for n in item.experiments)
            if item.note:
                by += f" — {item.note.replace('|', chr(92) + '|')}"
        else:
            by = item.note.replace("|", "\\|") or "not reproduced"
        lines.append(f"| {_cell(item.label)} | {_cell(item.shows)} | {by} |")
    lines += [
        "",
        "## Verdicts at a glance {#verdicts}",
        "",
        "| experiment | reproduces | latest run | paper claims held | sanity checks held |",
        "|---|---|---|---|---|",
    ]
    for exp in experiments:
        f = found.get(exp.name)
        if f is None:
            run_cell, held, sanity = f"no run yet: `tdlab run {exp.name}`", "—", "—"
        else:
            run, s = f
            run_cell = f"`{md_code(run.path.name)}` ({md_cell(s.get('profile', '?'))})"
            held, sanity = _counts(s.get("claims", [])), _counts(s.get("sanity", []))
        lines.append(f"| [`{exp.name}`](#{exp.name}) | {_cell(exp.figure)} | {run_cell} | {held} | {sanity} |")
    lines.append("")
    lines += _paper_settings_section(experiments, published)
    for exp in experiments:
        lines += _experiment_section(exp, found.get(exp.name), figures.get(exp.name, ()), atlas)
    return "\n".join(lines).rstrip() + "\n"


def _paper_settings_section(experiments: Sequence[Any], published: Published | None) -> list[str]:
    """Every paper group of the seed's experiments at the seed's own settings (the ``paper`` profile's
    committed record) beside quick's, and how to reproduce it (:mod:`tdlab.pages.records`)."""
    lines = [
        "## At the seed's settings {#seed-settings}",
        "",
        "From the records committed under `results/` (`results/paper`: the paper profile, at the seed's own settings "
        "unless its record names the settings that differ; `results/quick`: the quick profile), never from a run on "
        "this machine. Each is re-judged by the current claims layer in the test suite. Under each table, every "
        "paper claim as its paper states it (`tdlab explain NAME`).",
        "",
    ]
    if published is None or not any(e.name in published.paper or e.name in published.quick for e in experiments):
        return [*lines, "No record yet: `tdlab batch --profile paper` writes them.", ""]
    for exp in experiments:
        lines += [
            f"### `{exp.name}` at the seed's settings {{#{exp.name}-seed-settings}}",
            "",
            group_table(published, exp),
            "",
        ]
    return lines


def papers_index(
    papers: Sequence[Paper],
    by_paper: Mapping[str, Sequence[Any]],
    found: Mapping[str, tuple[Run, dict[str, Any]]],
    runs: Path | None,
) -> str:
    """The overview page of the seeds: one row per seed."""
    where = (
        f"the newest run of each experiment under `{runs}`"
        if found
        else "no run directories (every page says how to get a run)"
    )
    lines = [
        "# Seeds",
        "",
        "tdlab reproduces five seed papers. Each page lists every figure and table of its seed "
        "with the experiment that reproduces it (or why none does), the command that runs it, and every "
        f"declared claim with its latest computed verdict. Generated by `tdlab docs build` from {where}.",
        "",
        "| seed | paper | experiments | figures and tables reproduced | experiments run | paper claims held |",
        "|---|---|---|---|---|---|",
    ]
    for paper in papers:
        exps = by_paper.get(paper.number, [])
        done = [found[e.name][1] for e in exps if e.name in found]
        groups = [g for s in done for g in s.get("claims", [])]
        reproduced = sum(bool(i.experiments) for i in paper.items)
        lines.append(
            f"| [{paper.number}](seed{paper.number}.md) | {_cell(paper.title)} | {len(exps)} | "
            f"{reproduced}/{len(paper.items)} | {len(done)}/{len(exps)} | "
            f"{_counts(groups) if groups else '—'} |"
        )
    return "\n".join(lines) + "\n"


def paper_pages_present(docs: Path) -> bool:
    """Whether ``docs/seeds/`` holds a generated page for every seed."""
    folder = Path(docs) / GENERATED
    return (
        (folder / MARKER).is_file()
        and all((folder / f"seed{s.number}.md").is_file() for s in PAPERS)
        and (folder / "index.md").is_file()
    )


class _TagsAsNone(yaml.SafeLoader):
    """A safe YAML loader that reads unknown tags (``!!python/name:...``, ``!ENV``) as null."""


_TagsAsNone.add_multi_constructor("", lambda loader, suffix, node: None)


def write_paper_pages(docs: Path, runs: Path | None, warn: Callable[[str], None] | None = None) -> list[Path]:
    """Write ``docs/seeds/`` (the seed pages, their index and the runs' figures) from the registry and
    the newest run of each experiment under ``runs`` (``None`` or a missing folder: no runs). Built
    aside and swapped in; a ``seeds`` folder that tdlab did not write is refused, not replaced.

    Raises:
        ConfigError: an experiment whose seed has no entry in :data:`PAPERS`, or a ``seeds`` folder that is
            not tdlab's.
    """
    return _write(docs, runs, warn)[0]


def _write(docs: Path, runs: Path | None, warn: Callable[[str], None] | None) -> tuple[list[Path], int]:
    from tdlab.experiments.base import registry

    published = load_published(Path(docs).resolve().parent / "results")  # the records beside docs/

    docs = Path(docs)
    target = docs / GENERATED
    if target.exists() and not (target / MARKER).is_file():
        raise ConfigError(
            f"{target}: holds files tdlab docs did not write (no {MARKER}); move them, the folder is generated"
        )
    numbers = {s.number for s in PAPERS}
    exps = list(registry().values())
    by_paper: dict[str, list[Any]] = {}
    for e in exps:
        if paper_of(e) not in numbers:
            raise ConfigError(f"experiment {e.name}: paper {e.paper!r} names no seed of tdlab.pages.docs_site.PAPERS")
        by_paper.setdefault(paper_of(e), []).append(e)
    for paper in PAPERS:  # in the order of the seed's figures, then the registry's
        first: dict[str, int] = {}
        for i, item in enumerate(paper.items):
            for n in item.experiments:
                first.setdefault(n, i)
        by_paper[paper.number] = sorted(
            by_paper.get(paper.number, []), key=lambda e: first.get(e.name, len(paper.items))
        )
    where = {e.name: paper_of(e) for e in exps}
    found = {k: v for k, v in latest_runs(runs, warn).items() if k in where}

    staging = docs / f".{GENERATED}-staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        figures = {name: _copy_figures(run, s, staging / "figures" / name, warn) for name, (run, s) in found.items()}
        atlas = _atlas_site(runs, staging / "atlas", warn)
        written = []
        for paper in PAPERS:
            page = staging / f"seed{paper.number}.md"
            page.write_text(
                paper_page(paper, by_paper.get(paper.number, []), found, figures, where, atlas, published),
                encoding="utf-8",
            )
            written.append(target / page.name)
        (staging / "index.md").write_text(papers_index(PAPERS, by_paper, found, runs), encoding="utf-8")
        (staging / MARKER).write_text("generated by `tdlab docs build`; replaced on every build\n", encoding="utf-8")
        old = docs / f".{GENERATED}-old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [target / "index.md", *written], len(found)


def _atlas_site(runs: Path | None, out: Path, warn: Callable[[str], None] | None) -> set[str]:
    """The claims atlas of ``runs``' index built into ``out`` (inside the docs, so the seed pages link to
    it and the site carries it); the experiments that have a page there. No index: no atlas."""
    if runs is None or not (Path(runs) / "index.sqlite").is_file():
        return set()
    from tdlab.atlas.site import build_site as build_atlas
    from tdlab.index import CorruptIndexError

    try:
        build_atlas(Path(runs), out, warn)
    except (ConfigError, RunDirError, CorruptIndexError) as exc:
        if warn:
            warn(f"the atlas was not built ({exc}); the seed pages say how to get one")
        return set()
    return {p.stem for p in (out / "experiments").glob("*.html")}


@dataclass
class BuildResult:
    """What ``tdlab docs build`` did: the pages written, the site folder, the seconds each step took."""

    pages: list[Path]
    site: Path
    generate_s: float
    build_s: float
    runs_found: int


def find_config(config: Path | None = None) -> Path:
    """``mkdocs.yml``: the one given, else the current folder's, else the one of tdlab's own checkout
    (an editable install). One line when there is none."""
    if config is not None:
        kind = path_kind(config)
        if kind != "a regular file":
            raise ConfigError(f"--config {echo(str(config))}: {kind}; give the site's mkdocs.yml")
        return Path(config)
    for folder in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (folder / "mkdocs.yml").is_file():
            return folder / "mkdocs.yml"
    raise ConfigError("no mkdocs.yml here or in tdlab's checkout; run from the repository root or give --config")


def _read_config(cfg_path: Path) -> dict[str, Any]:
    """The keys of ``mkdocs.yml`` (MkDocs configs may carry python tags: read as null)."""
    try:
        raw = yaml.load(Path(cfg_path).read_text(encoding="utf-8"), Loader=_TagsAsNone)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{cfg_path}: cannot read it ({type(exc).__name__})") from None
    return raw if isinstance(raw, dict) else {}


def docs_folder(cfg_path: Path) -> Path:
    """The docs folder ``mkdocs.yml`` names (``docs_dir``, relative to the file)."""
    return Path(cfg_path).parent / str(_read_config(cfg_path).get("docs_dir", "docs"))


def _check_site(site: Path, docs: Path) -> Path:
    """``site`` (symlinks resolved) as a folder a build may replace: a folder or a new name in a folder that
    can be written, not the docs folder or around it, not in a run, and new, empty or an earlier site (a
    build replaces what it holds). Nothing is made: the site is built aside (:func:`build_site`)."""
    site = Path(site).expanduser()
    kind = path_kind(site)
    if kind not in ("no such file", "a folder"):
        raise ConfigError(f"--site {echo(str(site))}: {kind}; give a folder")
    check_not_in_run(site, "--site")
    try:
        s, d = site.resolve(), docs.resolve()
    except (OSError, RuntimeError):
        raise ConfigError(f"--site {echo(str(site))}: cannot be resolved (a symlink loop on the way?)") from None
    if s == d or s in d.parents or d in s.parents:
        raise ConfigError(f"--site {echo(str(site))}: overlaps the docs folder {docs}; give another folder")
    if (
        kind == "a folder"
        and any(site.iterdir())
        and not ((site / "sitemap.xml").is_file() or (site / "search").is_dir())
    ):
        raise ConfigError(
            f"--site {echo(str(site))}: a folder that holds something other than a built site; "
            f"mkdocs would delete it: give a new or empty folder"
        )
    if not s.parent.is_dir():  # a missing one would be made, and left behind by a failed build
        raise ConfigError(
            f"--site {echo(str(site))}: cannot write there ({s.parent} is not an existing folder); give a "
            f"folder in an existing one"
        )
    check_output_folder(s.parent, "--site", make=False)
    return s


def check_runs(runs: Path | None, warn: Callable[[str], None] | None = None) -> Path | None:
    """``--runs`` as a folder of run directories; a missing one is no runs (a clean clone: the pages
    say how to get one), with a warning; anything else that is not a folder is refused, one line."""
    if runs is None:
        return None
    kind = path_kind(runs)
    if kind == "no such file":
        if warn is not None:
            warn(f"--runs {runs}: no such folder; the seed pages say how to get a run")
        return None
    if kind != "a folder":
        raise ConfigError(f"--runs {echo(str(runs))}: {kind}; give the folder that holds run directories")
    return Path(runs)


def require_mkdocs() -> None:
    """One line (:class:`ConfigError`) when MkDocs, its Material theme or mkdocstrings is missing."""
    missing = [m for m in ("mkdocs", "material", "mkdocstrings") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f'{", ".join(missing)} not installed: pip install -e ".[docs]"')


def build_site(
    runs: Path | None, site: Path | None = None, config: Path | None = None, warn: Callable[[str], None] | None = None
) -> BuildResult:
    """Write the seed pages from ``runs``, then ``mkdocs build --strict`` into ``site`` (default: the
    config's ``site_dir``). Any MkDocs warning (a broken link, a missing page, a docstring griffe cannot
    read) fails the build: :class:`ConfigError` with MkDocs' own lines. The site is built in a folder
    beside ``site`` and swapped in only when the build succeeds (:func:`tdlab.safeio.built_aside`): a
    failed build leaves the earlier site as it was, and no new folder. Bad input is refused before a missing
    MkDocs is: the folders are checked first."""
    cfg_path = find_config(config)
    root = cfg_path.parent
    docs = docs_folder(cfg_path)
    given, runs = runs, check_runs(runs)
    site = _check_site(site if site is not None else root / str(_read_config(cfg_path).get("site_dir", "site")), docs)
    require_mkdocs()
    if given is not None and runs is None:
        check_runs(given, warn)  # the warning, once every input is known good
    t0 = time.perf_counter()
    pages, n_runs = _write(docs, runs, warn)
    t1 = time.perf_counter()
    with built_aside(site) as staging:
        _mkdocs_build(cfg_path, staging)
    return BuildResult(pages, site, t1 - t0, time.perf_counter() - t1, n_runs)


def _mkdocs_build(cfg_path: Path, site: Path) -> None:
    """``mkdocs build --strict`` of ``cfg_path`` into ``site``; a failure is :class:`ConfigError` with MkDocs'
    own warning lines (strict: any warning fails the build)."""
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(cfg_path),
        "--site-dir",
        str(site),
    ]
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(cmd, cwd=cfg_path.parent, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        problems = [" ".join(ln.split()) for ln in proc.stderr.splitlines() if ln.startswith(("WARNING", "ERROR"))]
        shown = "; ".join(problems[:5]) or (proc.stderr.strip().splitlines() or ["no output"])[-1]
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ConfigError(f"mkdocs build --strict failed: {shown}{more}")
