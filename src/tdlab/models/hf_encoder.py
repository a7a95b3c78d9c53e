"""A local Hugging Face checkpoint as the measured model of ``topics-real`` (seed 004 §6.2, App. G.3).

The seed measures pretrained BERT-like models "downloaded from Huggingface"; tdlab never downloads: the user
names a **local folder** (``--set model.checkpoint=DIR``) holding a model and its tokenizer, read with
``local_files_only=True``. ``transformers`` (extra ``hf``) is imported only here, lazily.

The analysis is word-level (one position = one corpus word). A corpus word whose tokenizer splits it into
several pieces (or maps it to the tokenizer's unknown token) has no input embedding of its own: it is
**skipped** -- left out of every word pair -- and counted (:attr:`HFEncoder.skipped`). Attention is read on
the piece sequence of a window (``[CLS] pieces [SEP]`` when the tokenizer has them) and restricted to the
positions of the first piece of every word, so it is again a (words x words) matrix; skipped words' positions
are still in the text, just in no pair. The control (``random_init=True``) is the same architecture built from
the checkpoint's config with fresh weights (the seed's "randomly initialized" rows), from ``seed``.

The object quacks like a one-member ensemble for :func:`tdlab.experiments.topics_real.measure`:
:meth:`word_embeddings` ``(1, n, d)`` and :meth:`window_attention` ``(1, B, L, H, T, T)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdlab.config import ConfigError, echo

__all__ = ["HFEncoder", "transformers_module"]

HINT = "install the extra: pip install 'tdlab[hf]' (transformers)"


def transformers_module() -> Any:
    """``transformers``, or a :class:`ConfigError` naming the package and how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"model.checkpoint: reading a Hugging Face checkpoint needs transformers; {HINT}") from None
    return transformers


class HFEncoder:
    """A local checkpoint's input embeddings and attentions, per corpus word.

    Args:
        path: a local folder with the model (``config.json`` + weights) and its tokenizer.
        vocab: the corpus words; word ``i`` is model id ``i + offset`` in the windows given to
            :meth:`window_attention` (ids outside ``[offset, offset + n)`` are the tokenizer's unknown token).
        offset: the caller's special tokens below the words.
        random_init: the same architecture with fresh weights (the control) instead of the checkpoint's.
        seed: the fresh weights' seed.
    Raises:
        ConfigError: transformers missing, the folder missing, or not a loadable model + tokenizer.
    """

    def __init__(self, path: str | Path, vocab: list[str], offset: int = 0, random_init: bool = False,
                 seed: int = 0) -> None:
        tf = transformers_module()
        p = Path(path).expanduser()
        if not p.is_dir():
            raise ConfigError(f"model.checkpoint: no such folder {echo(str(path))} (a local Hugging Face checkpoint "
                              "folder; tdlab never downloads)")
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(str(p), local_files_only=True)
            if random_init:
                config = tf.AutoConfig.from_pretrained(str(p), local_files_only=True)
                with torch.random.fork_rng():
                    torch.manual_seed(int(seed) & 0x7FFFFFFFFFFFFFFF)
                    self.model = tf.AutoModel.from_config(config, attn_implementation="eager")
            else:
                self.model = tf.AutoModel.from_pretrained(str(p), local_files_only=True, attn_implementation="eager")
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"model.checkpoint: {echo(str(path))} is not a loadable local model + tokenizer "
                              f"({type(exc).__name__}: {echo(str(exc))})") from None
        self.model.eval()
        self.vocab, self.offset = list(vocab), int(offset)
        tok = self.tokenizer
        unk = tok.unk_token_id
        self.pieces = [tok(w, add_special_tokens=False)["input_ids"] for w in self.vocab]
        single = np.array([len(p) == 1 and p[0] != unk for p in self.pieces])
        self.piece = np.array([p[0] if ok else -1 for p, ok in zip(self.pieces, single)], dtype=np.int64)
        self.excluded = frozenset(np.flatnonzero(~single).tolist())  # corpus ids in no pair
        self.skipped = int((~single).sum())
        self._unk = [unk] if unk is not None else []
        self._cls = [tok.cls_token_id] if tok.cls_token_id is not None else ([tok.bos_token_id] if tok.bos_token_id is not None else [])
        self._sep = [tok.sep_token_id] if tok.sep_token_id is not None else ([tok.eos_token_id] if tok.eos_token_id is not None else [])

    @property
    def members(self) -> int:
        return 1

    @torch.no_grad()
    def word_embeddings(self) -> torch.Tensor:
        """``(1, n, d)`` float64 input-embedding rows of the corpus words (the token table); NaN rows for
        skipped words."""
        table = self.model.get_input_embeddings().weight.detach().to(torch.float64)
        out = torch.full((len(self.vocab), table.shape[1]), float("nan"), dtype=torch.float64)
        ok = torch.as_tensor(self.piece >= 0)
        out[ok] = table[torch.as_tensor(self.piece[self.piece >= 0])]
        return out.unsqueeze(0)

    @torch.no_grad()
    def window_attention(self, windows: torch.Tensor) -> torch.Tensor:
        """``(1, B, L, H, T, T)`` attention of every layer and head among the first pieces of the ``T`` words of
        each window (``windows (B, T)`` model ids), the window tokenised word by word."""
        out = []
        n = len(self.vocab)
        for row in windows.tolist():
            ids, first = list(self._cls), []
            for i in row:
                w = i - self.offset
                first.append(len(ids))
                ids.extend(self.pieces[w] if 0 <= w < n else self._unk)
            ids.extend(self._sep)
            res = self.model(input_ids=torch.tensor([ids]), output_attentions=True)
            att = torch.stack([a[0] for a in res.attentions])  # (L, H, T', T')
            f = torch.as_tensor(first)
            out.append(att[:, :, f][:, :, :, f].float())
        return torch.stack(out).unsqueeze(0)
