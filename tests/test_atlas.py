"""The claims atlas: axes -> sweep points, the static site built from a runs folder's index
(front page, per-claim maps, links), bad input, and rendering in headless Chromium where it exists."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from rich.console import Console
from typer.testing import CliRunner

import tdlab.cli as cli
from tdlab.atlas.axes import (
    AtlasAxes,
    AtlasAxis,
    atlas_spec,
    check_fields,
    experiments_with_axes,
    field_exists,
    linspace,
    sweep_name,
)
from tdlab.atlas.site import MARKS, build_site
from tdlab.config import ConfigError
from tdlab.experiments.base import registry
from tdlab.index import RunIndex
from tdlab.sweep import _as_sets, _validate_points, count_points, plan

STEPS = [0, 100, 200, 300, 400]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,1400",
]


# ---------------------------------------------------------------------------------------------- axes
def test_every_declaration_becomes_a_valid_sweep_of_the_declared_size():
    declaring = experiments_with_axes()
    assert {"markov-init", "markov-icl-depth", "icl-lsa-vs-lca", "markov-rank"} <= {e.name for e in declaring}
    for exp in declaring:
        check_fields(exp)  # every swept and fixed path is a field of the experiment's config class
        decl = exp.atlas_axes
        for profile in exp.profiles:
            spec = atlas_spec(exp, profile)
            n = math.prod(len(a.range(profile)) for a in decl.axes)
            assert count_points(spec) == decl.size(profile) == n
            points = plan(spec)
            assert len({p.run_id for p in points}) == n
            assert all(p.run_id.startswith(f"{sweep_name(exp.name, profile)}__p") for p in points)
            _validate_points(spec)  # the sweep's own check: every point's config is built and validated
            assert len(spec._hashes) == len(set(spec._hashes)) == n  # distinct configs: every axis changes the run
            # each point's config holds the axis values it was planned with (read back as the map does)
            for p in points[:4]:
                cfg = exp.make_config(profile, _as_sets({**spec.set, **p.overrides})).model_dump(mode="json")
                for a in decl.axes:
                    got = a.read(cfg)
                    want = p.overrides[a.field][0] if a.as_list else p.overrides[a.field]
                    assert got == want, (exp.name, a.field)


def test_markov_init_grid_covers_both_sides_of_p_plus_q_equals_one():
    decl = registry()["markov-init"].atlas_axes
    ps, qs = decl.axes[0].range("quick"), decl.axes[1].range("quick")
    assert (decl.axes[0].field, decl.axes[1].field) == ("task.p", "task.q") and len(ps) * len(qs) >= 16
    sums = [p + q for p in ps for q in qs]
    assert any(s < 1 for s in sums) and any(s > 1 for s in sums)
    assert all(abs(s - 1) > 0.05 for s in sums)  # p + q = 1: both minima coincide, nothing to decide
    assert "train.steps" in [a.field for a in decl.axes]


def test_axis_declarations_refuse_bad_input():
    with pytest.raises(ValueError, match="empty"):
        AtlasAxis("task.p", ())
    with pytest.raises(ValueError, match="repeats"):
        AtlasAxis("task.p", (0.1, 0.1))
    with pytest.raises(ValueError, match="dotted"):
        AtlasAxis("task..p", (0.1,))
    with pytest.raises(ValueError, match="swept twice"):
        AtlasAxes(axes=(AtlasAxis("a", (1,)), AtlasAxis("a", (2,))))
    with pytest.raises(ValueError, match="both swept and fixed"):
        AtlasAxes(axes=(AtlasAxis("a", (1,)),), set={"a": 2})
    exp = registry()["markov-init"]
    assert field_exists(exp.Config, "task.p") and field_exists(exp.Config, "train.steps")
    assert not field_exists(exp.Config, "task.r") and not field_exists(exp.Config, "task.p.x")
    assert linspace(0.1, 0.9, 5) == (0.1, 0.3, 0.5, 0.7, 0.9)
    a = AtlasAxis("depths", (1, 2), as_list=True)
    assert a.override(2) == [2] and a.read({"depths": [2]}) == 2 and a.read({"depths": [1, 2]}) is None


def test_experiment_names_are_checked(monkeypatch):
    with pytest.raises(ConfigError, match="unknown experiment"):
        experiments_with_axes(["no-such-experiment"])
    bare = "topics-landscape"  # every experiment declares axes: take one's away
    monkeypatch.setattr(type(registry()[bare]), "atlas_axes", None)
    with pytest.raises(ConfigError, match="declares no atlas axes"):
        experiments_with_axes([bare])
    with pytest.raises(ConfigError, match="unknown profile"):
        atlas_spec(registry()["markov-init"], "huge")


# ------------------------------------------------------------------------------------- a runs folder
def _h(x: float) -> float:
    return -x * math.log(x) - (1 - x) * math.log(1 - x)


def _truth(p: float, q: float) -> tuple[float, float]:
    pi1 = p / (p + q)
    return (1 - pi1) * _h(p) + pi1 * _h(q), _h(pi1)


def _planted_point(runs: Path, spec, point, std_at: str, run_id: str | None = None, default: bool = False) -> Path:
    """A markov-init run of ``point`` of the atlas sweep, with chosen test-loss curves, analysed by the
    real code (``rebuild``) and indexed under the sweep: the proposed init ends at the entropy rate;
    the standard init ends at ``std_at`` ("rate" or "hpi") after leaving its plateau later."""
    from tdlab.experiments.paper000_local_to_global.initialisation import MarkovInit
    from tdlab.runner import rebuild
    from tdlab.runs import RunWriter

    exp = MarkovInit()
    cfg = exp.make_config(spec.profile, [] if default else _as_sets({**spec.set, **point.overrides}))
    rate, hpi = _truth(cfg.task.p, cfg.task.q)
    end = rate if std_at == "rate" else hpi
    spread = (-0.001, 0.0, 0.001)
    curves = {
        "local-to-global": [[0.69, rate + d, rate + d, rate + d, rate + d] for d in spread],
        "standard": [[0.69, 0.69, end + d, end + d, end + d] for d in spread],
    }
    with RunWriter(runs, exp.name, run_id=run_id or point.run_id) as w:
        w.write_config(
            {
                "experiment": exp.name,
                "profile": spec.profile,
                "config": cfg.model_dump(mode="json"),
                "sweep": None if default else spec.name,
            }
        )
        for arm in exp.arms(cfg):
            rows = [
                (s, m, "test_loss", v) for m, c in enumerate(curves[arm.init]) for s, v in zip(STEPS, c, strict=True)
            ]
            rows += [
                (s, m, "train_loss", v)
                for m, c in enumerate(curves[arm.init])
                for s, v in zip(STEPS, c, strict=True)
                if s > 0
            ]
            rows += [
                (s, m, f"test_loss@{ref}", v)
                for ref, v in (("bayes", rate), ("unigram", hpi))
                for m in range(3)
                for s in STEPS
            ]
            w.add_metrics(arm.name, rows)
        run = w.finish()
    return rebuild(run.path).path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A runs folder with 6 of markov-init's 16 quick atlas points (the standard init planted at the entropy
    rate when p + q < 1 and at H(π) when p + q > 1, except at (0.8, 0.9) where it ends at the entropy
    rate: a failing cell), an older and a newer run of the same point, a point whose run folder was
    deleted after indexing, and a run of another experiment; then the site."""
    tmp = tmp_path_factory.mktemp("atlas")
    runs, out = tmp / "runs", tmp / "site"
    exp = registry()["markov-init"]
    spec = atlas_spec(exp, "quick")
    pts = {(p.overrides["task.p"], p.overrides["task.q"]): p for p in plan(spec)}
    chosen = [(0.2, 0.1), (0.2, 0.3), (0.4, 0.9), (0.8, 0.3), (0.8, 0.9), (0.6, 0.7)]
    for pq in chosen:
        std_at = "rate" if sum(pq) < 1 or pq == (0.8, 0.9) else "hpi"
        _planted_point(runs, spec, pts[pq], std_at)
    # (0.6, 0.7) again, newer, failing: the map shows the newest run of a point
    _planted_point(runs, spec, pts[(0.6, 0.7)], "rate", run_id=pts[(0.6, 0.7)].run_id + "-again")
    # a point whose folder is gone: the site still shows it, with a report rendered from the index
    gone = _planted_point(runs, spec, pts[(0.4, 0.1)], "rate")
    shutil.rmtree(gone)
    # a run at markov-init's default quick config (p, q = 0.5, 0.8): the front page's default setting
    default = _planted_point(runs, spec, None, "hpi", run_id="default-quick", default=True)
    front = build_site(runs, out)
    return {"runs": runs, "out": out, "front": front, "points": pts, "default": default}


