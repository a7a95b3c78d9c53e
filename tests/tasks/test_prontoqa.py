"""PrOntoQA-style generator (seed 001 Figs. 1, 6): every generated example is checked by an
independent text-only checker (tests/tasks/prontoqa_checker.py), which is itself shown to reject
corrupted examples; determinism, the hops and answer distributions, and the released JSON reader."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tdlab.config import ConfigError
from tdlab.tasks.prontoqa import Example, ProntoQAConfig, generate, read_json


def _load_checker():
    # pytest runs in importlib mode (no sys.path entry for tests/), so load the sibling file by path.
    path = Path(__file__).with_name("prontoqa_checker.py")
    spec = importlib.util.spec_from_file_location("prontoqa_checker", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


checker = _load_checker()


def _z(count: int, n: int, p: float) -> float:
    """Standardised deviation of a binomial count from its mean."""
    return (count - n * p) / math.sqrt(n * p * (1 - p))


# ------------------------------------------------------------------------------------------------
# The checker accepts every generated example


@pytest.mark.parametrize("distractors", [True, False])
@pytest.mark.parametrize("hops", [1, 2, 3, 4, 5])
def test_every_generated_example_is_a_valid_proof(hops, distractors):
    n = 500 if distractors else 150
    cfg = ProntoQAConfig(hops=(hops,), distractors=distractors)
    for ex in generate(n, seed=hops, cfg=cfg):
        assert checker.check_text(ex.text()) == [], ex.text()
        # The parts agree with the training string, and the chain has the stated depth.
        assert checker.split_text(ex.text()) == (ex.context, ex.query, list(ex.chain), ex.answer)
        assert ex.hops == hops == checker.hops_of(ex.chain)


def test_deepest_proofs_are_valid():
    for ex in generate(100, seed=7, cfg=ProntoQAConfig(hops=(6, 7, 8))):
        assert checker.check_text(ex.text()) == []


def test_context_shape():
    """Without distractors the context is the proof's rules and the fact; with them, the asked
    adjective also appears with the opposite polarity on a concept the entity is not in."""
    for ex in generate(200, seed=3, cfg=ProntoQAConfig(distractors=False)):
        ctx = checker.sentences(ex.context)
        assert len(ctx) == ex.hops + 1
        assert sorted(ctx[:-1]) == sorted(ex.chain[1::2])  # exactly the rules the proof uses
        assert ctx[-1] == ex.chain[0]  # the fact closes the context
    for ex in generate(200, seed=4, cfg=ProntoQAConfig(distractors=True)):
        ctx = checker.sentences(ex.context)
        assert len(ctx) == 2 * ex.hops + 6  # h+3 properties, h+2 is-a rules, the fact
        assert ctx[-1] == ex.chain[0]
        assert all(rule in ctx for rule in ex.chain[1::2])  # the chain restates context sentences
        adj = ex.query.rstrip(".").split()[-1]
        polarities = {"not" in s.split() for s in ctx if s.rstrip(".").split()[-1] == adj}
        assert polarities == {True, False}


# ------------------------------------------------------------------------------------------------
# The checker can fail


def _corruptions(ex: Example) -> dict[str, tuple[str, str, list[str], str]]:
    ctx, query, chain, answer = ex.context, ex.query, list(ex.chain), ex.answer
    other_rules = [s for s in checker.sentences(ctx)[:-1] if s not in chain]
    out = {
        "flipped answer": (ctx, query, chain, "False" if answer == "True" else "True"),
        "negated conclusion": (ctx, query, [*chain[:-1], _negate(chain[-1])], answer),
        "rule missing from the context": (ctx.replace(chain[1] + " ", ""), query, chain, answer),
        "query about another property": (ctx, re.sub(r"\w+\.$", "purple.", query), chain, answer),
        "chain is only the fact": (ctx, query, chain[:1], answer),
    }
    if ex.hops >= 2:
        out["chain stops early"] = (ctx, query, chain[:-2], answer)
        out["step skipped"] = (ctx, query, chain[:1] + chain[3:], answer)
        out["steps swapped"] = (ctx, query, chain[:1] + chain[3:5] + chain[1:3] + chain[5:], answer)
    if other_rules:
        out["wrong rule"] = (ctx, query, [chain[0], other_rules[0], *chain[2:]], answer)
    return out


def _negate(statement: str) -> str:
    return statement.replace(" is not ", " is ") if " is not " in statement else statement.replace(" is ", " is not ")


# The error each corruption must produce (a substring of one of the checker's messages): the
# checker rejects it for the right reason, not by accident.
_EXPECTED = {
    "flipped answer": ("the context entails", "the chain concludes"),
    "negated conclusion": ("does not follow from",),
    "rule missing from the context": ("is not in the context",),
    "query about another property": ("not decided by the context", "neither the query's statement"),
    "chain stops early": ("does not end with a property statement",),
    "chain is only the fact": ("chain has 1 sentences",),
    "step skipped": ("does not apply to the previous statement",),
    "steps swapped": ("does not apply to the previous statement",),
    "wrong rule": ("step 1: ",),  # located at the replaced step (does not apply, or does not follow)
}


def test_checker_rejects_corrupted_examples():
    seen: dict[str, int] = {}
    for ex in generate(300, seed=11, cfg=ProntoQAConfig(hops=(1, 2, 3, 4, 5))):
        assert checker.check_parts(ex.context, ex.query, list(ex.chain), ex.answer) == []
        for name, parts in _corruptions(ex).items():
            errors = checker.check_parts(*parts)
            for expected in _EXPECTED[name]:
                assert any(expected in e for e in errors), (name, expected, errors, parts)
            seen[name] = seen.get(name, 0) + 1
    assert set(seen) == set(_EXPECTED)


def test_checker_rejects_bad_layout_and_an_inconsistent_context():
    ex = generate(1, seed=0, cfg=ProntoQAConfig(hops=(3,), distractors=False))[0]
    assert checker.check_text(ex.text().replace("\nA: ", " A: ")) != []
    assert checker.check_text(ex.text()[: -len(ex.answer)] + "Maybe") != []
    # Add the negation of the asked property to the fact's own concept: the context contradicts itself.
    concept = ex.chain[0].rstrip(".").split()[-1]
    adj = ex.query.rstrip(".").split()[-1]
    extra = f"Every {concept} is {'' if ' not ' in ex.chain[-1] else 'not '}{adj}. "
    errors = checker.check_parts(extra + ex.context, ex.query, list(ex.chain), ex.answer)
    assert any("inconsistent" in e for e in errors)


# ------------------------------------------------------------------------------------------------
# Determinism and distributions


def test_deterministic_and_prefix_stable():
    cfg = ProntoQAConfig()
    a, b = generate(50, seed=5, cfg=cfg), generate(50, seed=5, cfg=cfg)
    assert a == b
    assert generate(80, seed=5, cfg=cfg)[:50] == a
    c = generate(50, seed=6, cfg=cfg)
    assert sum(x != y for x, y in zip(a, c, strict=True)) >= 45  # another seed: (nearly) all examples differ
    assert generate(50, seed=5, cfg=ProntoQAConfig(distractors=False)) != a
    assert generate(0, seed=5) == []


def test_hops_uniform_and_answers_balanced():
    n = 3000
    exs = generate(n, seed=1, cfg=ProntoQAConfig(hops=(1, 3, 5)))
    counts = {h: sum(e.hops == h for e in exs) for h in (1, 3, 5)}
    assert sum(counts.values()) == n
    for _h, k in counts.items():
        assert abs(_z(k, n, 1 / 3)) < 5, counts  # 5 standard deviations: a false alarm is ~1e-6
    trues = sum(e.answer == "True" for e in exs)
    assert abs(_z(trues, n, 0.5)) < 5, trues
    # The asked statement is negated about half the time, independently of the answer.
    negated_query = sum(" is not " in e.query for e in exs)
    assert abs(_z(negated_query, n, 0.5)) < 5
    assert all(e.answer == "True" for e in generate(100, seed=2, cfg=ProntoQAConfig(true_share=1.0)))
    assert all(e.answer == "False" for e in generate(100, seed=2, cfg=ProntoQAConfig(true_share=0.0)))


def test_text_layout():
    ex = Example(
        context="Every wumpus is small. Max is a wumpus.",
        query="True or false: Max is small.",
        chain=("Max is a wumpus.", "Every wumpus is small.", "Max is small."),
        answer="True",
        hops=1,
    )
    assert ex.text() == (
        "Q: Every wumpus is small. Max is a wumpus. True or false: Max is small.\n"
        "A: Max is a wumpus. Every wumpus is small. Max is small. True"
    )
    assert checker.check_text(ex.text()) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"hops": ()},
        {"hops": (0,)},
        {"hops": (9,)},
        {"hops": (1, 1)},
        {"true_share": 1.5},
        {"ontology": "true"},
        {"distractors": 1},
    ],
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValidationError) as info:
        ProntoQAConfig(**bad)
    assert next(iter(bad)) in str(info.value)


# ------------------------------------------------------------------------------------------------
# The released JSON format


def _record(ex: Example) -> dict:
    return {"question": ex.context, "query": ex.query, "chain_of_thought": list(ex.chain), "answer": ex.answer}


def test_read_json_released_layout(tmp_path):
    exs = generate(6, seed=9)
    data = {
        "example1": {
            "in_context_example1": _record(exs[1]),
            "in_context_example0": _record(exs[0]),
            "test_example": _record(exs[2]),
        },
        "example2": {"in_context_example0": _record(exs[3]), "test_example": _record(exs[4])},
    }
    path = tmp_path / "5hop.json"
    path.write_text(json.dumps(data, indent=1))
    assert read_json(path) == exs[:5]  # in-context examples in index order, then the test example
    # A list of entries, and bare records, are accepted too.
    path.write_text(json.dumps([data["example2"], _record(exs[5])]))
    assert read_json(path) == [exs[3], exs[4], exs[5]]


def test_read_json_hand_written_record(tmp_path):
    rec = {
        "question": "Each jompus is a wumpus. Wumpuses are not shy. Impuses are shy. Alex is a jompus.",
        "query": "True or false: Alex is shy.",
        "chain_of_thought": [
            "Alex is a jompus.",
            "Each jompus is a wumpus.",
            "Alex is a wumpus.",
            "Wumpuses are not shy.",
            "Alex is not shy.",
        ],
        "answer": "False",
    }
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"example1": {"test_example": rec}}))
    (ex,) = read_json(path)
    assert ex.hops == 2 and ex.answer == "False" and ex.chain[0] == "Alex is a jompus."
    assert checker.check_text(ex.text()) == []


@pytest.mark.parametrize(
    "content",
    [
        None,  # missing file
        "{not json",
        "42",
        "{}",
        '{"example1": {"foo": 1}}',
        '{"example1": {"test_example": {"question": "q", "query": "q", "answer": "True"}}}',
        '{"example1": {"test_example": {"question": "q", "query": "q", "chain_of_thought": "x", "answer": "True"}}}',
        '{"example1": {"test_example": {"question": "q", "query": "q", "chain_of_thought": [], "answer": "yes"}}}',
        "[1, 2]",
    ],
)
def test_read_json_malformed_names_the_field(tmp_path, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        read_json(path)
    msg = str(info.value)
    assert msg.startswith("data.prontoqa: ") and "expected PrOntoQA JSON" in msg
    assert "\n" not in msg
    with pytest.raises(ConfigError, match=r"^data\.other: "):
        read_json(path, field="data.other")
