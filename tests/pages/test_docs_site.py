"""The documentation site: per-seed pages generated from the registry and run directories, and the
strict MkDocs build (a broken link fails it).

The pages are checked against the registry (every experiment, its ``figure``, every declared claim id,
its commands), against the seed texts (every figure and table of each seed is listed, when the seed
files are at hand) and against planted run directories (the newest run's verdicts and figures appear;
without runs the page says how to get one). The builds skip, with the reason, where MkDocs is not
installed (``pip install -e ".[docs]"``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

import tdlab.cli as cli
from tdlab.config import ConfigError
from tdlab.experiments.base import registry
from tdlab.pages import docs_site
from tdlab.pages.docs_site import PAPERS, build_site, paper_of, write_paper_pages

ROOT = Path(__file__).resolve().parents[2]
SEED_TEXTS = [Path(os.environ.get("TDLAB_SEEDS", ROOT.parent / "shared" / "seeds")), ROOT / "shared" / "seeds"]
HAVE_MKDOCS = all(importlib.util.find_spec(m) is not None for m in ("mkdocs", "material", "mkdocstrings_handlers"))
needs_mkdocs = pytest.mark.skipif(
    not HAVE_MKDOCS, reason='MkDocs Material / mkdocstrings not installed: pip install -e ".[docs]"'
)


def _section(page: str, name: str) -> str:
    """The text of one experiment's section of a seed page."""
    start = page.index(f"## `{name}` {{#{name}}}")
    nxt = page.find("\n## ", start + 1)
    return page[start : nxt if nxt >= 0 else None]


@pytest.fixture(scope="module")
def pages_without_runs(tmp_path_factory) -> dict[str, str]:
    docs = tmp_path_factory.mktemp("docs")
    write_paper_pages(docs, runs=None)
    return {s.number: (docs / "seeds" / f"seed{s.number}.md").read_text(encoding="utf-8") for s in PAPERS}


def test_a_page_per_seed_lists_every_experiment_its_figure_commands_and_claims(pages_without_runs):
    exps = registry()
    assert {paper_of(e) for e in exps.values()} == {s.number for s in PAPERS}
    for name, exp in exps.items():
        page = pages_without_runs[paper_of(exp)]
        sec = _section(page, name)
        assert f"**Reproduces:** {exp.figure}" in sec, name
        assert f"tdlab run {name} " in sec
        if "paper" in exp.profiles:
            assert f"tdlab run {name} --profile paper" in sec
        for claim in exp.claims:
            assert f"`{claim.id}`" in sec, (name, claim.id)
        assert f"[`{name}`](#{name})" in page  # in the verdict overview


def test_without_runs_every_experiment_says_how_to_get_one(pages_without_runs):
    for name, exp in registry().items():
        sec = _section(pages_without_runs[paper_of(exp)], name)
        assert "No run yet" in sec and f"run `tdlab run {name}`" in sec
        assert not re.search(r"\*\*(holds|fails|not resolved|not evaluable)\*\*", sec)  # no verdict is invented


def test_inventory_covers_every_experiment_and_names_only_real_ones():
    exps = registry()
    for paper in PAPERS:
        named = {n for item in paper.items for n in item.experiments}
        assert named <= set(exps), named - set(exps)
        own = {n for n, e in exps.items() if paper_of(e) == paper.number}
        assert own <= named, f"seed {paper.number}: experiments in no figure/table row: {own - named}"
        for item in paper.items:
            assert item.experiments or item.note, f"{paper.number} {item.label}: not reproduced, and no reason given"
        assert len({i.label for i in paper.items}) == len(paper.items)


def _seed_text(number: str) -> str | None:
    for folder in SEED_TEXTS:
        hits = sorted(folder.glob(f"{number}_*.txt")) if folder.is_dir() else []
        if hits:
            return hits[0].read_text(encoding="utf-8")
    return None


