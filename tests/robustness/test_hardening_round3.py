"""The third hardening round (issue 40): one test per mishandled input, each failing on the code before it.

* item 2: a run folder (or a file in one) that is a symlink is skipped with one warning by ``runs --reindex``,
  ``docs build`` and ``atlas build``; nothing outside the runs folder is read or copied;
* item 3: a checkpoint whose ``model.safetensors.index.json`` maps weights to a pickle is refused, and no
  pickle is ever loaded (tdlab reads the checked safetensors itself);
* item 4: a failed ``docs build`` leaves the earlier site as it was and no new folder;
* item 5: a checkpoint config too big for memory is refused in seconds, naming the field;
* item 6: damaged run data (a row id that is a number, an interval of one bound) skips the run with a
  warning; a TensorBoard folder holding a file named ``member-0`` is refused before training;
* item 7: ``runs --reindex`` skips folders whose name is not a run id;
* item 8: ``--budget``/``--looks`` without ``--decide``, ``--set members`` with ``--seeds``, ``--tensorboard ""``
  are refused; an unknown ``model_type`` gets tdlab's list; transformers' load messages are silenced;
  markdown in a claim's text does not break the strict docs build.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the inputs live beside this file (tests are not a package)
import hardening_inputs as hi

TINY = ["run", "markov-init", *hi.TINY]  # a run of a few steps

# ------------------------------------------------------------------------------------------ checkpoints


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT checkpoint (safetensors weights, WordPiece tokenizer) and a corpus of its words."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("round3-ck")
    hi._bert(root / "bert")
    words = ["apple", "banana", "boat", "ship", "sail", "bananas"]
    (root / "corpus.txt").write_text("\n".join(" ".join(words[(i + j) % 6] for j in range(30)) for i in range(20)))
    return root / "bert"


def _topics(checkpoint: Path, w: Path) -> list[str]:
    """``tdlab run topics-real`` measuring the checkpoint ``checkpoint`` (nothing trained)."""
    ctx = hi.Ctx(w, w, checkpoint, checkpoint.parent / "corpus.txt")
    return [str(a) for a in hi.topics(ctx, w, f"model.checkpoint={checkpoint}")]


def _copy(checkpoint: Path, w: Path, **config: object) -> Path:
    """A copy of the checkpoint with ``config.json``'s fields ``config`` changed."""
    ck = w / "ck"
    shutil.copytree(checkpoint, ck)
    shutil.copy(checkpoint.parent / "corpus.txt", w)
    doc = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**doc, **config}))
    return ck


def test_item3_a_weight_map_naming_a_pickle_is_refused_and_never_unpickled(fz, checkpoint, tmp_path, monkeypatch):
    """The check passed (a model.safetensors was there) and transformers followed the index to torch.load."""
    import torch

    ck = _copy(checkpoint, tmp_path)
    torch.save({"embeddings.word_embeddings.weight": torch.zeros(12, 16)}, ck / "pytorch_model.bin")
    weight_map = {"embeddings.word_embeddings.weight": "pytorch_model.bin"}
    (ck / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a pickle was loaded"))
    before = fz.digest(ck)
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["weight_map"], before, ck, key="index-to-pickle")
    assert "pytorch_model.bin" in r.stderr and hi.no_run_written(tmp_path / "out")(None) is None
    for escape in ("../bert/model.safetensors", "/etc/passwd", "sub/model.safetensors"):
        (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": escape}}))
        r = fz.invoke(_topics(ck, tmp_path))
        fz.refused("round 3: model.checkpoint", r, ["weight_map"], fz.digest(ck), ck, key=f"index-to-{escape}")


def test_item3_the_weights_loaded_are_the_checked_files_and_no_loader_gets_the_folder(checkpoint, monkeypatch):
    """tdlab reads model.safetensors itself: the model's tensors equal the file's, and no model class's
    from_pretrained is given a path to look for weights in."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from tdlab.models.hf_encoder import HFEncoder

    real = transformers.PreTrainedModel.from_pretrained.__func__
    paths = []

    def spy(cls, path, *args, **kwargs):
        paths.append(path)
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(spy))
    enc = HFEncoder(checkpoint, ["apple", "boat"])
    assert paths == [None]
    saved = load_file(str(checkpoint / "model.safetensors"))
    assert saved and all(torch.equal(t, enc.model.state_dict()[k]) for k, t in saved.items())


def test_item5_a_config_too_big_for_memory_is_refused_in_seconds(fz, checkpoint, tmp_path, monkeypatch):
    """num_hidden_layers: 1000000 built for as long as it was allowed, memory growing, no message."""
    import transformers

    def built(*a, **k):
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.BertModel, "__init__", built)  # a build would take hours
    ck = _copy(checkpoint, tmp_path, num_hidden_layers=1_000_000)
    t0 = time.monotonic()
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["num_hidden_layers"], fz.digest(ck), ck, key="layers-1e6")
    assert time.monotonic() - t0 < 30 and "model.checkpoint" in r.stderr


def test_item8_an_unknown_model_type_gets_tdlabs_list(fz, checkpoint, tmp_path):
    """transformers' ValueError (truncated) came first instead of tdlab's supported architectures."""
    ck = _copy(checkpoint, tmp_path, model_type="not-a-model")
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["bert (BERT), roberta (RoBERTa)"], fz.digest(ck), ck, key="type")


def test_item8_transformers_load_messages_are_silenced(checkpoint, tmp_path, capfd):
    """A task model's checkpoint (a BertForMaskedLM's keys) made transformers print its load report and a
    progress bar before tdlab's one line; its verbosity is restored after the load."""
    import torch
    import transformers

    from tdlab.models.hf_encoder import HFEncoder

    ck = _copy(checkpoint, tmp_path)
    config = transformers.BertConfig.from_pretrained(str(ck))
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(str(ck))
    capfd.readouterr()
    before = transformers.logging.get_verbosity()
    enc = HFEncoder(ck, ["apple", "boat"])
    out, err = capfd.readouterr()
    assert out + err == "" and enc.describe()["architecture"] == "BERT"
    assert transformers.logging.get_verbosity() == before


