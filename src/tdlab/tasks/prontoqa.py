"""PrOntoQA-style reasoning text (seed 001, Fig. 1, Fig. 6, App. A.3; after Saparov & He, ICLR 2023).

Seed 001 trains a GPT-2 on a 50/50 mix of PrOntoQA and TinyStories (A.3: "10,000 data sequences,
with half of them sourced from PrOntoQA"). PrOntoQA is a generator whose released code carries no
licence; this module is tdlab's own, written from the paper's description of the data (nothing of
that code is copied). An example is a question about a fictional ontology answered with an explicit
chain of thought of modus-ponens steps::

    Q: Every wumpus is a yumpus. Tumpuses are not hot. Each yumpus is not small. ... Max is a wumpus.
       True or false: Max is not small.
    A: Max is a wumpus. Every wumpus is a yumpus. Max is a yumpus. Each yumpus is not small.
       Max is not small. True

Generation, per example (:func:`generate`):

1. Proof depth ``h`` drawn uniformly from ``cfg.hops``. ``h`` counts the rules the proof applies
   (modus-ponens steps): ``h - 1`` "is-a" steps up the ontology, then one property step. So a 1-hop
   example is "Max is a wumpus. Every wumpus is small. Max is small."
2. A random ontology (a tree of fictional concepts, distinct names per example). Its *spine* is the
   proof path ``a_0 -> a_1 -> ... -> a_{h-1}`` (``a_{k+1}`` the parent of ``a_k``); the entity is a
   member of ``a_0`` (the fact "Max is a a_0."), and the asked property belongs to ``a_{h-1}``.
   With ``distractors`` (the paper's ontologies are larger than the proof) the tree also has
   a parent ``p`` above ``a_{h-1}`` (so the chain does not stop at the root: the query says where to
   stop), a child ``c`` below ``a_0`` (a subtype the entity is not known to be in), and a sibling
   branch ``s`` under ``p`` carrying the *opposite* of the asked property (the paper's distractor
   sentence, e.g. "Impuses are shy." beside "Dumpuses are not shy."); every concept of the tree then
   has one property. Without distractors the context holds only the ``h`` rules of the proof.
3. Properties: each concept's property is an adjective from a family of antonyms
   (:data:`PROPERTY_FAMILIES`), possibly negated with "not". Families are distinct along every
   root-to-leaf path, so no concept inherits two statements about one family; the asked family
   appears only on ``a_{h-1}`` and on the distractor ``s`` (which is not an ancestor of the entity),
   so the query is decided by exactly one rule and the ontology is consistent.
4. Sentences: every rule takes one of three surface forms drawn uniformly — "Every X is a Y.",
   "Each X is a Y.", "Xs are Ys." (property rules alike: "Every X is not small.", "Xs are small.").
   The context is the rules in random order followed by the fact.
5. Answer: ``True`` with probability ``true_share`` (0.5: balanced labels, as the paper's data).
   The query is "True or false: S." where S is the proof's last statement for ``True`` and its
   negation for ``False``.
6. Chain of thought: the fact, then for each step the rule used (the context's own sentence,
   verbatim) and the statement it yields: ``1 + 2h`` sentences, the last one the asked property.

Training string (:meth:`Example.text`), one layout: ``"Q: {context} {query}\\nA: {chain} {answer}"``
(the chain's sentences joined by single spaces) — the "Q: ... A: ..." layout of the paper's prompts,
with the label appended so a language model trained on it sees the answer.

Choices where the seed and paper are silent or where we simplify (each documented above or here):

* The seed says only "PrOntoQA" (no hops, ontology type, or distractor setting); the issue asks for
  1, 3 and 5 hops with the fictional ontology: those are the defaults. The paper's "true"/"false"
  (real-world) ontologies are not offered.
* The off-proof part of the tree is fixed in shape (``p``, ``c``, ``s``), not a random branching
  tree, to keep examples short (sequences of at most 128 tokens in the quick profile).
* The chain repeats the context's sentence for each rule verbatim (the paper's chains restate the
  rule; whether its surface form matches the context's is not needed by any measure here).

Randomness: example ``i`` draws from its own NumPy generator seeded with
``derive_seed(seed, "prontoqa", i)``, so ``generate(n, seed)`` is deterministic in
``(n, seed, cfg)`` and is a prefix of ``generate(m, seed)`` for ``m > n``.

:func:`read_json` reads the released data's JSON layout (a dict or list of entries, each holding
``in_context_example0..`` and ``test_example`` records with ``question``, ``query``,
``chain_of_thought``, ``answer``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from tdlab.config import Config, ConfigError, echo
from tdlab.safeio import path_kind
from tdlab.seeding import derive_seed

__all__ = [
    "CONCEPTS",
    "MAX_HOPS",
    "NAMES",
    "PROPERTY_FAMILIES",
    "Example",
    "ProntoQAConfig",
    "generate",
    "read_json",
]

MAX_HOPS = 8

# Fictional concept names, as in the paper's "fictional" ontology. Plural: + "es".
CONCEPTS: tuple[str, ...] = (
    "wumpus",
    "yumpus",
    "zumpus",
    "dumpus",
    "rompus",
    "numpus",
    "tumpus",
    "vumpus",
    "impus",
    "jompus",
    "gorpus",
    "shumpus",
    "lempus",
    "sterpus",
    "grimpus",
    "lorpus",
    "brimpus",
)
NAMES: tuple[str, ...] = ("Max", "Alex", "Sam", "Fae", "Rex", "Wren", "Polly", "Sally", "Stella")
# Antonym pairs: a concept's property is one adjective of one family, possibly with "not".
PROPERTY_FAMILIES: tuple[tuple[str, str], ...] = (
    ("small", "large"),
    ("red", "blue"),
    ("hot", "cold"),
    ("happy", "sad"),
    ("bright", "dull"),
    ("kind", "mean"),
    ("wooden", "metallic"),
    ("transparent", "opaque"),
    ("sweet", "sour"),
    ("fast", "slow"),
    ("loud", "quiet"),
    ("shy", "bold"),
    ("liquid", "solid"),
    ("fruity", "bitter"),
)
# Tree nodes with distractors: the h spine concepts plus p, c, s.
_EXTRA = 3


class ProntoQAConfig(Config):
    """PrOntoQA-style example generator (fictional ontology, modus ponens only)."""

    # Proof depths (rules applied), drawn uniformly per example. Issue 16: 1, 3 and 5 hops.
    hops: tuple[int, ...] = (1, 3, 5)
    # Off-proof rules in the context (the paper's ontologies are larger than the proof, and hold a
    # distractor sentence with the opposite of the asked property). False: only the proof's rules.
    distractors: bool = True
    # Share of examples whose answer is True (the paper's labels are balanced).
    true_share: float = Field(0.5, ge=0.0, le=1.0)
    # The paper also has real-world "true"/"false" ontologies; only the fictional one is built here.
    ontology: Literal["fictional"] = "fictional"

    @model_validator(mode="after")
    def _check(self) -> ProntoQAConfig:
        if not self.hops:
            raise ValueError("hops must list at least one proof depth (each in 1..8)")
        bad = [h for h in self.hops if not 1 <= h <= MAX_HOPS]
        if bad:
            raise ValueError(f"hops must each be in 1..{MAX_HOPS}, got {echo(bad)}")
        if len(set(self.hops)) != len(self.hops):
            raise ValueError(f"hops must not repeat a depth, got {echo(list(self.hops))}")
        return self


@dataclass(frozen=True)
class Example:
    """One question with its chain of thought.

    Attributes:
        context: the rules and the fact, sentences joined by spaces (the released data's "question").
        query: "True or false: <statement>."
        chain: the chain-of-thought sentences: the fact, then (rule, derived statement) per step.
        answer: "True" or "False".
        hops: rules applied by the proof (``(len(chain) - 1) // 2``).
    """

    context: str
    query: str
    chain: tuple[str, ...]
    answer: str
    hops: int

    def text(self) -> str:
        """The training string: ``"Q: {context} {query}\\nA: {chain joined by ' '} {answer}"``."""
        return f"Q: {self.context} {self.query}\nA: {' '.join(self.chain)} {self.answer}"


# ----------------------------------------------------------------------------------------------
# Sentences


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _plural(noun: str) -> str:
    return noun + "es"  # every fictional name ends in "-us"


def _adjective(adj: str, negated: bool) -> str:
    return f"not {adj}" if negated else adj


def _isa_rule(child: str, parent: str, form: int) -> str:
    if form == 0:
        return f"Every {child} is {_article(parent)} {parent}."
    if form == 1:
        return f"Each {child} is {_article(parent)} {parent}."
    return f"{_plural(child).capitalize()} are {_plural(parent)}."


def _property_rule(concept: str, adj: str, negated: bool, form: int) -> str:
    prop = _adjective(adj, negated)
    if form == 0:
        return f"Every {concept} is {prop}."
    if form == 1:
        return f"Each {concept} is {prop}."
    return f"{_plural(concept).capitalize()} are {prop}."


def _member(name: str, concept: str) -> str:
    return f"{name} is {_article(concept)} {concept}."


def _has(name: str, adj: str, negated: bool) -> str:
    return f"{name} is {_adjective(adj, negated)}."


# ----------------------------------------------------------------------------------------------
# Generation


def _one(rng: np.random.Generator, cfg: ProntoQAConfig) -> Example:
    h = int(cfg.hops[rng.integers(len(cfg.hops))])
    n_nodes = h + (_EXTRA if cfg.distractors else 0)
    names = [CONCEPTS[i] for i in rng.permutation(len(CONCEPTS))[:n_nodes]]
    spine = names[:h]  # spine[0] = a_0 (the fact's concept) ... spine[h-1] = a_{h-1} (property)
    entity = NAMES[rng.integers(len(NAMES))]
    # Families along the root-to-leaf path c -> a_0 .. a_{h-1} -> p are all distinct; the asked
    # family is on a_{h-1} (and on s, off the entity's path, with the opposite polarity).
    fam = rng.permutation(len(PROPERTY_FAMILIES))
    target_fam = int(fam[0])
    target_adj = PROPERTY_FAMILIES[target_fam][rng.integers(2)]
    target_neg = bool(rng.integers(2))
    truth = bool(rng.random() < cfg.true_share)

    rules: list[str] = []  # sentences of the context (before shuffling)
    proof_rules: list[str] = []  # the proof's rules, in order of application
    for k in range(h - 1):
        rule = _isa_rule(spine[k], spine[k + 1], int(rng.integers(3)))
        rules.append(rule)
        proof_rules.append(rule)
    rule = _property_rule(spine[h - 1], target_adj, target_neg, int(rng.integers(3)))
    rules.append(rule)
    proof_rules.append(rule)

    if cfg.distractors:
        p, c, s = names[h], names[h + 1], names[h + 2]
        # Properties of a_0 .. a_{h-2}, p and c use the other families, one each (path-distinct).
        others = [spine[k] for k in range(h - 1)] + [p, c]
        for concept, f in zip(others, fam[1 : 1 + len(others)], strict=True):
            adj = PROPERTY_FAMILIES[int(f)][rng.integers(2)]
            rules.append(_property_rule(concept, adj, bool(rng.integers(2)), int(rng.integers(3))))
        rules.append(_isa_rule(spine[h - 1], p, int(rng.integers(3))))
        rules.append(_isa_rule(c, spine[0], int(rng.integers(3))))
        rules.append(_isa_rule(s, p, int(rng.integers(3))))
        # The distractor: the same adjective with the opposite polarity, on a concept the entity
        # is not known to belong to.
        rules.append(_property_rule(s, target_adj, not target_neg, int(rng.integers(3))))

    order = rng.permutation(len(rules))
    fact = _member(entity, spine[0])
    context = " ".join([rules[i] for i in order] + [fact])

    chain = [fact]
    for k, rule in enumerate(proof_rules):
        chain.append(rule)
        chain.append(_member(entity, spine[k + 1]) if k < h - 1 else _has(entity, target_adj, target_neg))
    query_neg = target_neg if truth else not target_neg
    query = f"True or false: {_has(entity, target_adj, query_neg)}"
    return Example(context=context, query=query, chain=tuple(chain), answer="True" if truth else "False", hops=h)


def generate(n: int, seed: int, cfg: ProntoQAConfig | None = None) -> list[Example]:
    """``n`` PrOntoQA-style examples, deterministic in ``(n, seed, cfg)``.

    Example ``i`` draws every choice (depth, concept names, entity, properties, surface forms,
    context order, answer) from ``np.random.default_rng(derive_seed(seed, "prontoqa", i))``, so the
    first ``n`` examples of a larger call are the same.

    Returns:
        list of :class:`Example`, length ``n``.
    """
    cfg = ProntoQAConfig() if cfg is None else cfg
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [_one(np.random.default_rng(derive_seed(seed, "prontoqa", i)), cfg) for i in range(n)]


# ----------------------------------------------------------------------------------------------
# The released JSON format

_RECORD_KEYS = ("question", "query", "chain_of_thought", "answer")
MAX_JSON_BYTES = 1 << 30  # read at most this much of a PrOntoQA JSON file (a larger one is not the released data)
_IN_CONTEXT = re.compile(r"in_context_example(\d+)$")


def _bad(field: str, path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"{field}: {echo(str(path))}: {what}; expected PrOntoQA JSON: a dict (or list) of examples, each "
        f"with in_context_example0.. and test_example records holding question, query, chain_of_thought "
        f"(a list of sentences) and answer (True/False)"
    )


def _record(rec: Any, where: str, field: str, path: Path) -> Example:
    if not isinstance(rec, dict) or any(k not in rec for k in _RECORD_KEYS):
        raise _bad(field, path, f"{where} is not a record with {', '.join(_RECORD_KEYS)}")
    question, query, chain, answer = (rec[k] for k in _RECORD_KEYS)
    if not isinstance(question, str) or not isinstance(query, str):
        raise _bad(field, path, f"{where}: question and query must be strings")
    if not isinstance(chain, list) or not all(isinstance(s, str) for s in chain):
        raise _bad(field, path, f"{where}: chain_of_thought must be a list of strings")
    if answer not in ("True", "False"):
        raise _bad(field, path, f"{where}: answer must be 'True' or 'False', got {echo(answer)}")
    chain_t = tuple(s.strip() for s in chain)
    return Example(
        context=question.strip(),
        query=query.strip(),
        chain=chain_t,
        answer=answer,
        hops=max(0, (len(chain_t) - 1) // 2),
    )


def read_json(path: str | Path, field: str = "data.prontoqa") -> list[Example]:
    """Examples from a file in the released PrOntoQA JSON layout.

    The top level is a dict of entries (``{"example1": {...}, ...}``, in file order) or a list of
    entries. An entry holds ``in_context_example0``, ``in_context_example1``, ... and
    ``test_example`` records (each ``{"question", "query", "chain_of_thought", "answer"}``), or is
    itself one such record. Every record becomes an :class:`Example` (an entry's in-context examples
    in index order, then its test example); ``hops`` is inferred as ``(len(chain) - 1) // 2``.

    Raises:
        ConfigError: the file is missing, unreadable, not JSON, or not in this layout; the message
            names ``field`` and what was expected (the CLI exits with code 2).
    """
    path = Path(path)
    kind = path_kind(path)
    if kind != "a regular file":  # a FIFO or /dev/zero would be read without end
        raise _bad(field, path, f"{kind}, not a regular file")
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise _bad(field, path, f"{path.stat().st_size >> 20} MiB, more than the {MAX_JSON_BYTES >> 20} MiB read")
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(field, path, f"cannot read the file ({type(exc).__name__})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad(field, path, f"not valid JSON (line {exc.lineno})") from None
    if isinstance(data, dict):
        entries: Sequence[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
    elif isinstance(data, list):
        entries = [(f"entry {i}", v) for i, v in enumerate(data)]
    else:
        raise _bad(field, path, "top level is neither a dict nor a list")
    out: list[Example] = []
    for key, entry in entries:
        if not isinstance(entry, dict):
            raise _bad(field, path, f"{echo(key)} is not an object")
        if all(k in entry for k in _RECORD_KEYS):
            out.append(_record(entry, echo(key), field, path))
            continue
        shots = sorted((int(m.group(1)), k) for k in entry if (m := _IN_CONTEXT.match(k)))
        names = [k for _, k in shots] + (["test_example"] if "test_example" in entry else [])
        if not names:
            raise _bad(field, path, f"{echo(key)} has no test_example or in_context_example records")
        out.extend(_record(entry[k], f"{echo(key)}.{k}", field, path) for k in names)
    if not out:
        raise _bad(field, path, "no examples in the file")
    return out