class _Page(HTMLParser):
    """Links, and the map tables (their aria-label, rows of cells with text, class, title, href)."""

    def __init__(self):
        super().__init__()
        self.links, self.maps, self.text = [], [], []
        self._map = self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("href", "src"):
            if a.get(k):
                self.links.append(a[k])
        if tag == "table" and "map" in (a.get("class") or "").split():
            self._map = {"label": a.get("aria-label"), "rows": []}
            self.maps.append(self._map)
        elif tag == "tr" and self._map is not None:
            self._row = []
            self._map["rows"].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {
                "tag": tag,
                "text": "",
                "class": a.get("class") or "",
                "title": a.get("title"),
                "href": None,
                "style": a.get("style"),
                "score": a.get("data-score"),
            }
            self._row.append(self._cell)
        elif tag == "a" and self._cell is not None:
            self._cell["href"] = a.get("href")

    def handle_endtag(self, tag):
        if tag == "table":
            self._map = self._row = None
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell["text"] += data.strip()


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_front_page_lists_every_registered_experiment(site):
    page = _parse(site["front"])
    text = " ".join(page.text)
    reg = registry()
    for name in reg:
        assert f"experiments/{name}.html" in page.links, name
        assert (site["out"] / "experiments" / f"{name}.html").is_file()
    # markov-init: swept claims with their held counts; no default-config run in this folder
    assert "7/16 points" in text  # 7 of the 16 grid points have a run
    assert "not run" in text and "not swept yet" in text  # every experiment declares axes; most are not swept here


