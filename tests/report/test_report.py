"""report.html: the claims table and the figure, escaping, diverged runs; rendering in headless
Chromium where it exists; the screenshot script's browser invocation."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tdlab.report.html import render_report
from tdlab.runner import rebuild

STEPS = [0, 100, 200, 300, 400]
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_report.sh"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,1600",
]


class _Page(HTMLParser):
    """Collects the table rows (cells as text) and image sources of a page."""

    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self._cell, self._row = [], [], None, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = {"text": "", "class": dict(attrs).get("class")}
        elif tag == "img":
            self.imgs.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


@pytest.fixture
def report_run(make_markov_run):
    """A synthetic markov-init run with its report rebuilt: the gpt2 standard arm ends at the entropy
    rate instead of H(π) (a failing row), the gpt2 proposed arm never moved (not evaluable)."""
    import math

    def h(x):
        return -x * math.log(x) - (1 - x) * math.log(1 - x)

    p, q = 0.5, 0.8
    pi1 = p / (p + q)
    rate, hpi = (1 - pi1) * h(p) + pi1 * h(q), h(pi1)
    spread = (-0.001, 0.0, 0.001)
    curves = {
        "sec2/standard": [[0.69] + [hpi + d] * 4 for d in spread],
        "gpt2/standard": [[0.69] + [rate + d] * 4 for d in spread],
        "sec2/local-to-global": [[0.69] + [rate + d] * 4 for d in spread],
        "gpt2/local-to-global": [[0.7] * 5] * 3,
    }
    _cfg, path = make_markov_run(p, q, curves, STEPS)
    return rebuild(path)


def test_report_has_grouped_claims_health_and_the_figure(report_run):
    html = (report_run.path / "report.html").read_text()
    page = _Page()
    page.feed(html)
    summary = report_run.summary
    row_tables = [t for t in page.tables if t and t[0][0]["text"] == "row"]
    assert len(row_tables) == len(summary["claims"]) == 3  # one folded table per paper claim group
    for table, g in zip(row_tables, summary["claims"], strict=True):
        header = [c["text"] for c in table[0]]
        assert header[0] == "row" and header[-1] == "verdict"
        assert len(table) - 1 == len(g["rows"])
        for row, c in zip(table[1:], g["rows"], strict=True):
            assert row[0]["text"].startswith(c["id"])
            if c["test"] == "compare":  # the difference the interval is about, not one arm's mean
                assert f"difference {c['difference']:+.4g}" in row[3]["text"]
            else:
                assert f"{c['mean']:.4g}" in row[3]["text"]
            assert row[-1]["text"].startswith(c["verdict"]) and row[-1]["class"] == "v-" + c["verdict"].replace(
                " ", "-"
            )
    verdicts = [r[-1]["class"] for t in row_tables for r in t[1:]]
    assert "v-fails" in verdicts and "v-not-evaluable" in verdicts
    health = next(t for t in page.tables if t and t[0][0]["text"] == "arm")
    status = {r[0]["text"]: r[1]["text"] for r in health[1:]}
    assert status["gpt2/local-to-global"] == "not trained" and status["sec2/standard"] == "trained"
    assert "Paper claims" in html and "Sanity checks" not in html
    tally = ", ".join(
        f"{n} {v}"
        for v in ("holds", "fails", "not resolved", "not evaluable")
        if (n := sum(g["verdict"] == v for g in summary["claims"]))
    )
    assert f"Paper claims <small>({tally})</small>" in html
    # The figure is referenced relatively and exists next to the report.
    assert page.imgs == ["figures/fig4_test_loss.png"]
    assert (report_run.path / page.imgs[0]).stat().st_size > 10_000
    assert summary["run_id"] in html and "markov-init" in html


def _summary(**changes):
    """A minimal run summary for :func:`render_report`, with ``changes`` on top."""
    return {
        "experiment": "e",
        "figure": "F",
        "paper": "P",
        "run_id": "r",
        "profile": "quick",
        "status": "done",
        "claims": [],
        "notes": [],
        "figures": [],
        "measurements": {},
        "env": {},
        "seed": 0,
        "members": 1,
        "wall_time_s": 1.0,
        **changes,
    }


def test_report_lists_sanity_groups_apart():
    row = {
        "id": "s/r",
        "statement": "x",
        "kind": "sanity",
        "test": "value",
        "relation": "close",
        "expected": 0.0,
        "tolerance": 1e-6,
        "measured": [0.0],
        "reference": None,
        "paired": False,
        "unit": "",
        "drift": None,
        "mean": 0.0,
        "std": 0.0,
        "interval": [0.0, 0.0],
        "confidence": 0.95,
        "verdict": "holds",
        "reason": "",
        "n": 1,
    }
    summary = _summary(
        sanity=[
            {
                "id": "s",
                "statement": "energy is conserved",
                "kind": "sanity",
                "verdict": "holds",
                "counts": {},
                "rows": [row],
            }
        ]
    )
    html = render_report(summary, {"experiment": "e"})
    assert "Sanity checks" in html and "energy is conserved" in html and "Paper claims" not in html


def test_report_escapes_text_and_handles_diverged_runs():
    summary = _summary(
        status="diverged",
        error="loss diverged (non-finite) for member 1 at step 7",
        claims_total=0,
        claims_failed=0,
        notes=["a < b & c"],
        env={"python": "3.x"},
        members=2,
    )
    html = render_report(summary, {"experiment": "e"}, "<script>alert(1)</script>")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "a &lt; b &amp; c" in html
    assert 'class="status-diverged"' in html and "member 1 at step 7" in html
    assert "Paper claims" not in html


def test_report_lists_how_the_experiment_reads_the_seed():
    readings = [
        {
            "where": "App. A.3.1",
            "paper": "says SGD, no step size",
            "chosen": "AdamW <Table 2>",
            "option": "train.optimizer",
        },
        {"where": "App. C", "paper": "either factor", "chosen": "the better of the two", "option": None},
    ]
    html = render_report(_summary(), {"experiment": "e"}, "d", readings)
    assert "How this reads the seed" in html
    assert "<b>App. A.3.1</b>: says SGD, no step size — AdamW &lt;Table 2&gt;" in html
    assert "(option: <code>train.optimizer</code>)" in html and html.count("(option:") == 1
    assert "How this reads the seed" not in render_report(_summary(), {"experiment": "e"}, "d")


def _chromium_screenshot(browser: str, report: Path, png: Path) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", f"file://{report.resolve()}"],
            capture_output=True,
            timeout=120,
        )


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_report_renders_in_headless_chromium(report_run, tmp_path):
    png = tmp_path / "report.png"
    _chromium_screenshot(shutil.which("chromium"), report_run.path / "report.html", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_screenshot_script_with_real_chromium(report_run, tmp_path):
    out = tmp_path / "shots" / "r.png"
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(report_run.path), str(out)], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out.resolve()) and out.stat().st_size > 10_000


def test_screenshot_script_invokes_the_browser_offline_on_the_report(report_run, tmp_path):
    # A stand-in browser records its arguments and writes the screenshot where it is told to.
    fake = tmp_path / "bin" / "fake-chromium"
    fake.parent.mkdir()
    argv = tmp_path / "argv.txt"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > "{argv}"\n'
        'for a in "$@"; do case "$a" in --screenshot=*) head -c 20000 /dev/zero > "${a#--screenshot=}";; esac; done\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "CHROMIUM": str(fake)}
    proc = subprocess.run(
        ["bash", str(SCRIPT), str(report_run.path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    args = argv.read_text().splitlines()
    assert set(FLAGS) <= set(args)
    assert args[-1] == f"file://{(report_run.path / 'report.html').resolve()}"
    png = report_run.path / "report.png"
    assert f"--screenshot={png.resolve()}" in args and png.stat().st_size == 20000
    profile = next(a.split("=", 1)[1] for a in args if a.startswith("--user-data-dir="))
    assert not Path(profile).exists()  # the throwaway profile is removed
    assert proc.stdout.strip() == str(png.resolve())
    # Bad input: exit 2 with a message, browser never started.
    argv.unlink()
    bad = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "nope")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "report.html not found" in bad.stderr and not argv.exists()
    usage = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)
    assert usage.returncode == 2 and "usage" in usage.stderr


@pytest.fixture
def split_run(make_markov_run, monkeypatch):
    """`tdlab run markov-init`'s figure on a run whose standard-init members split (one stays on H(π), two
    leave it) and start at 40.8 nats: ``(run, what each saved figure held)``."""
    import math

    import tdlab.report.figures as figures

    def h(x):
        return -x * math.log(x) - (1 - x) * math.log(1 - x)

    p, q = 0.5, 0.8
    pi1 = p / (p + q)
    rate, hpi = (1 - pi1) * h(p) + pi1 * h(q), h(pi1)
    split = [[40.8, hpi, hpi, hpi, hpi], [40.8, hpi, rate, rate, rate], [40.8, hpi, hpi, rate, rate]]
    _cfg, path = make_markov_run(p, q, {"sec2/standard": split}, STEPS)
    seen = []
    save = figures.save_figure

    def keep(fig, out):
        saved = save(fig, out)
        seen.append(
            {
                "texts": [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts],
                "lines": [ln.get_label() for ax in fig.axes for ln in ax.get_lines()],
            }
        )
        return saved

    monkeypatch.setattr(figures, "save_figure", keep)
    return rebuild(path), seen


def test_the_first_commands_figure_shows_each_member_the_clipped_start_the_threshold_and_its_profile(split_run):
    from PIL import Image

    run, seen = split_run
    (fig,) = seen
    assert sum(label == "_member" for label in fig["lines"]) >= 3 * 4  # every member of every arm drawn
    assert any("escape threshold" in label for label in fig["lines"])
    assert any("clipped above (max 40.8)" in t for t in fig["texts"])
    assert any("profile quick" in t and "members" in t for t in fig["texts"])
    assert Image.open(run.path / run.summary["figures"][0]).size[0] > 500


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed")
def test_the_first_commands_report_renders_with_its_figure_in_headless_chromium(split_run, tmp_path):
    from PIL import Image

    run, _ = split_run
    shot = tmp_path / "report.png"
    _chromium_screenshot(shutil.which("chromium"), run.path / "report.html", shot)
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 1600) and len(set(image.getdata())) > 50  # a page with a figure, not a blank one


def test_report_shows_per_arm_measurements_as_one_table():
    summary = _summary(
        measurements={"c3": 1.156, "a/sgd": {"z": [2.5, 2.6], "g": 0.5}, "a/adam": {"z": [5.1, 5.2], "g": 0.7}},
        members=2,
    )
    html = render_report(summary, {"experiment": "e"})
    table = html.split("<h2>Measurements</h2>", 1)[1].split("</table>", 1)[0]
    assert "<code>z</code>" in table and "<code>a/sgd</code>" in table and "<code>a/adam</code>" in table
    assert '<td class="num">2.5/2.6</td>' in table and '<td class="num">5.1/5.2</td>' in table
    assert "c3: 1.156" in html  # the rest stays a tree below the table


def test_report_takes_an_experiments_readings_as_they_are():
    from tdlab.experiments.base import get

    readings = get("markov-rank").readings
    html = render_report(_summary(), {"experiment": "e"}, "d", readings)
    assert html.count("<li><b>") == len(readings) and "(option: <code>train.optimizer</code>)" in html
