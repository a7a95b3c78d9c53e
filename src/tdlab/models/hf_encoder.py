"""A local Hugging Face checkpoint as the measured model of ``topics-real`` (seed 004 §6.2, Tables 1, 5, App. G.3).

The seed measures pretrained BERT, ALBERT, BART, ELECTRA and RoBERTa "downloaded from Huggingface"; tdlab never
downloads: the user names a **local folder** (``--set model.checkpoint=DIR``) holding a model and its tokenizer,
read with ``local_files_only=True``. Nothing in the folder is executed (:func:`check_checkpoint`): a config
naming custom code (``auto_map``) is refused, ``trust_remote_code=False`` is passed (transformers never offers
to run it), and the weights are read by tdlab itself from the safetensors files it checked
(:func:`weight_files`: ``model.safetensors``, or the files a ``model.safetensors.index.json`` names, each a
``.safetensors`` file of the folder) and handed to the model built from the config -- transformers is never
given the folder to find weights in, where it could pick a pickle (``pytorch_model.bin``). A config whose
sizes cannot fit in memory is refused before anything is built (:func:`check_size`). Transformers' own load
messages are silenced around the load (:func:`_quiet`). ``transformers`` (extra ``hf``) is imported only
here, lazily.

**Architectures** (:data:`READERS`, keyed by ``config.json``'s ``model_type``; any other is a
:class:`ConfigError` naming these). Each :class:`Reader` says, in one place, what its architecture's "input
embedding" and "attention" are:

* the embedding is the **token table** -- the per-token parameters of the embedding layer, one row per token,
  the matrix §3.3 calls W^E and weight-ties to the prediction head (the seed: "embedding layer *parameters*",
  §7). ALBERT factorises it (a V x ``embedding_size`` table, then ``embedding_hidden_mapping_in`` to the hidden
  size) and ELECTRA-small projects it (``embeddings_project``): the table is read, not the projection, which is
  one linear map shared by every token and not tied to the output layer (both tie their MLM decoders to the
  table). BART's is the encoder's ``embed_tokens`` (tied to ``shared``; its ``embed_scale`` is a constant factor
  the cosine and dot *ratios* do not see);
* the attention is the self-attention of every layer and head of the **encoder**, run eagerly
  (``attn_implementation="eager"``: transformers 5's fused kernels return no weights); BART is
  encoder-decoder and only its encoder (``get_encoder()``) reads the text, so only that is run;
* a word is tokenised **as it appears mid-text**: byte-level BPE (RoBERTa, BART) spells a word after a space
  with a leading ``Ġ`` (``" apple"`` -> ``Ġapple``, while ``"apple"`` -> ``a p p l e`` or another token), so its
  words are tokenised with the leading space; WordPiece (BERT, ELECTRA) and SentencePiece (ALBERT) give
  the same pieces either way;
* a window is the sequence the model was trained on: ``[CLS] pieces [SEP]`` (BERT, ALBERT, ELECTRA) or
  ``<s> pieces </s>`` (RoBERTa, BART).

The analysis is word-level (one position = one corpus word). A corpus word whose tokenizer splits it into
several pieces (or maps it to the tokenizer's unknown token) has no input embedding of its own: it is
**skipped** -- left out of every word pair -- and counted (:attr:`HFEncoder.skipped`). Attention is read on
the piece sequence of a window and restricted to the positions of the first piece of every word, so it is again
a (words x words) matrix of the model's own weights (not renormalised: a row keeps the mass it gives to the
special tokens and later pieces, as G.3's raw weights do); skipped words' positions are still in the text, just
in no pair. The control (``random_init=True``) is the same architecture built from the checkpoint's config with
fresh weights (the seed's "randomly initialized" rows), from ``seed``.

The object quacks like a one-member ensemble for :func:`tdlab.experiments.paper004_topics.common.real_text.measure`:
:meth:`word_embeddings` ``(1, n, d)`` (``d`` the table's width: ALBERT's ``embedding_size``) and
:meth:`window_attention` ``(1, B, L, H, T, T)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdlab.config import ConfigError, echo, one_line
from tdlab.machine import GB, machine_bytes
from tdlab.models.ensemble import EnsembleModel
from tdlab.models.hooks import HookPoint
from tdlab.safeio import path_kind

__all__ = [
    "READERS",
    "HFEncoder",
    "Reader",
    "check_checkpoint",
    "check_size",
    "reader_for",
    "transformers_module",
    "weight_files",
]

HINT = "install the extra: pip install 'tdlab[hf]' (transformers)"


def transformers_module() -> Any:
    """``transformers``, or a :class:`ConfigError` naming the package and how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"model.checkpoint: reading a Hugging Face checkpoint needs transformers; {HINT}") from None
    return transformers