def test_markov_init_page_maps_each_claim_with_the_runs_verdicts(site):
    page = _parse(site["out"] / "experiments" / "markov-init.html")
    idx = RunIndex(site["runs"]).query("experiment = 'markov-init'")
    newest = {}
    for r in idx:  # oldest first: the newest run of a point wins
        newest[(r["config"]["task"]["p"], r["config"]["task"]["q"])] = r
    claims = [g["id"] for g in newest[(0.2, 0.1)]["summary"]["claims"]]
    assert len(claims) == 3
    assert sorted(m["label"].split()[0] for m in page.maps) == sorted(claims)  # one map per claim (one steps facet)
    ps, qs = (0.2, 0.4, 0.6, 0.8), (0.1, 0.3, 0.7, 0.9)
    marks_seen = set()
    for m in page.maps:
        cid = m["label"].split()[0]
        body, header = m["rows"][:-1], m["rows"][-1]
        assert [c["text"] for c in header[1:]] == [f"{p:g}" for p in ps]  # columns: p
        assert [r[0]["text"] for r in body] == [f"{q:g}" for q in reversed(qs)]  # rows: q, largest on top
        for i, q in enumerate(reversed(qs)):
            for j, p in enumerate(ps):
                cell = body[i][j + 1]
                assert f"p = {p:g}, q = {q:g}" in cell["title"]
                r = newest.get((p, q))
                if r is None:
                    assert cell["text"] == "·" and cell["href"] is None and "not run" in cell["title"]
                    marks_seen.add(cell["text"])
                    continue
                g = next(g for g in r["summary"]["claims"] if g["id"] == cid)
                assert cell["text"] == MARKS[g["verdict"]] and f"v-{g['verdict'].replace(' ', '-')}" in cell["class"]
                assert cell["href"] == f"../runs/{r['run_id']}/report.html"
                for row in g["rows"]:  # measured vs expected of every row, on hover
                    assert row["id"].split("/", 1)[1] in cell["title"]
                marks_seen.add(cell["text"])
    assert {"✓", "✗", "·"} <= marks_seen
    # the planted failure: at p + q > 1 a standard init ending at the entropy rate fails the Thm. 2 claim
    std = newest[(0.8, 0.9)]["summary"]["claims"]
    assert next(g for g in std if g["id"] == "standard-init-ends-at-theory-limit")["verdict"] == "fails"
    # at H(π) where Thm. 2 says it stays, but after the quick 1,000 of the seed's 8,000 steps: not resolved yet
    at_hpi = next(g for g in newest[(0.4, 0.9)]["summary"]["claims"] if g["id"] == "standard-init-ends-at-theory-limit")
    assert at_hpi["verdict"] == "not resolved" and at_hpi["cause"] == "shorter than the seed's length"
    text = " ".join(page.text)
    # the findings text of the points: each verdict's note, with what was measured
    assert "(proposed-init-ends-at-global-minimum): " in text and "measured" in text


