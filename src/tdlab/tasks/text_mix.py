"""The mixed text corpus of seed 001 Figs. 1 and 6 (§1, §4.4, A.3): texts of two sources, PrOntoQA
(:mod:`tdlab.tasks.prontoqa`) and stories (:mod:`tdlab.tasks.stories`), tokenised as one corpus (GPT-2's
byte-level BPE, or a byte-level BPE trained on all the texts: :mod:`tdlab.tasks.bpe`), ``<|endoftext|>``
appended, cut to a sequence length and right-padded to the longest kept sequence, with a mask that is 0 on
the padding and each sequence's source; the corpus's cache in a folder (safetensors and JSON), and the
token statistics Fig. 6 reads: how often each id occurs in each source's kept tokens, and each source's most
frequent ids that never occur in the other, and Fig. 6's two token sets cut to one size.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tdlab.config import ConfigError
from tdlab.safeio import atomic_write
from tdlab.seeding import derive_seed
from tdlab.tasks.bpe import Tokenizer, gpt2_tokenizer, load_tokenizer_json, train_local_bpe
from tdlab.tasks.prontoqa import ProntoQAConfig, generate, read_json
from tdlab.tasks.stories import read_stories, standin_stories

__all__ = [
    "SOURCES",
    "MixedCorpus",
    "balanced_exclusive_tokens",
    "build_corpus",
    "exclusive_tokens",
    "source_texts",
    "token_counts",
]

SOURCES: tuple[str, str] = ("prontoqa", "stories")  # source 0, source 1; also the eval split names


class MixedCorpus:
    """The tokenised mix: ``tokens (N, L)`` int64 (right-padded with ``<|endoftext|>``), ``mask (N, L)``
    float32 (1 on kept tokens, ``<|endoftext|>`` included; 0 on padding), ``source (N,)`` int64 (index
    into :data:`SOURCES`), and what was cut (``truncated (N,)`` bool)."""

    def __init__(
        self,
        tokens: torch.Tensor,
        mask: torch.Tensor,
        source: torch.Tensor,
        truncated: torch.Tensor,
        tokenizer: Tokenizer,
        meta: dict,
    ) -> None:
        self.tokens, self.mask, self.source, self.truncated = tokens, mask, source, truncated
        self.tokenizer, self.meta = tokenizer, meta

    def of(self, src: str) -> torch.Tensor:
        """Row indices of one source."""
        return torch.nonzero(self.source == SOURCES.index(src)).squeeze(1)

    # ---- the run directory's cache -------------------------------------------------------------
    def save(self, folder: Path) -> None:
        from safetensors.torch import save

        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(
            folder / "corpus.safetensors",
            save(
                {
                    "tokens": self.tokens.contiguous(),
                    "mask": self.mask.contiguous(),
                    "source": self.source.contiguous(),
                    "truncated": self.truncated.to(torch.int8).contiguous(),
                }
            ),
        )
        atomic_write(folder / "tokenizer.json", self.tokenizer.to_json())
        atomic_write(folder / "corpus.json", json.dumps(self.meta, indent=1))

    @classmethod
    def load(cls, folder: Path) -> MixedCorpus:
        from safetensors.torch import load

        t = load((folder / "corpus.safetensors").read_bytes())
        meta = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
        tok = load_tokenizer_json(meta["tokenizer"], (folder / "tokenizer.json").read_text(encoding="utf-8"))
        return cls(t["tokens"], t["mask"], t["source"], t["truncated"].bool(), tok, meta)

    @staticmethod
    def cached(folder: Path) -> bool:
        return all((folder / f).is_file() for f in ("corpus.safetensors", "tokenizer.json", "corpus.json"))

    def splits(self, n_eval: int, device: str | torch.device = "cpu") -> dict[str, dict[str, torch.Tensor]]:
        """The fixed data set of the corpus on ``device``: ``train``, every sequence, and one evaluation split
        per source (named as in :data:`SOURCES`), its first ``n_eval`` sequences; ``{tokens, mask}`` each."""
        out = {"train": {"tokens": self.tokens, "mask": self.mask}}
        for s in SOURCES:
            idx = self.of(s)[:n_eval]
            out[s] = {"tokens": self.tokens[idx], "mask": self.mask[idx]}
        return {k: {n: t.to(device) for n, t in v.items()} for k, v in out.items()}


def source_texts(
    seed: int,
    n_prontoqa: int,
    n_stories: int,
    prontoqa_task: ProntoQAConfig | None = None,
    prontoqa: str | None = None,
    stories: str | None = None,
) -> dict[str, list[str]]:
    """The raw texts of each source: ``n_prontoqa`` PrOntoQA texts (generated from ``seed`` with
    ``prontoqa_task``, or the first of the JSON file ``prontoqa``) and ``n_stories`` stories (the TinyStories
    text file ``stories``, or stand-in stories from ``seed``)."""
    if prontoqa is not None:
        pq = [e.text() for e in read_json(prontoqa)[:n_prontoqa]]
    else:
        pq = [e.text() for e in generate(n_prontoqa, derive_seed(seed, "prontoqa"), prontoqa_task)]
    if stories is not None:
        st = read_stories(stories, n_stories)
    else:
        st = standin_stories(n_stories, derive_seed(seed, "stories"))
    return {"prontoqa": pq, "stories": st}


def build_corpus(
    texts: dict[str, list[str]], tokenizer: str, vocab: int, seq_len: int, min_frequency: int = 2
) -> MixedCorpus:
    """Tokenise ``texts`` (``{source: [text]}``) into a :class:`MixedCorpus`.

    Args:
        tokenizer: ``"gpt2"`` or ``"local"`` (a byte-level BPE of ``vocab`` ids trained on all the texts).
        seq_len: tokens kept per sequence (``<|endoftext|>`` appended first, then cut); padded to the longest.
    """
    all_texts = [t for s in SOURCES for t in texts[s]]
    tok = gpt2_tokenizer() if tokenizer == "gpt2" else train_local_bpe(all_texts, vocab, min_frequency)
    if tok.vocab_size > vocab:
        raise ConfigError(f"model.vocab={vocab} is smaller than the tokenizer's {tok.vocab_size} ids")
    eos = tok.eos_id
    ids = [[*s, eos] for s in tok.encode_batch(all_texts)]
    lengths = [len(s) for s in ids]
    L = min(seq_len, max(lengths))
    tokens = torch.full((len(ids), L), eos, dtype=torch.long)
    mask = torch.zeros(len(ids), L, dtype=torch.float32)
    for i, s in enumerate(ids):
        s = s[:L]
        tokens[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1.0
    source = torch.tensor([k for k, s in enumerate(SOURCES) for _ in texts[s]], dtype=torch.long)
    truncated = torch.tensor([n > L for n in lengths])
    meta = {
        "tokenizer": tok.name,
        "tokenizer_vocab": tok.vocab_size,
        "eos_id": eos,
        "seq_len": L,
        "mean_tokens": {
            s: float(np.mean([n for n, k in zip(lengths, source.tolist(), strict=True) if SOURCES[k] == s]))
            for s in SOURCES
        },
        "truncated_share": {s: float(truncated[source == k].float().mean()) for k, s in enumerate(SOURCES)},
    }
    return MixedCorpus(tokens, mask, source, truncated, tok, meta)


# ------------------------------------------------------------------------------------------------
# Token statistics (Fig. 6)


def token_counts(
    tokens: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, vocab: int, ignore: Sequence[int] = ()
) -> dict[str, np.ndarray]:
    """How often each token id occurs among the kept tokens of each source: ``{source: (vocab,) int64}``
    (``ignore``: ids never counted, e.g. ``<|endoftext|>``)."""
    out = {}
    for k, s in enumerate(SOURCES):
        rows = source == k
        kept = tokens[rows][mask[rows] > 0]
        c = torch.bincount(kept, minlength=vocab).numpy().astype(np.int64)
        c[list(ignore)] = 0
        out[s] = c
    return out


def exclusive_tokens(counts: np.ndarray, other: np.ndarray, top: int) -> list[int]:
    """The ``top`` most frequent ids of ``counts`` that never occur in ``other`` (ties: smaller id first)."""
    ids = np.nonzero((counts > 0) & (other == 0))[0]
    order = np.lexsort((ids, -counts[ids]))  # primary key: count descending, then id
    return ids[order][:top].tolist()


def balanced_exclusive_tokens(corpus: MixedCorpus, vocab: int, top: int) -> dict[str, list[int]]:
    """Fig. 6's token sets: each source's most frequent exclusive tokens (:func:`exclusive_tokens` of its
    :func:`token_counts` against the other source's, ``<|endoftext|>`` not counted), both cut to the same size
    ``min(top, available in either)`` so the two means are over equally many pairs: ``{source: ids}``."""
    counts = token_counts(corpus.tokens, corpus.mask, corpus.source, vocab, ignore=[corpus.meta["eos_id"]])
    ex = {
        s: exclusive_tokens(counts[s], counts[o], top) for s, o in ((SOURCES[0], SOURCES[1]), (SOURCES[1], SOURCES[0]))
    }
    k = min(len(v) for v in ex.values())
    return {s: v[:k] for s, v in ex.items()}
