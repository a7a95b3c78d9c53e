"""anchors-text (seed 001 Figs. 1, 6; the corpus and its token statistics are tested in
``tests/tasks/test_text_mix.py``): the cosine measure on planted embeddings, the padded next-token loss against a direct computation,
every claim on planted runs in the seed's setting (holds and
fails), stand-in stories and a faster, shorter schedule making the rows ours, bad data files through
the CLI (exit 2, nothing written), and a tiny end-to-end run."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from tdlab.cli import app
from tdlab.config import ConfigError, build_config
from tdlab.experiments.paper001_reasoning_bias.text import (
    DATA_DIR,
    TINYSTORIES,
    AnchorsText,
    AnchorsTextConfig,
    MixedCorpus,
    build_corpus,
)
from tdlab.run_context import init_arm, snapshot_arm
from tdlab.runner import execute
from tdlab.runs import Run, RunWriter
from tdlab.tasks.stories import STANDIN_LABEL, standin_stories
from tdlab.train.objectives import NextToken

TINY = [
    "data.n_sequences=40",
    "model.vocab=300",
    "model.d=16",
    "train.seq_len=32",
    "train.batch=20",
    "schedule.epochs=2",
    "schedule.n_eval=20",
    "claims.min_tokens=2",
]


# ---- the cosine measure ---------------------------------------------------------------------------------


# ---- the padded objective and the loss-speed measures -------------------------------------------------


def test_padded_next_token_ignores_padding(one_thread):
    g = torch.Generator().manual_seed(0)
    E, B, L, V = 2, 3, 7, 11
    tokens = torch.randint(0, V, (E, B, L), generator=g)
    mask = torch.ones(E, B, L)
    mask[:, 1, 4:] = 0  # sequence 1 padded after 4 tokens
    tokens_padded = tokens.clone()
    tokens_padded[:, 1, 4:] = 5  # whatever the padding holds

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(V, V, generator=g))

        def forward(self, x):
            return self.table[x]

    model = Model()
    obj = NextToken()
    a = obj.loss(model, obj.prepare({"tokens": tokens, "mask": mask}, []))
    b = obj.loss(model, obj.prepare({"tokens": tokens_padded, "mask": mask}, []))
    assert torch.allclose(a, b)
    # direct: mean cross-entropy over the real targets (positions 1..L-1 with mask 1)
    nll = F.cross_entropy(
        model.table[tokens[..., :-1]].reshape(-1, V), tokens[..., 1:].reshape(-1), reduction="none"
    ).view(E, B, L - 1)
    w = mask[..., 1:]
    assert torch.allclose(a, (nll * w).sum((1, 2)) / w.sum((1, 2)))
    assert obj.scores(model, obj.prepare({"tokens": tokens, "mask": mask}, []))["loss"].shape == (E,)


# ---- planted runs: each claim holds and fails -------------------------------------------------------------

MEMBERS = 8  # an exact sign test over 8 members survives Holm over a group's two rows
# The seed's setting for Figs. 1 and 6 (A.3: lr 1e-5, 200 epochs; "early" = epoch 20), evaluated every 20 epochs.
SEED = ["train.lr=1e-5", "schedule.epochs=200", "schedule.eval_epochs=20"]


@pytest.fixture(scope="module")
def tiny_corpus():
    texts = {
        "prontoqa": ["Every wumpus is a yumpus. Max is a wumpus. True or false: Max is a yumpus. A: True"] * 10
        + ["Each zumpus is not hot. Rex is a zumpus. True or false: Rex is hot. A: False"] * 10,
        "stories": standin_stories(20, 0),
    }
    return build_corpus(texts, "local", 300, 64)


@pytest.fixture(scope="module")
def stories_file(tmp_path_factory):
    """A TinyStories-format file of 25 stories (the run reads 20)."""
    path = tmp_path_factory.mktemp("data") / "TinyStories-valid.txt"
    path.write_text(
        "\n<|endoftext|>\n".join(f"Story {i}: Tom saw a red ball and was happy." for i in range(25)), encoding="utf-8"
    )
    return path


def _planted(
    tmp_path,
    corpus,
    prontoqa_faster: bool,
    main: str | None,
    control: str | None = None,
    init: str | None = None,
    extra: tuple[str, ...] = SEED,
):
    """A run whose losses and embeddings are planted: ``main``/``control``/``init`` name the source whose
    exclusive tokens share a direction in that arm's (or the initial) embeddings (``None``: none do)."""
    exp = AnchorsText()
    cfg = exp.make_config(
        "quick",
        [
            "data.n_sequences=40",
            "model.vocab=300",
            "train.batch=20",
            "schedule.epochs=10",
            "claims.min_tokens=2",
            *extra,
        ],
        members=MEMBERS,
    )
    spe, early = cfg.steps_per_epoch, cfg.early_epoch
    ex = exp.exclusive(cfg, corpus)
    g = torch.Generator().manual_seed(1)
    epochs = np.arange(0, cfg.schedule.epochs + 1, cfg.schedule.eval_epochs)
    x = epochs / epochs[-1] * 10  # the curves' shape over ten units of training
    fast, slow = 6.0 * np.exp(-x / 2.0), 6.0 * np.exp(-x / 6.0)
    with RunWriter(tmp_path / "planted", exp.name) as w:
        w.write_config({"experiment": exp.name, "profile": "quick", "config": cfg.model_dump(mode="json")})
        corpus.save(w.path / DATA_DIR)
        for gamma in cfg.gammas:
            arm = f"gamma={gamma:g}"
            rows = []
            for m in range(MEMBERS):
                jitter = 1 + 0.01 * m
                p, s = (fast, slow) if prontoqa_faster else (slow, fast)
                rows += [(int(e * spe), m, "prontoqa_loss", float(p[k] * jitter)) for k, e in enumerate(epochs)]
                rows += [(int(e * spe), m, "stories_loss", float(s[k] * jitter)) for k, e in enumerate(epochs)]
            w.add_metrics(arm, rows)

            def wte(aligned: str | None):
                # orthonormal rows: every cosine exactly 0 (the idealised random init of a wide model)
                W = torch.linalg.qr(torch.randn(MEMBERS, 512, 300, generator=g))[0].transpose(1, 2).contiguous()
                if aligned is not None:  # one source's exclusive tokens share a direction (cos 0.5)
                    W[:, ex[aligned]] = W[:, 299:300] + W[:, ex[aligned]]
                return [{"wte": t} for t in W]

            small = gamma == cfg.claims.main_gamma
            w.save_arrays(init_arm(arm), wte(init))
            w.save_arrays(snapshot_arm(arm, early * spe), wte(main if small else control))
            w.save_arrays(arm, wte(main if small else control))
        run = w.finish()
    return exp, cfg, Run(run.path)