def test_every_link_in_the_site_resolves_to_a_file_in_the_site(site):
    out = site["out"].resolve()
    pages = sorted(out.rglob("*.html"))
    assert len(pages) >= len(registry()) + 1 + 9  # front, experiments, 9 run reports
    checked = 0
    for html in pages:
        for link in _parse(html).links:
            url = urlparse(link)
            assert not url.scheme and not url.netloc and not link.startswith("/"), (html, link)  # relative only
            if not url.path:
                continue
            target = (html.parent / unquote(url.path)).resolve()
            assert target.is_file() and target.is_relative_to(out), (html, link)
            checked += 1
    assert checked > 50
    # the deleted run folder's report was rendered from the index
    gone = site["points"][(0.4, 0.1)].run_id
    assert (out / "runs" / gone / "report.html").is_file()


# ---------------------------------------------------------------------------------------------- CLI
@pytest.fixture
def invoke(monkeypatch):
    monkeypatch.setattr(cli, "out_console", Console(width=400))
    monkeypatch.setattr(cli, "err_console", Console(stderr=True, width=400))
    runner = CliRunner()
    return lambda *args: runner.invoke(cli.app, [str(a) for a in args])


def test_cli_bad_input_is_one_line_and_exit_2(invoke, tmp_path, monkeypatch):
    bare = "topics-landscape"  # every experiment declares axes: take one's away
    monkeypatch.setattr(type(registry()[bare]), "atlas_axes", None)
    for args, msg in (
        (["atlas", "run", "nope", "--runs", tmp_path / "r"], "unknown experiment"),
        (["atlas", "run", bare, "--runs", tmp_path / "r"], "declares no atlas axes"),
        (["atlas", "run", "markov-init", "--profile", "huge", "--runs", tmp_path / "r"], "unknown profile"),
        (["atlas", "run", "markov-init", "--backend", "slurm", "--runs", tmp_path / "r"], "unknown backend"),
        (["atlas", "build", "--runs", tmp_path / "empty", "--out", tmp_path / "s"], "holds no run index"),
        (["atlas", "serve", "--out", tmp_path / "nosite"], "holds no atlas site"),
        (["export", tmp_path, "--arm", "a", "--member", "0", "--to", "onnx"], "unknown target"),
    ):
        res = invoke(*args)
        assert res.exit_code == 2, (args, res.output)
        err = res.stderr.strip()
        assert err.count("\n") == 0 and msg in err, (args, err)
    assert not (tmp_path / "r").exists() and not (tmp_path / "empty").exists() and not (tmp_path / "s").exists()


def test_cli_atlas_run_hands_the_axes_sweep_to_the_sweep_runner(invoke, tmp_path, monkeypatch):
    import tdlab.sweep as sweep

    seen = []
    monkeypatch.setattr(
        sweep,
        "run_sweep",
        lambda spec, out, backend, workers, address, echo: seen.append((spec, out, backend, workers)) or plan(spec),
    )
    res = invoke("atlas", "run", "markov-rank", "markov-init", "--runs", tmp_path / "runs", "--workers", 3)
    assert res.exit_code == 0, res.output
    assert [s.name for s, *_ in seen] == ["atlas-markov-rank-quick", "atlas-markov-init-quick"]
    spec, out, backend, workers = seen[1]
    assert out == tmp_path / "runs" and backend == "local" and workers == 3
    assert spec.grid["task.p"] == [0.2, 0.4, 0.6, 0.8] and spec.set == {"train.seq_len": 64, "train.eval_batches": 2}
    seen.clear()
    assert invoke("atlas", "run", "--runs", tmp_path / "runs").exit_code == 0  # no names: every declaring experiment
    assert {s.experiment for s, *_ in seen} == {e.name for e in experiments_with_axes()}


