"""A local Hugging Face checkpoint as the measured model of ``topics-real`` (seed 004 §6.2, App. G.3).

The seed measures pretrained BERT-like models "downloaded from Huggingface"; tdlab never downloads: the user
names a **local folder** (``--set model.checkpoint=DIR``) holding a model and its tokenizer, read with
``local_files_only=True``. Nothing in the folder is executed (:func:`check_checkpoint`): a config naming
custom code (``auto_map``) is refused, ``trust_remote_code=False`` is passed (transformers never offers
to run it), and only safetensors weights are loaded (a ``pytorch_model.bin`` is a pickle). ``transformers`` (extra ``hf``) is imported only here, lazily.

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

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdlab.config import ConfigError, echo, one_line

__all__ = ["HFEncoder", "transformers_module", "check_checkpoint"]

HINT = "install the extra: pip install 'tdlab[hf]' (transformers)"


def transformers_module() -> Any:
    """``transformers``, or a :class:`ConfigError` naming the package and how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"model.checkpoint: reading a Hugging Face checkpoint needs transformers; {HINT}") from None
    return transformers


_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")


def check_checkpoint(path: str | Path, weights: bool = True) -> Path:
    """The folder ``path`` as a checkpoint tdlab may read: a folder, whose JSON configs name no custom
    code (``auto_map``: classes shipped as Python files in the folder, which transformers would run)
    and, when ``weights``, that holds safetensors weights (a ``pytorch_model.bin`` is a pickle: never
    loaded).

    Raises:
        ConfigError: one line naming ``model.checkpoint`` and what is allowed.
    """
    p = Path(path).expanduser()
    where = f"model.checkpoint: {echo(str(path))}"
    if not p.is_dir():
        what = "not a folder" if p.exists() else "no such folder"
        raise ConfigError(f"{where}: {what} (a local Hugging Face checkpoint folder; tdlab never downloads)")
    for name in _CODE_FILES:
        f = p / name
        if not f.is_file():
            continue
        try:
            doc = json.loads(f.read_bytes()[: 16 << 20])
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{where}: {name} is not readable JSON ({type(exc).__name__})") from None
        if isinstance(doc, dict) and ("auto_map" in doc or "custom_pipelines" in doc):
            raise ConfigError(f"{where}: {name} names custom code (auto_map), which tdlab never runs; give a "
                              f"checkpoint of a model class transformers ships (BERT, RoBERTa, ...)")
    if weights and not any(p.glob("*.safetensors")):
        pickled = [n for n in _PICKLED_WEIGHTS if (p / n).exists()]
        if pickled:
            raise ConfigError(f"{where}: holds {pickled[0]} and no model.safetensors; tdlab never loads pickled "
                              f"weights (loading a pickle can run code): save the model with safetensors "
                              f"(model.save_pretrained(DIR, safe_serialization=True))")
    return p


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
        p = check_checkpoint(path, weights=not random_init)
        # Never code from the folder (trust_remote_code=False: no custom classes, no prompt offering them),
        # never pickled weights (use_safetensors=True: a pytorch_model.bin is not unpickled).
        local = {"local_files_only": True, "trust_remote_code": False}
        try:
            self.tokenizer = tf.AutoTokenizer.from_pretrained(str(p), **local)
            if random_init:
                config = tf.AutoConfig.from_pretrained(str(p), **local)
                with torch.random.fork_rng():
                    torch.manual_seed(int(seed) & 0x7FFFFFFFFFFFFFFF)
                    self.model = tf.AutoModel.from_config(config, attn_implementation="eager", trust_remote_code=False)
            else:
                self.model = tf.AutoModel.from_pretrained(str(p), use_safetensors=True, attn_implementation="eager",
                                                          **local)
        except Exception as exc:  # transformers raises many types for a folder that is not a checkpoint
            raise ConfigError(f"model.checkpoint: {echo(str(path))} is not a loadable local model + tokenizer "
                              f"({type(exc).__name__}: {echo(one_line(str(exc)))})") from None
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