def _rows(a):
    return {r.id: r for grp in a.groups for r in grp.rows}


def test_planted_run_where_the_seed_holds(tmp_path, tiny_corpus, stories_file, one_thread):
    exp, cfg, run = _planted(
        tmp_path, tiny_corpus, prontoqa_faster=True, main="stories", extra=(*SEED, f"data.stories={stories_file}")
    )
    a = exp.analyse(cfg, run)
    assert cfg.early_epoch == 20
    for rid in (
        "fig1-prontoqa-loss-falls-faster/auc",
        "fig1-prontoqa-loss-falls-faster/halving-epoch",
        "fig6-prontoqa-tokens-less-similar/early",
        "fig6-gap-small-init-effect/gap",
        "fig6-no-gap-at-init/gamma=0.8",
        "fig6-no-gap-at-init/gamma=0.3",
    ):
        assert _rows(a)[rid].verdict == "holds", _rows(a)[rid].describe()
    assert all(g.verdict == "holds" for g in a.groups)
    assert {r.provenance for g in a.paper for r in g.rows} == {"paper"}
    assert a.measurements["stand_in_data"] is False and str(stories_file) in a.measurements["data_provenance"]
    assert not any(STANDIN_LABEL in r.statement for g in a.groups for r in g.rows)
    assert a.measurements["paper_reference_cosines"] == {"prontoqa": 0.123, "stories": 0.531}


def test_planted_run_where_the_seed_fails(tmp_path, tiny_corpus, stories_file, one_thread):
    exp, cfg, run = _planted(
        tmp_path,
        tiny_corpus,
        prontoqa_faster=False,
        main="prontoqa",
        control="stories",
        init="stories",
        extra=(*SEED, f"data.stories={stories_file}"),
    )
    a = exp.analyse(cfg, run)
    for rid in (
        "fig1-prontoqa-loss-falls-faster/auc",
        "fig1-prontoqa-loss-falls-faster/halving-epoch",
        "fig6-prontoqa-tokens-less-similar/early",
        "fig6-gap-small-init-effect/gap",
        "fig6-no-gap-at-init/gamma=0.8",
    ):
        assert _rows(a)[rid].verdict == "fails", _rows(a)[rid].describe()
    assert all(g.verdict == "fails" for g in a.groups)


def test_stand_in_stories_make_every_paper_row_ours(tmp_path, tiny_corpus, one_thread):
    exp, cfg, run = _planted(tmp_path, tiny_corpus, prontoqa_faster=True, main="stories")
    a = exp.analyse(cfg, run)
    for g in a.paper:  # the statements are about TinyStories: stand-in stories are outside them
        assert g.verdict == "not evaluable" and g.cause == "outside hypotheses", g.describe()
        assert all(r.provenance == "ours" and r.verdict == "holds" and STANDIN_LABEL in r.statement for r in g.rows)
        assert all(TINYSTORIES.text in r.outside for r in g.rows)
    assert a.result("fig6-no-gap-at-init").verdict == "holds"  # a sanity check: decided by every row
    assert a.notes[0].startswith(STANDIN_LABEL.upper()) and a.measurements["stand_in_data"] is True