@pytest.mark.parametrize("paper", PAPERS, ids=lambda s: s.number)
def test_page_lists_every_figure_and_table_of_the_seed_text(paper, pages_without_runs):
    text = _seed_text(paper.number)
    if text is None:
        pytest.skip(f"seed text {paper.number}_*.txt not found in {[str(p) for p in SEED_TEXTS]} (set TDLAB_SEEDS)")
    labels = {i.label for i in paper.items}
    page = pages_without_runs[paper.number]
    captions = {
        f"{'Fig.' if kind == 'Figure' else 'Table'} {n}"
        for kind, n in re.findall(r"^(Figure|Table) (\d+)[.:]", text, flags=re.M)
    }
    assert captions <= labels, f"seed {paper.number}: figures/tables not in PAPERS: {sorted(captions - labels)}"
    if not captions:  # a talk: its result slides, each a slide title of the text
        flat = " ".join(text.replace("*", "").split()).lower()
        for label in labels:
            title = re.sub(r"^Part I+: ", "", label)
            assert " ".join(title.split()).lower() in flat, f"seed {paper.number}: no slide titled {title!r}"
    for label in labels:
        assert f"| {label} |" in page, label


def _fake_run(
    runs: Path,
    run_id: str,
    exp_name: str,
    verdict: str,
    number: float,
    mtime: float,
    sweep: str | None = None,
    figure: bytes | None = b"\x89PNG fake",
) -> Path:
    exp = registry()[exp_name]
    d = runs / run_id
    (d / "figures").mkdir(parents=True)
    (d / "config.yaml").write_text(
        yaml.safe_dump({"experiment": exp_name, "profile": "quick", "config": {}, "sweep": sweep})
    )
    (d / "metrics.parquet").write_bytes(b"")
    groups = [
        {
            "id": c.id,
            "statement": c.statement,
            "verdict": verdict,
            "cause": "decided",
            "rows": [
                {
                    "id": f"{c.id}/rowA",
                    "verdict": verdict,
                    "test": "value",
                    "mean": number,
                    "interval": [number - 0.01, number + 0.01],
                    "expected": 0.0,
                    "tolerance": 0.01,
                    "provenance": "paper",
                }
            ],
        }
        for c in exp.claims[1:]
        if c.kind == "paper"
    ]  # the first claim: declared after this run
    figures = []
    if figure is not None:
        (d / "figures" / "curve.png").write_bytes(figure)
        figures = ["figures/curve.png"]
    summary = {
        "experiment": exp_name,
        "paper": exp.paper,
        "figure": exp.figure,
        "run_id": run_id,
        "profile": "quick",
        "status": "done",
        "seed": 0,
        "members": 3,
        "wall_time_s": 12.0,
        "env": {"device": "cpu"},
        "claims": groups,
        "sanity": [],
        "figures": figures,
    }
    (d / "summary.json").write_text(json.dumps(summary))
    os.utime(d / "summary.json", (mtime, mtime))
    return d


def test_the_newest_run_gives_the_verdicts_numbers_and_figures(tmp_path):
    runs = tmp_path / "runs"
    _fake_run(runs, "b-old", "markov-init", "holds", 0.1111, mtime=1_000_000)
    _fake_run(runs, "a-new", "markov-init", "fails", 0.4321, mtime=2_000_000)
    _fake_run(runs, "c-sweep-point", "markov-init", "not resolved", 0.9999, mtime=3_000_000, sweep="pq-grid")
    before = {p: (p.stat().st_mtime, p.read_bytes()) for p in runs.rglob("*") if p.is_file()}
    docs = tmp_path / "docs"
    write_paper_pages(docs, runs)
    assert {p: (p.stat().st_mtime, p.read_bytes()) for p in runs.rglob("*") if p.is_file()} == before  # only read
    page = (docs / "seeds" / "seed000.md").read_text(encoding="utf-8")
    sec = _section(page, "markov-init")
    exp = registry()["markov-init"]
    assert "**Latest run:** `a-new`" in sec and "No run yet" not in sec
    assert "0.4321" in sec and "0.1111" not in sec and "0.9999" not in sec  # newest, sweep points skipped
    for c in exp.claims[1:]:
        assert f"**fails** (finding) `{c.id}`" in sec
    assert f"**not in the run** `{exp.claims[0].id}`" in sec  # declared after the run: said so
    assert "![markov-init: curve.png](figures/markov-init/curve.png)" in sec
    assert (docs / "seeds" / "figures" / "markov-init" / "curve.png").read_bytes() == b"\x89PNG fake"
    assert "No run yet" in _section(page, "markov-rank")  # the others still say how to get one


def test_statement_text_cannot_become_html(tmp_path):
    runs = tmp_path / "runs"
    d = _fake_run(runs, "r", "markov-init", "holds", 0.5, mtime=1_000_000)
    s = json.loads((d / "summary.json").read_text())
    s["claims"][0]["statement"] = "At a global minimum <v, α> ≈ 0 and W^V* = D^V*"
    (d / "summary.json").write_text(json.dumps(s))
    write_paper_pages(tmp_path / "docs", runs)
    page = (tmp_path / "docs" / "seeds" / "seed000.md").read_text(encoding="utf-8")
    assert "&lt;v, α> ≈ 0 and W^V\\* = D^V\\*" in page and "<v, α>" not in page


