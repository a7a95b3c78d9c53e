"""The profiles table: one row per experiment, and the Profiles page shows the table the code computes."""

from __future__ import annotations

import re
from pathlib import Path

from tdlab.experiments.catalog import CATALOG
from tdlab.pages.profiles import table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "profiles.md"


def test_one_row_per_experiment_with_its_three_profiles():
    rows = table().splitlines()[2:]
    assert [r.split("|")[1].strip(" `") for r in rows] == list(CATALOG)
    md = {r.split("|")[1].strip(" `"): [c.strip() for c in r.split("|")[2:-1]] for r in rows}
    assert md["markov-init"][:4] == ["train.steps", "2000", "8000", "8000"]  # quick, standard, paper lengths
    assert md["markov-landscape"][4] == "2/5/5"  # standard = the paper profile there


def test_the_profiles_page_table_is_the_computed_one():
    block = re.search(r"<!-- standard:start -->\n(.*?)\n<!-- standard:end -->", PAGE.read_text(), re.S)
    assert block is not None and block.group(1) == table(), "regenerate: python -m tdlab.pages.profiles"
