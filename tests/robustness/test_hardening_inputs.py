"""Every input of :mod:`hardening_inputs` as a test: the 23 the hardening review found mishandled (the
test id names the review's item: a regression test per item) and the 69 cases of the same surfaces,
each kept to the promise (one line, exit 2, no traceback, nothing half-written, no code run, nothing
outside the target touched, no run directory changed) or, for a valid input, exit 0.

Each case runs in a child of a fork server (never a fork of pytest's process, whose torch thread pools
have run) under a time limit and a 64 MB file-size limit (a hang or a copy
without end is a failure, not a stuck suite). ``python tests/robustness/hardening_inputs.py`` counts
them ("N of 92 handled as promised").
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the inputs live beside this file (tests are not a package)
import hardening_inputs as hi


@pytest.fixture(scope="module")
def ctx():
    root = Path(tempfile.mkdtemp(prefix="tdlab-hardening-"))
    try:
        yield hi.build_fixtures(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_inputs_are_the_reviews_92():
    assert len(hi.CASES) == 92 and len({c.id for c in hi.CASES}) == 92
    assert sum(c.item is not None for c in hi.CASES) == 23
    assert {c.item for c in hi.CASES if c.item} == {str(i) for i in range(1, 12)}  # every item of the review


@pytest.mark.parametrize("case", hi.CASES, ids=[f"{c.id}[item {c.item}]" if c.item else c.id for c in hi.CASES])
def test_input_is_handled_as_promised(fz, ctx, case):
    if ctx.bert is None and case.surface == "model.checkpoint":
        pytest.skip("transformers (extra hf) is not installed")
    ok, why, _ = hi.run_case(case, ctx)
    fz.record(f"hardening: {case.surface}", case.id, ok, refused=False)
    assert ok, why