def test_a_symlinked_figure_is_not_copied(tmp_path):
    runs = tmp_path / "runs"
    d = _fake_run(runs, "r", "markov-init", "holds", 0.5, mtime=1_000_000, figure=None)
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not for the site")
    (d / "figures" / "curve.png").symlink_to(secret)
    s = json.loads((d / "summary.json").read_text())
    s["figures"] = ["figures/curve.png", "../secret.png"]
    (d / "summary.json").write_text(json.dumps(s))
    warnings = []
    write_paper_pages(tmp_path / "docs", runs, warnings.append)
    assert not (tmp_path / "docs" / "seeds" / "figures" / "markov-init" / "curve.png").exists()
    assert len(warnings) == 2


def test_a_seeds_folder_tdlab_did_not_write_is_refused_and_kept(tmp_path):
    docs = tmp_path / "docs"
    (docs / "seeds").mkdir(parents=True)
    (docs / "seeds" / "mine.md").write_text("my notes")
    with pytest.raises(ConfigError, match="did not write"):
        write_paper_pages(docs, None)
    assert (docs / "seeds" / "mine.md").read_text() == "my notes"
    shutil.rmtree(docs / "seeds")
    write_paper_pages(docs, None)
    write_paper_pages(docs, None)  # its own folder is replaced
    assert sorted(p.name for p in (docs / "seeds").iterdir() if not p.name.startswith(".")) == ["index.md"] + [
        f"seed{s.number}.md" for s in PAPERS
    ]