# ------------------------------------------------------------------------------ symlinks and run ids


def _runs_with_links(tiny_run: Path, root: Path) -> tuple[Path, Path]:
    """``(runs folder, a run outside it)``: the runs folder holds the tiny run, ``linked`` (a symlink to the
    outside run, whose report and figure are marked) and ``etc`` (a symlink to /etc)."""
    runs, outside = root / "runs", root / "elsewhere"
    runs.mkdir()
    outside.mkdir()
    shutil.copytree(tiny_run, runs / "tiny")
    other = shutil.copytree(tiny_run, outside / "other")
    (other / "report.html").write_text("OUTSIDE-REPORT")
    for fig in (other / "figures").iterdir():
        fig.write_bytes(b"OUTSIDE-FIGURE")
    (runs / "linked").symlink_to(other, target_is_directory=True)
    (runs / "etc").symlink_to("/etc", target_is_directory=True)
    return runs, outside


def _site_text(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_item2_reindex_skips_a_run_folder_that_is_a_symlink(fz, tiny_run, tmp_path):
    """A symlink to another run (or to /etc) was indexed as a run of this folder."""
    from tdlab.index import RunIndex

    runs, _ = _runs_with_links(tiny_run, tmp_path)
    r = fz.invoke(["runs", "--reindex", "--out", str(runs)])
    assert r.exit_code == 0, r.stderr
    assert [row["run_id"] for row in RunIndex(runs).query()] == ["tiny"]
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 2 and "linked" in warned[1] and "etc" in warned[0] and "symlink" in warned[1]


def test_item2_docs_pages_never_read_a_run_through_a_symlink(tiny_run, tmp_path):
    """The seed pages published the linked run (its verdicts and figures) as a run of the runs folder."""
    from tdlab.pages.docs_site import write_paper_pages

    runs, _ = _runs_with_links(tiny_run, tmp_path)
    shutil.rmtree(runs / "tiny")  # the linked run is then the only markov-init run
    warned: list[str] = []
    write_paper_pages(tmp_path / "docs", runs, warned.append)
    seeds = tmp_path / "docs" / "seeds"
    assert "OUTSIDE-FIGURE" not in _site_text(seeds) and not list((seeds / "figures").glob("markov-init/*"))
    assert [w for w in warned if "linked" in w and "symlink" in w]


def test_item2_atlas_copies_nothing_through_a_symlinked_run(fz, tiny_run, tmp_path):
    """The atlas copied the linked run's report and figures (from outside the runs folder) into the site."""
    from tdlab.index import RunIndex
    from tdlab.runs import Run

    runs, _ = _runs_with_links(tiny_run, tmp_path)
    index = RunIndex(runs)
    for name in ("tiny", "linked"):  # an index written before symlinks were skipped
        index.add_run(Run(runs / name))
    before = fz.digest(runs)
    r = fz.invoke(["atlas", "build", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert r.exit_code == 0, r.stderr
    text = _site_text(tmp_path / "site")
    assert "OUTSIDE-REPORT" not in text and "OUTSIDE-FIGURE" not in text
    assert (tmp_path / "site" / "runs" / "linked" / "report.html").is_file()  # rendered from the index
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "linked" in warned[0] and "symlink" in warned[0]
    assert fz.digest(runs) == before


def test_item7_reindex_skips_a_folder_whose_name_is_not_a_run_id(fz, tiny_run, tmp_path):
    """The row was written, then every `tdlab runs` said 'corrupt, run --reindex', which wrote it again."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(tiny_run, runs / "tiny")
    shutil.copytree(tiny_run, runs / "my run (copy)")
    r = fz.invoke(["runs", "--reindex", "--out", str(runs)])
    assert r.exit_code == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "my run (copy)" in warned[0] and "not a run id" in warned[0]
    again = fz.invoke(["runs", "--out", str(runs)])
    assert again.exit_code == 0 and again.stderr == "", again.stderr
    assert "1 run(s)" in again.stdout


# ------------------------------------------------------------------------------------------ docs build


def _docs_project(tmp_path: Path) -> Path:
    """A small copy of the documentation project (the test suite's fast strict config); its mkdocs.yml."""
    pytest.importorskip("material", reason='MkDocs Material not installed: pip install -e ".[docs]"')
    sys.path.insert(0, str(Path(__file__).parents[1] / "pages"))
    from test_docs_site import _site_copy

    root = _site_copy(tmp_path, api=False)
    (root / "runs").mkdir()  # no runs (a missing --runs would add a warning line)
    return root / "mkdocs.yml"


def _docs_build(fz, cfg: Path, site: Path, runs: Path | None = None):
    return fz.invoke(
        ["docs", "build", "--runs", str(runs or cfg.parent / "runs"), "--site", str(site), "--config", str(cfg)]
    )


def test_item4_a_failed_docs_build_keeps_the_earlier_site_and_leaves_no_new_folder(fz, tmp_path):
    """The failed build replaced the earlier site in place; on a new --site it left a full site behind."""
    cfg = _docs_project(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitemap.xml").write_text("<urlset/>")  # an earlier site
    (site / "earlier.html").write_text("EARLIER")
    notes = cfg.parent / "docs" / "notes.md"
    notes.write_text("# notes\n\nSee [the missing page](no-such-page.md).\n")
    before = fz.digest(tmp_path)
    r = _docs_build(fz, cfg, site)
    fz.refused("round 3: docs build", r, ["no-such-page.md"], fz.digest(site), site, key="broken-link-earlier-site")
    r = _docs_build(fz, cfg, tmp_path / "new-site")
    fz.refused("round 3: docs build", r, ["no-such-page.md"], fz.digest(site), site, key="broken-link-new-site")
    after = fz.digest(tmp_path)
    generated = {k for k in after.keys() - before.keys() if k.startswith("repo/docs/seeds")}
    assert after.keys() - before.keys() == generated, sorted(after.keys() - before.keys() - generated)[:5]
    notes.write_text("# notes\n")
    r = _docs_build(fz, cfg, site)
    assert r.exit_code == 0, r.stderr
    assert (site / "index.html").is_file() and not (site / "earlier.html").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo", "site"]  # nothing left beside it


def test_item8_markdown_in_a_runs_text_does_not_break_the_strict_build(fz, tmp_path):
    """Links, anchors and headings in a claim's statement and reason, a row id, and figure names with '#',
    ')' or a space made mkdocs' strict build fail on anchor and link warnings naming neither the run nor
    the field: the text is escaped, a figure whose name is not plain is skipped with a warning."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "pages"))
    from test_docs_site import _fake_run

    cfg = _docs_project(tmp_path)
    run = _fake_run(tmp_path / "runs", "r", "markov-init", "holds", 0.5, mtime=1_000_000)
    s = json.loads((run / "summary.json").read_text())
    text = "see [x](#nope), [y](seed001.md#gone) and ![i](#img)\n\n[r]: #ref\n# Heading {#h}"
    s["claims"][0].update(statement=text, reason=text)
    s["claims"][0]["rows"][0]["id"] = f"g/{text}"
    for name in ("a#b.png", "c d).png"):
        (run / "figures" / name).write_bytes(b"\x89PNG fake")
    s["figures"] = ["figures/a#b.png", "figures/c d).png", "figures/curve.png"]
    (run / "summary.json").write_text(json.dumps(s))
    r = _docs_build(fz, cfg, tmp_path / "site", tmp_path / "runs")
    assert r.exit_code == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 2 and all("figure" in w and "skipped" in w for w in warned), r.stderr
    assert (tmp_path / "site" / "seeds" / "figures" / "markov-init" / "curve.png").is_file()


# ---------------------------------------------------------------------------------- damaged run data


def _damaged(tiny_run: Path, runs: Path, name: str, damage: str) -> Path:
    """A copy of the tiny run as ``runs/name`` whose first claim row has a number for its id
    (``damage="id"``) or an interval of one bound (``damage="interval"``)."""
    run = shutil.copytree(tiny_run, runs / name)
    s = json.loads((run / "summary.json").read_text())
    row = next(r for g in s["claims"] for r in g["rows"])
    if damage == "id":
        row["id"] = 7
    else:
        row["interval"] = [0.5]
    (run / "summary.json").write_text(json.dumps(s))
    return run


@pytest.mark.parametrize("damage", ["id", "interval"])
def test_item6_findings_refuse_a_damaged_row_naming_the_run(fz, tiny_run, tmp_path, damage):
    """TypeError / IndexError tracebacks."""
    run = _damaged(tiny_run, tmp_path, "bad", damage)
    before = fz.digest(run)
    r = fz.invoke(["findings", str(run)])
    fz.refused("round 3: run data", r, [str(run)], before, run, key=f"findings-{damage}")


@pytest.mark.parametrize("damage", ["id", "interval"])
def test_item6_docs_pages_and_atlas_skip_a_damaged_run_with_a_warning(fz, tiny_run, tmp_path, damage):
    """The seed pages and the atlas (from an index holding the damaged summary) ended in a traceback."""
    from tdlab.pages.docs_site import write_paper_pages

    runs = tmp_path / "runs"
    runs.mkdir()
    run = _damaged(tiny_run, runs, "bad", damage)
    warned: list[str] = []
    write_paper_pages(tmp_path / "docs", runs, warned.append)
    assert len(warned) == 1 and str(run) in warned[0], warned
    page = (tmp_path / "docs" / "seeds" / "seed000.md").read_text()
    assert "No run of `markov-init` was found" in page
    r = fz.invoke(["runs", "--reindex", "--out", str(runs)])  # the index takes the run as it is
    assert r.exit_code == 0, r.stderr
    from tdlab.experiments.base import get

    default = get("markov-init").make_config("quick").model_dump(mode="json")
    with sqlite3.connect(runs / "index.sqlite") as con:  # the default run of its experiment: its claims drawn
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'bad'", (json.dumps(default),))
    con.close()
    before = fz.digest(runs)
    r = fz.invoke(["atlas", "build", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert r.exit_code == 0 and "Traceback" not in r.stderr, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "bad" in warned[0], r.stderr
    assert fz.digest(runs) == before


# ------------------------------------------------------------------------------------------ TensorBoard


def test_item6_a_tensorboard_folder_holding_a_file_named_member_0_is_refused_before_training(fz, tiny_run, tmp_path):
    """run --tensorboard failed after training (518 lines, the run discarded); export --to tensorboard rc 1."""
    tb = tmp_path / "tb"
    tb.mkdir()
    (tb / "member-0").write_text("not a folder")
    out = tmp_path / "out"
    with fz.no_training():
        r = fz.invoke([*TINY, "--out", str(out), "--tensorboard", str(tb)])
    fz.refused("round 3: tensorboard", r, ["--tensorboard"], fz.digest(tb), tb, key="run-member-0-file")
    assert "member-0" in r.stderr and not out.exists()
    runs = tmp_path / "runs"
    run = shutil.copytree(tiny_run, runs / "tiny")
    before = fz.digest(runs)
    r = fz.invoke(["export", str(run), "--to", "tensorboard", "--out", str(tb)])
    fz.refused("round 3: tensorboard", r, ["--out"], fz.digest(tb), tb, key="export-member-0-file")
    assert "member-0" in r.stderr and fz.digest(runs) == before


# ------------------------------------------------------------------------------------------ run options


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--budget", "abc", "--looks", "0"], ["--budget"]),  # exit 0 without --decide
        (["--looks", "3"], ["--looks"]),
        (["--set", "members=1e9", "--seeds", "1"], ["--seeds", "members"]),  # --seeds won silently
        (["--set", "seed=5", "--seed", "6"], ["--seed", "seed"]),
        (["--tensorboard", ""], ["--tensorboard"]),  # member-0/ in the current folder
    ],
    ids=["budget-looks-without-decide", "looks-without-decide", "members-and-seeds", "seed-twice", "tensorboard-empty"],
)
def test_item8_run_options_that_would_be_ignored_or_misread_are_refused(fz, tmp_path, monkeypatch, args, names):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    with fz.no_training():
        r = fz.invoke([*TINY, "--out", str(out), *args])
    fz.refused("round 3: run options", r, names, {}, tmp_path / "nothing", key=" ".join(args))
    assert list(tmp_path.iterdir()) == []  # no run folder, no member-0/ here
    assert all(n in r.stderr for n in names)