def test_cli_atlas_serve_serves_the_site(site):
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, "-m", "tdlab.cli", "atlas", "serve", "--out", str(site["out"]), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "300"},
    )
    try:
        line = proc.stdout.readline()
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
        body = (
            urllib.request.urlopen(f"http://127.0.0.1:{port}/experiments/markov-init.html", timeout=30).read().decode()
        )
        assert "standard-init-ends-at-theory-limit" in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_atlas_build(invoke, site, tmp_path):
    res = invoke("atlas", "build", "--runs", site["runs"], "--out", tmp_path / "s2")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "s2" / "index.html").is_file() and (
        tmp_path / "s2" / "experiments" / "markov-init.html"
    ).is_file()


# --------------------------------------------------------------------------------------- Chromium
def _chromium(args: list[str], url: Path) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [shutil.which("chromium"), *FLAGS, f"--user-data-dir={profile}", *args, f"file://{url.resolve()}"],
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_pages_render_in_headless_chromium(site, tmp_path):
    import matplotlib.image as mpimg

    for page, must in (
        (site["front"], ["tdlab claims atlas", "markov-init", "7/16 points"]),
        (site["out"] / "experiments" / "markov-init.html", ["standard-init-ends-at-theory-limit", "✓", "✗"]),
    ):
        dom = _chromium(["--dump-dom"], page).stdout
        for text in must:
            assert text in dom, (page, text)
        png = tmp_path / f"{page.stem}.png"
        _chromium([f"--screenshot={png}"], page)
        img = mpimg.imread(png)
        assert img.shape[0] > 500 and img.shape[1] > 500
        assert img[..., :3].std() > 0.02  # not a blank page


# ------------------------------------------------------------------- the site never touches what it reads
def _runs_copy(site, tmp_path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(site["runs"], runs, symlinks=True)
    return runs


def _tree(folder: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "/")
        for p in sorted(folder.rglob("*"))
        if not p.name.endswith(("-wal", "-shm"))
    }


def test_a_run_id_read_from_the_index_is_checked_like_run_id(invoke, site, tmp_path):
    """An index row naming ``../../escape`` wrote report.html and figures/ outside the site, rc 0."""
    import sqlite3

    runs = _runs_copy(site, tmp_path)
    with sqlite3.connect(runs / "index.sqlite") as con:
        row = con.execute("SELECT * FROM runs LIMIT 1").fetchone()
        con.execute(f"INSERT INTO runs VALUES ({', '.join('?' * len(row))})", ("../../escape", *row[1:]))
    con.close()
    res = invoke("atlas", "build", "--runs", runs, "--out", tmp_path / "site")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.output
    assert "index.sqlite is corrupt: run id '../../escape'" in res.stderr and "--reindex" in res.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path / "site").exists()
    assert invoke("runs", "--out", runs, "--reindex").exit_code == 0  # the advice works: the index is rebuilt
    assert "../../escape" not in {r["run_id"] for r in RunIndex(runs).query()}


def test_symlinks_in_a_run_are_never_followed_and_a_loop_drops_nothing_else(invoke, site, tmp_path):
    runs = _runs_copy(site, tmp_path)
    run = site["default"].name
    figs = sorted(p.name for p in (runs / run / "figures").iterdir())
    os.symlink("/etc/passwd", runs / run / "figures" / "leak.png")
    os.symlink("loop.png", runs / run / "figures" / "loop.png")
    before = _tree(runs)
    res = invoke("atlas", "build", "--runs", runs, "--out", tmp_path / "site")
    assert res.exit_code == 0, res.output
    copied = tmp_path / "site" / "runs" / run
    assert sorted(p.name for p in (copied / "figures").iterdir()) == figs  # the regular figures, nothing else
    report = (copied / "report.html").read_text()
    assert all(f"figures/{f}" in report for f in figs)  # the run's own report, not one rebuilt without figures
    assert not any(b"root:" in p.read_bytes() for p in (tmp_path / "site").rglob("*") if p.is_file())
    assert res.stderr.count("\n") == 1 and "2 run file(s) not copied" in res.stderr and "symlink" in res.stderr
    assert _tree(runs) == before


def test_a_missing_report_is_rendered_into_the_site_never_into_the_run(invoke, site, tmp_path):
    runs = _runs_copy(site, tmp_path)
    run = site["default"].name
    (runs / run / "report.html").unlink()
    before = _tree(runs)
    assert invoke("atlas", "build", "--runs", runs, "--out", tmp_path / "site").exit_code == 0
    assert (tmp_path / "site" / "runs" / run / "report.html").is_file() and _tree(runs) == before