def test_getting_started_carries_the_readmes_set_up_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = re.search(r"## Set-up.*?```bash\n(.*?)```", readme, re.S).group(1)
    assert setup in (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")


def test_api_reference_covers_every_package_and_module():
    directives = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        directives |= set(re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M))
    src = ROOT / "src" / "tdlab"
    packages = {f"tdlab.{p.name}" for p in src.iterdir() if (p / "__init__.py").is_file()}
    modules = {f"tdlab.{p.stem}" for p in src.glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= directives, sorted((packages | modules) - directives)
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    assert "seeds/seed000.md" in json.dumps(nav) and all(
        f"api/{p.split('.')[1]}.md" in json.dumps(nav) for p in packages
    )


def test_joined_parameter_lines_get_an_entry_per_name():
    pytest.importorskip("griffe", reason='griffe (mkdocstrings-python) not installed: pip install -e ".[docs]"')
    from tdlab.pages.docs_hook import split_joined_parameters

    doc = (
        "Sum.\n\nArgs:\n    p, q: the chain,\n        p + q != 1.\n    r: alone, x, y: kept\n"
        "Returns:\n    a, b: not parameters."
    )
    assert split_joined_parameters(doc) == (
        "Sum.\n\nArgs:\n    p: the chain,\n        p + q != 1.\n"
        "    q: the chain,\n        p + q != 1.\n    r: alone, x, y: kept\n"
        "Returns:\n    a, b: not parameters."
    )


def test_sphinx_roles_show_as_code():
    pytest.importorskip("griffe", reason='griffe (mkdocstrings-python) not installed: pip install -e ".[docs]"')
    from tdlab.pages.docs_hook import plain_roles

    assert (
        plain_roles("see :func:`judge` and :class:`~tdlab.claims.declare.ClaimSpec`, :mod:`tdlab.sweep`")
        == "see `judge` and `ClaimSpec`, `tdlab.sweep`"
    )


# --- the strict build --------------------------------------------------------------------------------


def _site_copy(tmp_path: Path, api: bool = True) -> Path:
    """mkdocs.yml and docs/ (without generated pages) in a temp folder, ``src`` linked: a checkout's
    site without its runs. ``api=False``: a small copy of the same config (theme, validation,
    extensions, strict) without the API reference, for a fast build."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("seeds", ".seeds-*"))
    (root / "src").symlink_to(ROOT / "src")
    cfg = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    if not api:
        c = yaml.safe_load(cfg)
        c["plugins"] = ["search"]
        c["nav"] = [{"Home": "index.md"}, {"Seeds": next(e for e in c["nav"] if "Seeds" in e)["Seeds"][:6]}]
        for p in list((root / "docs").rglob("*.md")):
            if p.name != "index.md" or p.parent != root / "docs":
                p.unlink()
        (root / "docs" / "index.md").write_text("# tdlab\n\nSee the [seeds](seeds/index.md).\n")
        (root / "docs" / "notes.md").write_text("# notes\n")
        c["nav"].append({"Notes": "notes.md"})
        for seed in PAPERS:  # the seed pages link to their notes; give them somewhere to land
            for _, rel in seed.notes:
                (root / "docs" / rel).write_text(f"# {rel}\n")
        c["nav"].append({"Seed notes": sorted({rel for s in PAPERS for _, rel in s.notes})})
        cfg = yaml.safe_dump(c, sort_keys=False, allow_unicode=True)
    (root / "mkdocs.yml").write_text(cfg, encoding="utf-8")
    return root


@needs_mkdocs
def test_the_site_builds_strict_without_runs(tmp_path):
    root = _site_copy(tmp_path)
    result = build_site(None, tmp_path / "site", root / "mkdocs.yml")
    assert (tmp_path / "site" / "index.html").is_file()
    for s in PAPERS:
        html = (tmp_path / "site" / "seeds" / f"seed{s.number}.html").read_text(encoding="utf-8")
        assert "No run yet" in html
    assert (tmp_path / "site" / "api" / "claims.html").is_file()
    assert result.runs_found == 0


@needs_mkdocs
def test_a_broken_link_fails_the_strict_build(tmp_path):
    root = _site_copy(tmp_path, api=False)  # builds clean: test_plain_mkdocs_build_writes_the_missing_seed_pages
    with (root / "docs" / "notes.md").open("a") as f:
        f.write("\nSee [the missing page](no-such-page.md).\n")
    with pytest.raises(ConfigError, match=re.escape("no-such-page.md")):
        build_site(None, tmp_path / "site", root / "mkdocs.yml")
    (root / "docs" / "notes.md").write_text("# notes\n\nSee [a missing anchor](seeds/seed000.md#no-such-anchor).\n")
    with pytest.raises(ConfigError, match="no-such-anchor"):
        build_site(None, tmp_path / "site", root / "mkdocs.yml")


@needs_mkdocs
def test_plain_mkdocs_build_writes_the_missing_seed_pages(tmp_path):
    import subprocess
    import sys

    root = _site_copy(tmp_path, api=False)
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert proc.returncode == 0, proc.stderr
    assert (root / "docs" / "seeds" / "seed004.md").is_file() and (
        tmp_path / "site" / "seeds" / "seed004.html"
    ).is_file()


def test_site_folder_that_is_not_a_site_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, width=400))
    keep = tmp_path / "home"
    keep.mkdir()
    (keep / "thesis.tex").write_text("precious")
    r = CliRunner().invoke(
        cli.app,
        ["docs", "build", "--runs", str(tmp_path / "none"), "--site", str(keep), "--config", str(ROOT / "mkdocs.yml")],
    )
    assert r.exit_code == 2 and "mkdocs would delete it" in r.output
    assert (keep / "thesis.tex").read_text() == "precious"
    r = CliRunner().invoke(
        cli.app, ["docs", "build", "--site", str(ROOT / "docs" / "out"), "--config", str(ROOT / "mkdocs.yml")]
    )
    assert r.exit_code == 2 and "overlaps the docs folder" in r.output
    assert not (ROOT / "docs" / "out").exists()
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("loop", tmp_path / "loop")
    for option, bad, words in (
        ("--runs", tmp_path / "afile", "a regular file"),
        ("--site", tmp_path / "fifo", "FIFO"),
        ("--site", tmp_path / "afile" / "x", "cannot write"),
        ("--config", tmp_path / "loop", "symlink"),
        ("--config", tmp_path, "a folder"),
    ):
        args = {
            "--runs": str(tmp_path / "none"),
            "--site": str(tmp_path / "site"),
            "--config": str(ROOT / "mkdocs.yml"),
        }
        args[option] = str(bad)
        r = CliRunner().invoke(cli.app, ["docs", "build", *[x for kv in args.items() for x in kv]])
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and option in lines[0] and words in lines[0], (option, r.output)
    assert docs_site.GENERATED == "seeds"


def _fake_atlas(monkeypatch, runs: Path, names=("markov-init",)) -> None:
    """An index in ``runs`` and an atlas build that writes one page per name (the real build is
    tested in tests/test_atlas.py)."""
    import tdlab.atlas.site as atlas_site

    runs.mkdir(parents=True, exist_ok=True)
    (runs / "index.sqlite").write_bytes(b"")

    def fake_build(r, out, warn=None):
        (out / "experiments").mkdir(parents=True)
        (out / "index.html").write_text("<html>atlas</html>")
        for n in names:
            (out / "experiments" / f"{n}.html").write_text(f"<html>{n}</html>")
        return out / "index.html"

    monkeypatch.setattr(atlas_site, "build_site", fake_build)


def test_each_experiment_lists_its_atlas_axes_and_links_its_atlas_page(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    _fake_atlas(monkeypatch, runs)
    docs = tmp_path / "docs"
    write_paper_pages(docs, runs)
    page = (docs / "seeds" / "seed000.md").read_text(encoding="utf-8")
    sec = _section(page, "markov-init")
    assert "### Atlas" in sec and "`task.p`" in sec
    assert "(atlas/experiments/markov-init.html)" in sec
    assert (docs / "seeds" / "atlas" / "experiments" / "markov-init.html").is_file()
    other = _section(page, "markov-rank")
    assert "No atlas of `markov-rank`" in other and "tdlab atlas run markov-rank" in other
    for exp in registry().values():  # every experiment declares axes: every section names them
        seed = (docs / "seeds" / f"seed{exp.paper[:3]}.md").read_text(encoding="utf-8")
        assert "### Atlas" in _section(seed, exp.name), exp.name


@needs_mkdocs
def test_the_atlas_link_builds_strict(tmp_path, monkeypatch):
    root = _site_copy(tmp_path, api=False)
    _fake_atlas(monkeypatch, tmp_path / "runs")
    build_site(tmp_path / "runs", tmp_path / "site", root / "mkdocs.yml")
    assert (tmp_path / "site" / "seeds" / "atlas" / "experiments" / "markov-init.html").is_file()


EVIL = (
    '<script>alert(1)</script> [x](javascript:alert(2)) ![i](javascript:alert(3)) <a href="javascript:alert(4)">a</a> `'
)


def _hostile_html(markdown_text: str) -> list[tuple[str, dict[str, str]]]:
    """The elements of ``markdown_text`` rendered as MkDocs renders it (tables, attribute lists)."""
    from html.parser import HTMLParser

    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(markdown_text, extensions=["tables", "attr_list"])
    found: list[tuple[str, dict[str, str]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, {k: v or "" for k, v in attrs}))

    Collect().feed(html)
    return found


def test_a_hostile_run_folder_puts_no_script_or_javascript_link_into_the_pages(tmp_path):
    """Every field of a run's summary that a page shows (profile, device, status, group ids, verdicts, causes,
    statements, reasons, arm names) is text: rendered, the seed page and the findings have no <script> element
    and no javascript: URL."""
    from tdlab.report.findings import findings_markdown

    runs = tmp_path / "runs"
    d = _fake_run(runs, "r", "markov-init", "fails", 0.5, mtime=1_000_000)
    s = json.loads((d / "summary.json").read_text())
    s.update(
        profile=EVIL,
        status=EVIL,
        env={"device": EVIL},
        members=EVIL,
        seed=EVIL,
        arms={EVIL: {"trained": False, "status": EVIL, "reasons": [EVIL]}},
    )
    for g in s["claims"]:
        g.update(statement=EVIL, reason=EVIL, cause=EVIL)
        for r in g["rows"]:  # a verdict tdlab never writes is refused (one line); every other field is hostile
            r.update(id=f"{g['id']}/{EVIL}", verdict="not evaluable", reason=EVIL)
    s["sanity"] = [{"id": EVIL, "verdict": "holds", "statement": EVIL, "rows": []}]
    (d / "summary.json").write_text(json.dumps(s))
    write_paper_pages(tmp_path / "docs", runs)
    page = (tmp_path / "docs" / "seeds" / "seed000.md").read_text(encoding="utf-8")
    for text in (page, findings_markdown([d])):
        elements = _hostile_html(text)
        assert elements, "the page rendered"
        assert not [t for t, _ in elements if t == "script"]
        assert not [
            (t, a)
            for t, a in elements
            for k, v in a.items()
            if k in ("href", "src") and v.strip().lower().startswith("javascript:")
        ]
        assert not [t for t, _ in elements if t == "a" and "alert" in json.dumps(_)]
