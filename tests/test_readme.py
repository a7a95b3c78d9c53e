"""The README stays short and every link in it resolves: relative links and images to files in the
repository, and an anchor (``FILE.md#heading``) to a heading of that file as GitHub slugs it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
IMG = re.compile(r"<img\s[^>]*src=\"([^\"]+)\"")


def _targets(text: str) -> list[str]:
    text = re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)  # code holds commands, not links
    return LINK.findall(text) + IMG.findall(text)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces '-'."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_readme_is_at_most_250_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= 250, f"README.md has {n} lines; move a section into a docs/ page and link it"


def test_every_relative_link_and_anchor_in_the_readme_resolves():
    targets = [t for t in _targets(README.read_text(encoding="utf-8")) if not re.match(r"[a-z]+:", t)]
    assert len(targets) > 20  # the parse found the links (the docs table alone has more)
    broken = []
    for t in targets:
        path, _, anchor = t.partition("#")
        target = (ROOT / path) if path else README
        if not target.exists():
            broken.append(f"{t}: no such file")
        elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
            broken.append(f"{t}: no heading with that anchor")
    assert not broken, broken


def test_the_slug_and_the_anchor_check_catch_what_they_should(tmp_path):
    assert github_slug("What `markov-init` shows in detail") == "what-markov-init-shows-in-detail"
    assert (
        github_slug("At the seeds' own settings (published results)") == "at-the-seeds-own-settings-published-results"
    )
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n```\n# not a heading\n```\n## Deciding: `--decide`\n")
    assert _anchors(page) == {"title", "deciding---decide"}
    assert _targets('[a](x.md) ![b](y.png) `[c](z.md)` <img src="w.png" width="2">\n```\n[d](v.md)\n```') == [
        "x.md",
        "y.png",
        "w.png",
    ]
