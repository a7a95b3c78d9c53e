"""An independent checker of PrOntoQA-style examples: it reads text only.

It does not import :mod:`tdlab.tasks.prontoqa`; it knows only the English grammar of the examples:

* rules: "Every X is a Y." / "Each X is an Y." / "Xs are Ys." (is-a), "Every X is (not) ADJ." /
  "Each X is (not) ADJ." / "Xs are (not) ADJ." (property), where a plural noun is its singular + "es";
* statements about an individual: "Max is a X." / "Max is (not) ADJ.";
* the query "True or false: <statement>"; the layout "Q: {context} {query}\\nA: {chain} {answer}".

"Xs are Ws." is an is-a rule when W's singular (W minus "es") is a concept of the example (a noun
seen after "Every"/"Each", "is a"/"is an", or as a plural subject), a property otherwise.

:func:`check_parts` returns the list of everything wrong with an example (empty: valid): every
chain step must follow by modus ponens from a context rule and the previous statement (the first
statement is the context's fact), the last statement must be the query's statement or its negation,
and the answer must match both the chain and an independent forward-chaining of the context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LAYOUT = re.compile(r"^Q: (?P<q>.*) (?P<query>True or false: .*)\nA: (?P<chain>.*) (?P<answer>True|False)$", re.S)
_EVERY_ISA = re.compile(r"^(Every|Each) ([a-z]+) is (a|an) ([a-z]+)\.$")
_EVERY_PROP = re.compile(r"^(Every|Each) ([a-z]+) is (not )?([a-z]+)\.$")
_PLURAL = re.compile(r"^([A-Z][a-z]+) are (not )?([a-z]+)\.$")
_MEMBER = re.compile(r"^([A-Z][a-z]+) is (a|an) ([a-z]+)\.$")
_HAS = re.compile(r"^([A-Z][a-z]+) is (not )?([a-z]+)\.$")


@dataclass(frozen=True)
class Rule:
    subject: str  # a concept (singular)
    kind: str  # "isa" or "prop"
    obj: str  # parent concept or adjective
    negated: bool = False


@dataclass(frozen=True)
class Statement:
    who: str
    kind: str  # "isa" or "prop"
    obj: str
    negated: bool = False


def sentences(text: str) -> list[str]:
    """Sentences of ``text`` (each ends with a full stop)."""
    parts = [s for s in re.split(r"(?<=\.)\s+", text.strip()) if s]
    return parts


def _singular(plural: str) -> str | None:
    return plural[:-2] if plural.endswith("es") and len(plural) > 2 else None


def _article_ok(article: str, noun: str) -> bool:
    return article == ("an" if noun[0] in "aeiou" else "a")


def concepts_of(texts: list[str]) -> set[str]:
    """Concept nouns (singular) named anywhere in the sentences ``texts``."""
    out: set[str] = set()
    for s in texts:
        if m := _EVERY_ISA.match(s):
            out.update((m.group(2), m.group(4)))
        elif m := _EVERY_PROP.match(s):
            out.add(m.group(2))
        elif m := _PLURAL.match(s):
            if (sing := _singular(m.group(1).lower())) is not None:
                out.add(sing)
        elif m := _MEMBER.match(s):
            out.add(m.group(3))
    return out


def parse_rule(s: str, concepts: set[str]) -> Rule | None:
    """The rule a sentence states, or None if it is not a rule."""
    if m := _EVERY_ISA.match(s):
        return Rule(m.group(2), "isa", m.group(4)) if _article_ok(m.group(3), m.group(4)) else None
    if m := _EVERY_PROP.match(s):
        if m.group(4) in concepts:  # "Every X is Y." with Y a noun is ungrammatical here
            return None
        return Rule(m.group(2), "prop", m.group(4), bool(m.group(3)))
    if m := _PLURAL.match(s):
        subj = _singular(m.group(1).lower())
        if subj is None:
            return None
        obj = m.group(3)
        if not m.group(2) and (parent := _singular(obj)) is not None and parent in concepts:
            return Rule(subj, "isa", parent)
        if obj in concepts or (_singular(obj) in concepts):
            return None
        return Rule(subj, "prop", obj, bool(m.group(2)))
    return None


def parse_statement(s: str, concepts: set[str]) -> Statement | None:
    """The statement about an individual a sentence makes, or None."""
    if s.startswith(("Every ", "Each ")):
        return None
    if m := _MEMBER.match(s):
        return Statement(m.group(1), "isa", m.group(3)) if _article_ok(m.group(2), m.group(3)) else None
    if m := _HAS.match(s):
        if m.group(3) in concepts:
            return None
        return Statement(m.group(1), "prop", m.group(3), bool(m.group(2)))
    return None


def split_text(text: str) -> tuple[str, str, list[str], str] | None:
    """``(context, query, chain sentences, answer)`` of a training string, or None if the layout is wrong."""
    m = _LAYOUT.match(text)
    if m is None:
        return None
    return m.group("q"), m.group("query"), sentences(m.group("chain")), m.group("answer")


def check_text(text: str) -> list[str]:
    """Everything wrong with a training string (empty list: a valid example)."""
    parts = split_text(text)
    if parts is None:
        return ["layout is not 'Q: {context} True or false: ...\\nA: {chain} {True|False}'"]
    return check_parts(*parts)


def check_parts(context: str, query: str, chain: list[str] | tuple[str, ...], answer: str) -> list[str]:
    """Everything wrong with an example given as its parts (empty list: valid)."""
    errors: list[str] = []
    ctx = sentences(context)
    chain = [c.strip() for c in chain]
    if not query.startswith("True or false: "):
        return [f"query {query!r} does not start with 'True or false: '"]
    q_sentence = query[len("True or false: ") :]
    concepts = concepts_of(ctx + chain + [q_sentence])

    # Context: rules, then exactly one fact (the last sentence).
    rules: set[Rule] = set()
    facts: list[Statement] = []
    for s in ctx:
        if (r := parse_rule(s, concepts)) is not None:
            rules.add(r)
        elif (st := parse_statement(s, concepts)) is not None and st.kind == "isa":
            facts.append(st)
        else:
            errors.append(f"context sentence {s!r} is neither a rule nor a fact")
    if len(facts) != 1:
        return [*errors, f"context holds {len(facts)} facts, expected one"]
    fact = facts[0]
    q = parse_statement(q_sentence, concepts)
    if q is None or q.kind != "prop" or q.who != fact.who:
        return [*errors, f"query {query!r} is not a property statement about {fact.who}"]
    if answer not in ("True", "False"):
        return [*errors, f"answer {answer!r} is not True/False"]

    # Independent decision by forward chaining over the context (is-a closure, then properties).
    classes = {fact.obj}
    frontier = [fact.obj]
    while frontier:
        x = frontier.pop()
        for r in rules:
            if r.kind == "isa" and r.subject == x and r.obj not in classes:
                classes.add(r.obj)
                frontier.append(r.obj)
    props = {(r.obj, r.negated) for r in rules if r.kind == "prop" and r.subject in classes}
    if any((adj, not neg) in props for adj, neg in props):
        errors.append("context is inconsistent: a property and its negation both follow")
    if (q.obj, q.negated) in props:
        decided = "True"
    elif (q.obj, not q.negated) in props:
        decided = "False"
    else:
        decided = None
        errors.append("the query is not decided by the context")
    if decided is not None and decided != answer:
        errors.append(f"answer {answer} but the context entails {decided}")

    # Chain: fact, then (rule, derived statement) pairs; each step modus ponens.
    if len(chain) < 3 or len(chain) % 2 != 1:
        return [*errors, f"chain has {len(chain)} sentences, expected 1 + 2*hops (hops >= 1)"]
    first = parse_statement(chain[0], concepts)
    if first != fact:
        errors.append(f"chain starts with {chain[0]!r}, not the context's fact")
    current = fact
    for i in range(1, len(chain), 2):
        r = parse_rule(chain[i], concepts)
        st = parse_statement(chain[i + 1], concepts)
        step = (i + 1) // 2
        if r is None:
            errors.append(f"step {step}: {chain[i]!r} is not a rule")
            break
        if r not in rules:
            errors.append(f"step {step}: rule {chain[i]!r} is not in the context")
        if current.kind != "isa" or r.subject != current.obj:
            errors.append(f"step {step}: rule {chain[i]!r} does not apply to the previous statement")
        if st is None or st != Statement(fact.who, r.kind, r.obj, r.negated):
            errors.append(f"step {step}: {chain[i + 1]!r} does not follow from {chain[i]!r}")
            break
        current = st
    else:  # every step checked and followed: judge the conclusion
        return errors + _conclusion_errors(current, q, chain[-1], answer)
    return errors


def _conclusion_errors(last: Statement, q: Statement, sentence: str, answer: str) -> list[str]:
    """What is wrong with a (step-wise valid) chain's last statement given the query and answer."""
    errors: list[str] = []
    if last.kind != "prop":
        return ["the chain does not end with a property statement"]
    if (last.obj, last.negated) == (q.obj, q.negated):
        from_chain = "True"
    elif last.obj == q.obj:
        from_chain = "False"
    else:
        return [f"the chain's last statement {sentence!r} is neither the query's statement nor its negation"]
    if from_chain != answer:
        errors.append(f"answer {answer} but the chain concludes {from_chain}")
    return errors


def hops_of(chain: list[str] | tuple[str, ...]) -> int:
    """Modus-ponens steps of a chain: ``(len - 1) // 2``."""
    return (len(chain) - 1) // 2