@pytest.mark.parametrize("where", ["runs", "parent", "in-run", "run"])
def test_the_site_never_overlaps_the_runs_it_reads(invoke, site, tmp_path, where):
    """`--out .` above the runs folder rewrote every run's report.html (a swallowed same-file error)."""
    runs = _runs_copy(site, tmp_path)
    run = runs / site["default"].name
    out = {"runs": runs, "parent": tmp_path, "in-run": run / "site", "run": run}[where]
    before = _tree(tmp_path)
    res = invoke("atlas", "build", "--runs", runs, "--out", out)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "--out" in res.stderr, res.output
    assert _tree(tmp_path) == before


def test_out_that_cannot_be_written_or_holds_other_files_is_refused(invoke, site, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    for out, words in (
        (Path("/proc/tdlab-x"), "cannot write there"),
        (tmp_path / "mine", "holding other files"),
        (tmp_path / "mine" / "thesis.tex", "not a folder"),
    ):
        res = invoke("atlas", "build", "--runs", site["runs"], "--out", out)
        assert res.exit_code == 2 and res.stderr.count("\n") == 1 and words in res.stderr, res.output
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["thesis.tex"]


def test_an_interrupted_build_leaves_the_earlier_site_whole(invoke, site, tmp_path, monkeypatch):
    """Ctrl-C mid-build left a 0-byte PNG and no index.html: the site is built aside and swapped in."""
    import jinja2

    out = tmp_path / "site"
    assert invoke("atlas", "build", "--runs", site["runs"], "--out", out).exit_code == 0
    earlier = _tree(out)
    calls = []

    def interrupt(self, *args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(jinja2.Template, "render", interrupt)
    res = invoke("atlas", "build", "--runs", site["runs"], "--out", out)
    assert calls and res.exit_code != 0
    assert _tree(out) == earlier  # the earlier site, complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no staging folder left beside it
    shutil.rmtree(out)
    res = invoke("atlas", "build", "--runs", site["runs"], "--out", out)  # interrupted with no earlier site: nothing
    assert res.exit_code != 0 and not out.exists() and not list(tmp_path.iterdir())


# ------------------------------------------------------------------------- every experiment's atlas
@pytest.mark.parametrize("name", sorted(registry()))
def test_every_experiment_has_a_quick_atlas_sweep_that_validates(name):
    """`tdlab atlas run NAME --profile quick` for every registered experiment: the declaration exists,
    names config fields, sweeps at least two quick values on some axis, and every point's config is built and
    validated exactly as the sweep runner does before running anything (no training)."""
    assert name in {e.name for e in experiments_with_axes()}
    exp = registry()[name]
    decl = exp.atlas_axes
    check_fields(exp)
    assert any(len(a.range("quick")) >= 2 for a in decl.axes), name  # something is swept
    assert decl.size("quick") <= 16, name  # markov-init's 4 x 4 is the largest quick grid
    assert decl.why, name
    for a in decl.axes:  # the paper range is at least as wide as the quick one
        assert len(a.values) >= len(a.range("quick")), (name, a.field)
    spec = atlas_spec(exp, "quick")
    _validate_points(spec)
    assert len(spec._hashes) == len(set(spec._hashes)) == decl.size("quick") == len(plan(spec))


def test_every_registered_experiment_declares_atlas_axes():
    assert [e.name for e in experiments_with_axes()] == sorted(registry())


# ------------------------------------------------------------------------------- cell colour scale
def test_cell_score_places_the_measured_value_against_the_tolerance_boundary():
    from tdlab.atlas.site import cell_score, score_colour

    close = {"relation": "close", "expected": 1.0, "tolerance": 0.1}
    assert cell_score({**close, "mean": 1.0}) == pytest.approx(1.0)  # at the centre: one tolerance inside
    assert cell_score({**close, "mean": 1.1}) == pytest.approx(0.0)  # on the boundary
    assert cell_score({**close, "mean": 0.85}) == pytest.approx(-0.5)
    assert cell_score({**close, "mean": 9.0}) == -2.0  # clipped
    assert cell_score({"relation": "le", "expected": 0.0, "tolerance": 0.5, "mean": -0.5}) == pytest.approx(2.0)
    assert cell_score({"relation": "ge", "expected": 1.0, "tolerance": 0.0, "mean": 0.5}) == pytest.approx(-0.5)
    # a comparison reads the difference against the margin
    assert cell_score({"test": "compare", "relation": "lt", "expected": 0.1, "tolerance": 0.0, "difference": -0.3}) > 0
    assert (
        cell_score({"test": "compare", "relation": "gt", "expected": 0.1, "tolerance": 0.0, "interval": [0.0, 0.1]}) < 0
    )
    assert cell_score({**close, "mean": None}) is None and cell_score({**close, "mean": float("nan")}) is None
    assert score_colour(0.0) == "#ffffff"
    hold, fail = score_colour(1.0), score_colour(-1.0)
    assert int(hold[3:5], 16) > int(hold[1:3], 16) and int(fail[1:3], 16) > int(fail[3:5], 16)  # green vs red


def _rgb(style: str) -> tuple[int, int, int]:
    h = re.search(r"background:\s*#([0-9a-f]{6})", style).group(1)
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def test_map_cells_are_coloured_by_the_measured_value_with_the_boundary_in_the_legend(site):
    html = (site["out"] / "experiments" / "markov-init.html").read_text()
    assert 'class="scale"' in html and "boundary" in html and "tolerance region" in html  # the legend
    page = _parse(site["out"] / "experiments" / "markov-init.html")
    cid = "standard-init-ends-at-theory-limit"
    m = next(m for m in page.maps if m["label"].split()[0] == cid)
    body = m["rows"][:-1]
    qs, ps = (0.9, 0.7, 0.3, 0.1), (0.2, 0.4, 0.6, 0.8)
    cell = {(p, q): body[i][j + 1] for i, q in enumerate(qs) for j, p in enumerate(ps)}
    # (0.4, 0.9) sits at H(π) as Thm. 2 says, but a "stays" claim needs the seed's 8,000 steps: the mark says not
    # resolved while the colour says which side of the boundary the measurement lies
    holding, failing = cell[(0.4, 0.9)], cell[(0.8, 0.9)]
    assert holding["text"] == "?" and failing["text"] == "✗"  # the verdict mark stays in the cell
    for c in (holding, failing):
        assert c["style"] and "background" in c["style"] and c["score"] is not None
    assert float(holding["score"]) > 0 > float(failing["score"])  # opposite sides of the boundary
    (hr, hg, _), (fr, fg, _) = _rgb(holding["style"]), _rgb(failing["style"])
    assert hg > hr and fr > fg  # green inside the tolerance region, red outside
    assert cell[(0.2, 0.9)]["text"] == "·" and cell[(0.2, 0.9)]["style"] is None  # no value: as before


# ------------------------------------------------------------------------------ atlas run end to end
def test_atlas_run_and_build_end_to_end_on_a_tiny_axis(invoke, tmp_path, monkeypatch):
    """`tdlab atlas run topics-landscape --profile quick` for real (its own axis, the closed-form
    landscape shrunk by fixed overrides), then `tdlab atlas build`: two points run and mapped."""
    exp = registry()["topics-landscape"]
    real = exp.atlas_axes
    tiny = AtlasAxes(axes=real.axes, set={"grid_n": 8, "gamma_n": 101, "mc_docs": 2, "mc_N": 100, "members": 1})
    monkeypatch.setattr(type(exp), "atlas_axes", tiny)
    runs = tmp_path / "runs"
    res = invoke("atlas", "run", "topics-landscape", "--profile", "quick", "--runs", runs, "--workers", 2)
    assert res.exit_code == 0, res.output
    idx = RunIndex(runs).query("experiment = 'topics-landscape'")
    assert len(idx) == 2 and {r["status"] for r in idx} == {"done"}
    assert {r["config"][real.axes[0].field] for r in idx} == set(real.axes[0].range("quick"))
    assert all(r["sweep"] == sweep_name("topics-landscape", "quick") for r in idx)
    res = invoke("atlas", "build", "--runs", runs, "--out", tmp_path / "site")
    assert res.exit_code == 0, res.output
    page = _parse(tmp_path / "site" / "experiments" / "topics-landscape.html")
    assert page.maps and all(len(m["rows"][0]) == 2 for m in page.maps)  # one row of two points per claim
    assert any(c["style"] for m in page.maps for c in m["rows"][0])