def test_a_faster_shorter_schedule_makes_the_fig6_rows_ours(tmp_path, tiny_corpus, stories_file, one_thread):
    exp, cfg, run = _planted(
        tmp_path, tiny_corpus, prontoqa_faster=True, main="stories", extra=(f"data.stories={stories_file}",)
    )  # the quick profile's lr 1e-3 over 10 epochs
    a = exp.analyse(cfg, run)
    assert a.result("fig1-prontoqa-loss-falls-faster").verdict == "holds"  # the curves: the seed's comparison
    for gid in ("fig6-prontoqa-tokens-less-similar", "fig6-gap-small-init-effect"):
        g = a.result(gid)
        assert g.verdict == "not evaluable" and g.cause == "no paper rows"
        assert "100× the seed's" in g.rows[0].statement
    assert any("not the seed's setting" in n for n in a.notes)


def test_too_few_exclusive_tokens_leaves_fig6_without_rows(tmp_path, tiny_corpus, one_thread):
    exp, cfg, run = _planted(tmp_path, tiny_corpus, prontoqa_faster=True, main="stories")
    cfg = cfg.updated({"claims": cfg.claims.updated({"min_tokens": 10_000})})
    g = exp.analyse(cfg, run).result("fig6-prontoqa-tokens-less-similar")
    assert g.verdict == "not evaluable" and g.cause == "no rows" and "claims.min_tokens" in g.reason


def test_a_user_stories_file_is_read(tmp_path, stories_file):
    from tdlab.tasks.text_mix import source_texts

    cfg = AnchorsText().make_config("quick", ["data.n_sequences=40", "train.batch=20", f"data.stories={stories_file}"])
    assert not cfg.data.standin
    d = cfg.data
    assert source_texts(0, d.n_prontoqa, d.n_stories, d.prontoqa_task, d.prontoqa, d.stories)["stories"] == [
        f"Story {i}: Tom saw a red ball and was happy." for i in range(20)
    ]


# ---- bad input: one error, exit 2, nothing written ------------------------------------------------------


@pytest.mark.parametrize("make_file", ["missing", "malformed"])
def test_bad_stories_file_through_the_cli(tmp_path, make_file):
    path = tmp_path / "nonexistent"
    if make_file == "malformed":
        path = tmp_path / "stories.txt"
        path.write_text("just text without any end-of-story marker", encoding="utf-8")
    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", "anchors-text", "--set", f"data.stories={path}", "--out", str(out)])
    assert res.exit_code == 2, res.output
    err = res.output.strip().splitlines()
    assert len(err) == 1 and "data.stories" in err[0]
    assert not out.exists()


def test_config_errors_name_the_field(tmp_path):
    exp = AnchorsText()
    with pytest.raises(ConfigError, match=re.escape("data.prontoqa")):
        exp.make_config("quick", [f"data.prontoqa={tmp_path / 'none.json'}"])
    with pytest.raises(ConfigError, match=re.escape("model.vocab must be GPT-2's 50257")):
        exp.make_config("quick", ["data.tokenizer=gpt2"])
    with pytest.raises(ConfigError, match=re.escape("claims.main_gamma")):
        exp.make_config("quick", ["gammas=[0.5, 0.3]"])
    cfg = build_config(AnchorsTextConfig, AnchorsText.profiles["paper"])  # (no memory check: a GPU machine's)
    assert (
        cfg.data.n_sequences,
        cfg.data.tokenizer,
        cfg.model.layers,
        cfg.model.d,
        cfg.train.lr,
        cfg.schedule.epochs,
    ) == (10_000, "gpt2", 12, 768, 1e-5, 200)
    assert exp.make_config("quick").early_epoch == 1  # 10 % of 10 epochs


# ---- a tiny end-to-end run -------------------------------------------------------------------------------


def test_tiny_end_to_end_run(tmp_path, one_thread):
    exp = AnchorsText()
    cfg = exp.make_config("quick", TINY, members=2)
    run = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = run.summary
    assert s["status"] == "done"
    assert {g["id"] for g in s["claims"]} == {
        "fig1-prontoqa-loss-falls-faster",
        "fig6-prontoqa-tokens-less-similar",
        "fig6-gap-small-init-effect",
    }
    assert (
        all(r["provenance"] == "ours" for g in s["claims"] for r in g["rows"])
        and STANDIN_LABEL in s["notes"][0].lower()
    )
    assert s["figures"] == ["figures/fig1_loss_per_source.png", "figures/fig6_exclusive_token_cosines.png"]
    corpus = MixedCorpus.load(run.path / DATA_DIR)  # the tokenisation cache
    assert corpus.tokens.shape == (40, 32) and int(corpus.source.sum()) == 20
    assert (
        corpus.tokenizer.decode(corpus.tokens[0][corpus.mask[0] > 0].tolist()).endswith("<|endoftext|>")
        or corpus.truncated[0]
    )
    m = run.metrics()
    assert {"prontoqa_loss", "stories_loss"} <= set(m["name"]) and set(m["arm"]) == {"gamma=0.8", "gamma=0.3"}