# ----------------------------------------------------------------------------------------------
# What is read, per architecture


def _token_table(model: Any) -> torch.nn.Embedding:
    """The embedding layer's token table (``embeddings.word_embeddings``; ALBERT's and ELECTRA-small's before
    their projection to the hidden size)."""
    return model.get_input_embeddings()


def _encoder_token_table(model: Any) -> torch.nn.Embedding:
    """BART: the encoder's token table ``encoder.embed_tokens`` (tied to ``shared``)."""
    return model.get_encoder().embed_tokens


def _self_attention(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """An encoder-only model's self-attention: one ``(1, H, T, T)`` per layer for ``ids (1, T)``."""
    return model(input_ids=ids, output_attentions=True).attentions


def _encoder_self_attention(model: Any, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """BART: the encoder's self-attention, one ``(1, H, T, T)`` per encoder layer (the decoder is not run)."""
    return model.get_encoder()(input_ids=ids, output_attentions=True).attentions


def _absolute_positions(config: Any) -> int:
    """Tokens a window may hold: one learned position each (BART's offset of 2 is inside its table)."""
    return int(config.max_position_embeddings)


def _positions_after_padding(config: Any) -> int:
    """RoBERTa: position ids start after the padding id (``pad_token_id + 1``), 514 - 2 = 512 tokens."""
    return int(config.max_position_embeddings) - int(config.pad_token_id) - 1


@dataclass(frozen=True)
class Reader:
    """How one architecture's checkpoint is read: its token table, its self-attention, the tokens around a
    window, how a word is spelt mid-text, and how many tokens fit (module docstring)."""

    name: str  # as the seed writes it
    embedding: Callable[[Any], torch.nn.Embedding]  # the token table the cosine / dot measures read
    attention: Callable[[Any, torch.Tensor], tuple[torch.Tensor, ...]]  # every layer's (1, H, T, T)
    specials: tuple[str, str]  # the tokenizer's attributes naming the tokens before and after a window
    word_prefix: str  # prepended to a word to tokenise it as it appears mid-text
    positions: Callable[[Any], int]  # tokens a window may hold, from the config
    table: str  # what `embedding` reads, in words (reports, docs)


_CLS_SEP, _S = ("cls_token", "sep_token"), ("bos_token", "eos_token")
READERS: dict[str, Reader] = {  # config.json's model_type -> reader
    "bert": Reader(
        "BERT",
        _token_table,
        _self_attention,
        _CLS_SEP,
        "",
        _absolute_positions,
        "the token table embeddings.word_embeddings (vocab x hidden_size)",
    ),
    "roberta": Reader(
        "RoBERTa",
        _token_table,
        _self_attention,
        _S,
        " ",
        _positions_after_padding,
        "the token table embeddings.word_embeddings (vocab x hidden_size)",
    ),
    "albert": Reader(
        "ALBERT",
        _token_table,
        _self_attention,
        _CLS_SEP,
        "",
        _absolute_positions,
        "the factorised token table embeddings.word_embeddings (vocab x embedding_size), before "
        "embedding_hidden_mapping_in",
    ),
    "electra": Reader(
        "ELECTRA",
        _token_table,
        _self_attention,
        _CLS_SEP,
        "",
        _absolute_positions,
        "the token table embeddings.word_embeddings (vocab x embedding_size), before "
        "embeddings_project when embedding_size != hidden_size",
    ),
    "bart": Reader(
        "BART",
        _encoder_token_table,
        _encoder_self_attention,
        _S,
        " ",
        _absolute_positions,
        "the encoder's token table encoder.embed_tokens = shared (vocab x d_model), before embed_scale",
    ),
}


def reader_for(config: Any, path: str | Path = "") -> Reader:
    """The :class:`Reader` of a checkpoint's config (its ``model_type``).

    Raises:
        ConfigError: an architecture outside :data:`READERS`, naming the supported ones.
    """
    return _reader(getattr(config, "model_type", None), path)


def _reader(kind: Any, path: str | Path) -> Reader:
    """The reader of ``model_type`` ``kind``, or the one-line refusal naming the supported ones."""
    if not isinstance(kind, str) or kind not in READERS:
        names = ", ".join(f"{k} ({r.name})" for k, r in READERS.items())
        raise ConfigError(
            f"model.checkpoint: {echo(str(path))} is a {echo(kind)} model; tdlab reads the seed's "
            f"architectures only: {names}"
        )
    return READERS[kind]


# ----------------------------------------------------------------------------------------------
# The folder

_CODE_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
_JSON_LIMIT = 16 << 20  # no config or weight index of a real checkpoint comes near this
# Python objects and tensor headers of one built layer besides its weights (a 16-wide BertLayer: ~130 KB,
# measured with transformers 5): a config of a million tiny layers needs its memory for these alone.
LAYER_OVERHEAD_BYTES = 128 << 10


def _regular(folder: Path, name: str, where: str) -> Path:
    """``folder/name`` when it is a regular file (a symlink to one counts: a Hugging Face cache snapshot is
    symlinks to its blobs); a folder, device, FIFO or broken link is refused in one line."""
    kind = path_kind(folder / name)
    if kind != "a regular file":
        raise ConfigError(f"{where}: {name} is {kind}; a checkpoint's files are regular files")
    return folder / name


def _read_json(folder: Path, name: str, where: str) -> Any:
    """``folder/name`` parsed (:func:`_regular`, at most :data:`_JSON_LIMIT` bytes), or one line."""
    try:
        with open(_regular(folder, name, where), "rb") as f:
            data = f.read(_JSON_LIMIT + 1)
        if len(data) > _JSON_LIMIT:
            raise ValueError(f"more than {_JSON_LIMIT} bytes")
        return json.loads(data)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: {name} is not readable JSON ({type(exc).__name__})") from None


def _size(doc: dict[str, Any], *names: str) -> tuple[str, int] | None:
    """The first of ``names`` that ``config.json`` sets to a whole number, with its value."""
    for n in names:
        v = doc.get(n)
        if isinstance(v, int) and not isinstance(v, bool):
            return n, v
    return None


def check_size(doc: dict[str, Any], where: str, available: float | None = None) -> None:
    """Refuse a ``config.json`` whose model cannot be built in ``available`` bytes (default: this machine's
    memory), as :func:`tdlab.train.memory.check_memory` refuses a ``--set``: transformers would build it for
    as long as it is allowed. Counted: the float32 weights (token and position tables, every layer's
    attention and MLP; ALBERT builds ``num_hidden_groups`` x ``inner_group_num`` layers and runs them
    ``num_hidden_layers`` times), :data:`LAYER_OVERHEAD_BYTES` per built layer, and one window's attention
    maps at the longest window (every layer and head). A size that is missing or not a whole number is left
    to transformers (its default, or its own error).

    Raises:
        ConfigError: one line naming the field(s) of the largest term, their values and both sizes.
    """
    hidden = _size(doc, "hidden_size", "d_model")
    emb = _size(doc, "embedding_size") or hidden
    ffn = _size(doc, "intermediate_size", "encoder_ffn_dim")
    vocab = _size(doc, "vocab_size")
    positions = _size(doc, "max_position_embeddings")
    heads = _size(doc, "num_attention_heads", "encoder_attention_heads")
    runs = built = _size(doc, "num_hidden_layers")
    if runs is None:  # BART: both stacks are built, the encoder's is run
        enc, dec = _size(doc, "encoder_layers"), _size(doc, "decoder_layers")
        runs = built = enc
        if enc and dec:
            built = (f"{enc[0]} + {dec[0]}", enc[1] + dec[1])
    if doc.get("model_type") == "albert":
        groups, inner = _size(doc, "num_hidden_groups") or ("", 1), _size(doc, "inner_group_num") or ("", 1)
        built = (f"{groups[0] or 'num_hidden_groups'} x {inner[0] or 'inner_group_num'}", groups[1] * inner[1])

    def value(f: tuple[str, int] | None) -> int:
        return f[1] if f else 1

    def named(*fs: tuple[str, int] | None) -> str:
        return " × ".join(f"{f[0]} = {f[1]}" for f in fs if f)

    h = value(hidden)
    terms = [  # (bytes, the fields that make them)
        (4.0 * value(vocab) * value(emb), named(vocab, emb)),
        (4.0 * value(positions) * value(emb), named(positions, emb)),
        (value(built) * (4.0 * (4 * h * h + 2 * h * value(ffn)) + LAYER_OVERHEAD_BYTES), named(built, hidden, ffn)),
        (4.0 * value(runs) * value(heads) * value(positions) ** 2, named(runs, heads, positions) + "²"),
    ]
    need = sum(b for b, _ in terms)
    have = machine_bytes() if available is None else available
    if need > have:
        biggest = max(terms)[1]
        raise ConfigError(
            f"{where}: config.json's {biggest} makes a model of ~{need / GB:.3g} GB, more than this "
            f"machine's {have / GB:.3g} GB; the model is built from config.json before its weights are read: "
            f"give a checkpoint whose sizes fit"
        )


def weight_files(folder: Path, where: str) -> list[str]:
    """The safetensors files tdlab reads the weights from: ``model.safetensors``, or every file the
    ``weight_map`` of ``model.safetensors.index.json`` names, each a regular ``.safetensors`` file of
    ``folder`` (a name, no path; never a pickle such as ``pytorch_model.bin``), sorted.

    Raises:
        ConfigError: one line naming ``model.checkpoint``, the file or entry and what is allowed.
    """
    if os.path.lexists(folder / WEIGHTS_INDEX):
        index = _read_json(folder, WEIGHTS_INDEX, where)
        wmap = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wmap, dict) or not wmap:
            raise ConfigError(f"{where}: {WEIGHTS_INDEX} has no weight_map (tensor name -> .safetensors file)")
        names = set()
        for tensor, name in wmap.items():
            if not (
                isinstance(name, str)
                and name == Path(name).name
                and name.endswith(".safetensors")
                and not name.startswith(".")
            ):
                raise ConfigError(
                    f"{where}: {WEIGHTS_INDEX}'s weight_map maps {echo(tensor)} to {echo(name)}; allowed: "
                    f"the name of a .safetensors file in the folder (tdlab never loads pickled weights such "
                    f"as pytorch_model.bin, nor a file outside the folder)"
                )
            names.add(name)
    elif os.path.lexists(folder / WEIGHTS):
        names = {WEIGHTS}
    else:
        pickled = [n for n in _PICKLED_WEIGHTS if (folder / n).exists()]
        held = f"holds {pickled[0]} and no {WEIGHTS}" if pickled else f"holds no {WEIGHTS} (nor {WEIGHTS_INDEX})"
        raise ConfigError(
            f"{where}: {held}; tdlab loads safetensors weights only (loading a pickle can run code): save "
            f"the model with safetensors (model.save_pretrained(DIR, safe_serialization=True))"
        )
    for name in sorted(names):
        _regular(folder, name, where)
    return sorted(names)


def check_checkpoint(path: str | Path, weights: bool = True) -> Path:
    """The folder ``path`` as a checkpoint tdlab may read: a folder, whose JSON configs name no custom
    code (``auto_map``: classes shipped as Python files in the folder, which transformers would run)
    and, when ``weights``, that holds safetensors weights (a ``pytorch_model.bin`` is a pickle: never
    loaded).

    Raises:
        ConfigError: one line naming ``model.checkpoint`` and what is allowed.
    """
    p = Path(path).expanduser()
    where = _where(path)
    if not p.is_dir():
        what = "not a folder" if p.exists() else "no such folder"
        raise ConfigError(f"{where}: {what} (a local Hugging Face checkpoint folder; tdlab never downloads)")
    for name in _CODE_FILES:
        if not os.path.lexists(p / name):
            continue
        doc = _read_json(p, name, where)
        if isinstance(doc, dict) and ("auto_map" in doc or "custom_pipelines" in doc):
            raise ConfigError(
                f"{where}: {name} names custom code (auto_map), which tdlab never runs; give a "
                f"checkpoint of a model class transformers ships (BERT, RoBERTa, ...)"
            )
        if name == "config.json":  # before transformers reads it: its error for an unknown type is truncated
            if not isinstance(doc, dict):
                raise ConfigError(f"{where}: config.json is not a JSON object (a model's config)")
            _reader(doc.get("model_type"), path)
            check_size(doc, where)
    if weights:
        weight_files(p, where)
    return p


def _where(path: str | Path) -> str:
    return f"model.checkpoint: {echo(str(path))}"


@contextmanager
def _quiet(tf: Any) -> Iterator[None]:
    """transformers' own messages (load reports, progress bars, warnings) off around tdlab's load, which
    says in one line what it read; its settings are restored after."""
    log = tf.utils.logging
    verbosity, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        yield
    finally:
        log.set_verbosity(verbosity)
        if bars:
            log.enable_progress_bar()


def _state_dict(folder: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of the checked safetensors files ``names`` of ``folder`` (:func:`weight_files`), read by
    tdlab: safetensors holds tensors only, so reading it runs nothing."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for name in names:
        tensors.update(load_file(str(folder / name)))
    return tensors


@contextmanager
def _loading(path: str | Path) -> Iterator[None]:
    """Whatever transformers raises for a folder it cannot read, as one line naming ``model.checkpoint``."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:  # transformers raises many types for a folder that is not a checkpoint
        raise ConfigError(
            f"model.checkpoint: {echo(str(path))} is not a loadable local model + tokenizer "
            f"({type(exc).__name__}: {echo(one_line(str(exc)))})"
        ) from None


HOOKED_ATTENTION = "tdlab_hooked"  # the attention implementation HFEncoder.forward registers and runs under
_RUNNING: list[HFEncoder] = []  # the encoders whose forward pass is running (innermost last)


def _hooked_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention (the same operations: every supported architecture's equals it bit for
    bit, tested), with the pattern and the heads' output through the running encoder's next layer's points.
    ``query, key, value``: ``(B, H, T, d_h)``; returns ``((B, T, H, d_h), pattern (B, H, T, T))``."""
    points = _RUNNING[-1].next_layer()
    scores = torch.matmul(query, key.transpose(2, 3)) * (query.size(-1) ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = scores + attention_mask
    att = points.hook_pattern(torch.softmax(scores, dim=-1).unsqueeze(0)).squeeze(0)
    att = torch.nn.functional.dropout(att, p=dropout, training=module.training)
    z = points.hook_z(torch.matmul(att, value).transpose(1, 2).unsqueeze(0)).squeeze(0)
    return z.contiguous(), att


class _AttentionPoints(torch.nn.Module):
    """One layer's attention hook points (no parameters): ``hook_pattern``, ``hook_z``."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()  # (1, B, H, T, T)
        self.hook_z = HookPoint()  # (1, B, T, H, d_h): the heads' output, before the output projection


class _LayerPoints(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _AttentionPoints()


class HFEncoder(EnsembleModel):
    """A local checkpoint's input embeddings and attentions, per corpus word (module docstring).

    Args:
        path: a local folder with the model (``config.json`` + safetensors weights) and its tokenizer.
        vocab: the corpus words; word ``i`` is model id ``i + offset`` in the windows given to
            :meth:`window_attention` (ids outside ``[offset, offset + n)`` are the tokenizer's unknown token).
        offset: the caller's special tokens below the words.
        random_init: the same architecture with fresh weights (the control) instead of the checkpoint's.
        seed: the fresh weights' seed (the one member's: ``seeds == [seed]``).

    A one-member ensemble with hook points: ``forward(ids (1, B, T) long) -> (1, B, T, d)``, the encoder's last
    hidden state, runs the model under :data:`HOOKED_ATTENTION` (transformers' eager attention, every layer's
    pattern and heads' output through hook points): ``hook_embed`` ``(1, B, T, d_table)`` (the token table's
    rows), ``blocks.{l}.attn.hook_pattern`` ``(1, B, H, T, T)``, ``blocks.{l}.attn.hook_z`` ``(1, B, T, H, d_h)``,
    ``hook_final`` ``(1, B, T, d)``. :meth:`window_attention` reads the model as it always has (eager,
    ``output_attentions``).

    Raises:
        ConfigError: transformers missing, the folder missing, an architecture outside :data:`READERS`, a
            tokenizer without the special tokens its architecture's windows need, or not a loadable model +
            tokenizer.
    """

    def __init__(
        self, path: str | Path, vocab: list[str], offset: int = 0, random_init: bool = False, seed: int = 0
    ) -> None:
        super().__init__()
        self._set_members([seed])
        tf = transformers_module()
        p = check_checkpoint(path, weights=not random_init)
        # Never code from the folder (trust_remote_code=False: no custom classes, no prompt offering them).
        local = {"local_files_only": True, "trust_remote_code": False}
        with _loading(path), _quiet(tf):
            self.tokenizer = tf.AutoTokenizer.from_pretrained(str(p), **local)
            config = tf.AutoConfig.from_pretrained(str(p), **local)
        self.reader = reader_for(config, path)
        # eager attention: transformers 5's sdpa / flash kernels return no attention weights
        with _loading(path), _quiet(tf):
            if random_init:
                with torch.random.fork_rng():
                    torch.manual_seed(int(seed) & 0x7FFFFFFFFFFFFFFF)
                    self.model = tf.AutoModel.from_config(config, attn_implementation="eager", trust_remote_code=False)
            else:
                # The weights tdlab read from the files it checked; the model class's loader only maps their
                # names (a task head's prefix, old names), with no folder to look for other files in.
                self.model = tf.MODEL_MAPPING[type(config)].from_pretrained(
                    None,
                    config=config,
                    state_dict=_state_dict(p, weight_files(p, _where(path))),
                    attn_implementation="eager",
                    dtype=torch.float32,
                )
        self.model.eval()
        self.vocab, self.offset = list(vocab), int(offset)
        self.max_tokens = self.reader.positions(config)
        tok = self.tokenizer
        self._open, self._close, self._unk = (self._token_id(path, a) for a in (*self.reader.specials, "unk_token"))
        # every word as it appears mid-text (RoBERTa, BART: after a space, "Ġword")
        self.pieces = [tok(self.reader.word_prefix + w, add_special_tokens=False)["input_ids"] for w in self.vocab]
        single = np.array([len(p) == 1 and p[0] != self._unk for p in self.pieces])
        self.piece = np.array([p[0] if ok else -1 for p, ok in zip(self.pieces, single, strict=True)], dtype=np.int64)
        self.excluded = frozenset(np.flatnonzero(~single).tolist())  # corpus ids in no pair
        self.skipped = int((~single).sum())
        layers = int(getattr(config, "encoder_layers", None) or config.num_hidden_layers)  # BART: its encoder's
        self.blocks = torch.nn.ModuleList(_LayerPoints() for _ in range(layers))
        self.hook_embed = HookPoint()
        self.hook_final = HookPoint()
        self._layer = 0

    def next_layer(self) -> _AttentionPoints:
        """The attention points of the layer whose attention runs next (layers run in order, once each)."""
        block = self.blocks[self._layer]
        self._layer += 1
        assert isinstance(block, _LayerPoints)
        return block.attn

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids (1, B, T)`` model ids -> the encoder's last hidden state ``(1, B, T, d)`` (module docstring)."""
        self.check_members(ids.shape[0], "ids")
        tf = transformers_module()
        tf.AttentionInterface.register(HOOKED_ATTENTION, _hooked_attention)
        encoder = self.model.get_encoder() if self.reader.name == "BART" else self.model

        def embed(_module: torch.nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
            return self.hook_embed(out.unsqueeze(0)).squeeze(0)

        handle = self.reader.embedding(self.model).register_forward_hook(embed)
        self.model.set_attn_implementation(HOOKED_ATTENTION)
        _RUNNING.append(self)
        self._layer = 0
        try:
            hidden = encoder(input_ids=ids[0]).last_hidden_state
        finally:
            _RUNNING.pop()
            self.model.set_attn_implementation("eager")
            handle.remove()
        return self.hook_final(hidden.unsqueeze(0))

    def _token_id(self, path: str | Path, attr: str) -> int:
        """The id of the tokenizer's special token ``attr`` (``cls_token``, ``bos_token``, ...)."""
        i = getattr(self.tokenizer, f"{attr}_id", None)
        if i is None:
            raise ConfigError(
                f"model.checkpoint: {echo(str(path))}: its tokenizer has no {attr}, which "
                f"{self.reader.name}'s windows need"
            )
        return int(i)

    def member_state(self, e: int) -> dict[str, torch.Tensor]:
        """The wrapped model's parameters and buffers (member 0, the only one; they carry no member axis)."""
        if e != 0:
            raise IndexError(f"member {e} of a one-member ensemble")
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def describe(self) -> dict[str, Any]:
        """What is read, for the report: the architecture, the embedding matrix and its shape."""
        table = self.reader.embedding(self.model).weight
        return {"architecture": self.reader.name, "embedding": self.reader.table, "embedding_shape": list(table.shape)}

    @torch.no_grad()
    def word_embeddings(self) -> torch.Tensor:
        """``(1, n, d)`` float64 token-table rows of the corpus words (:attr:`Reader.embedding`; ``d`` the table's
        width); NaN rows for skipped words."""
        table = self.reader.embedding(self.model).weight.detach().to(torch.float64)
        out = torch.full((len(self.vocab), table.shape[1]), float("nan"), dtype=torch.float64)
        ok = torch.as_tensor(self.piece >= 0)
        out[ok] = table[torch.as_tensor(self.piece[self.piece >= 0])]
        return out.unsqueeze(0)

    @torch.no_grad()
    def window_attention(self, windows: torch.Tensor) -> torch.Tensor:
        """``(1, B, L, H, T, T)`` attention of every layer and head among the first pieces of the ``T`` words of
        each window (``windows (B, T)`` model ids), the window tokenised word by word between its architecture's
        special tokens (``[CLS] ... [SEP]``, ``<s> ... </s>``).

        Raises:
            ConfigError: a window longer (in tokens) than the model's positions, naming ``train.seq_len``.
        """
        out = []
        n = len(self.vocab)
        for row in windows.tolist():
            ids, first = [self._open], []
            for i in row:
                w = i - self.offset
                first.append(len(ids))
                ids.extend(self.pieces[w] if 0 <= w < n else [self._unk])
            ids.append(self._close)
            if len(ids) > self.max_tokens:
                raise ConfigError(
                    f"train.seq_len: a window of {len(row)} words is {len(ids)} {self.reader.name} "
                    f"tokens, more than the checkpoint's {self.max_tokens} positions; use a smaller "
                    f"train.seq_len"
                )
            att = torch.stack([a[0] for a in self.reader.attention(self.model, torch.tensor([ids]))])  # (L, H, T', T')
            f = torch.as_tensor(first)
            out.append(att[:, :, f][:, :, :, f].float())
        return torch.stack(out).unsqueeze(0)
