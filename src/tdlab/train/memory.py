"""How much memory a configuration needs, estimated before anything is allocated or written.

A run that cannot fit should be refused with one line naming the fields that make it big, not
killed by the kernel (or fail with an allocator error) after its run directory was made. The
estimate is generic: it reads the sizes from the config tree, wherever they sit, for the two kinds
of training in tdlab:

* next-token training of a transformer (a sub-config with ``batch`` and ``seq_len``; the model's
  ``d``, ``vocab``, ``layers``, ``heads``, ``mlp_ratio`` from a sub-config that has them);
* gradient descent on in-context regression prompts (a sub-config with ``prompts`` and ``context``;
  the token width from ``task.dims``).

It counts the activations one training step keeps for the backward pass of the members trained
together, in float32 (float64 for regression), and nothing else (no parameters, optimiser state,
evaluation or allocator slack). The T x T attention pattern per head is counted as the explicit
attention path materialises it; a fused kernel may not, so for long sequences the estimate is an
order of magnitude, not a bound. The check refuses only what exceeds the machine's whole physical
memory, so the existing profiles pass with a wide margin (tests/test_config.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tdlab.config import ConfigError
from tdlab.machine import GB, machine_bytes

__all__ = ["Estimate", "check_memory", "estimate", "model_vocab", "subconfig_with"]


@dataclass(frozen=True)
class Estimate:
    """``bytes`` needed (estimated), and the fields (dotted) whose product makes it."""

    bytes: float
    fields: tuple[str, ...]

    def describe(self) -> str:
        return " × ".join(self.fields)


def _subconfigs(cfg: BaseModel, prefix: str = "") -> Iterator[tuple[str, BaseModel]]:
    """``(dotted prefix, sub-config)`` for ``cfg`` and every config nested in it."""
    yield prefix, cfg
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            yield from _subconfigs(value, f"{prefix}{name}.")


def subconfig_with(cfg: BaseModel, *names: str) -> tuple[str, Any] | None:
    """The first sub-config that has every field in ``names`` (typed Any: it is known only by those fields,
    which the estimates read by name, whatever its class)."""
    return next(((p, c) for p, c in _subconfigs(cfg) if all(n in type(c).model_fields for n in names)), None)


def model_vocab(cfg: BaseModel, model: Any) -> int:
    """The vocabulary a model's output layer spans: its ``vocab`` field, else the corpus's ``max_vocab`` (seed
    004's real text: the model is sized by the corpus it reads), else 2."""
    if "vocab" in type(model).model_fields:
        return int(model.vocab)
    corpus = subconfig_with(cfg, "max_vocab")
    return int(corpus[1].max_vocab) if corpus is not None else 2


def _sequence_training(cfg: BaseModel) -> Estimate | None:
    """Transformer next-token training: activations of one step of one chunk of members."""
    found = subconfig_with(cfg, "batch", "seq_len")
    if found is None:
        return None
    tp, train = found
    members = int(getattr(cfg, "members", 1))
    chunk = train.chunk if isinstance(getattr(train, "chunk", "auto"), int) else None
    if chunk is None:  # "auto": the smallest chunk any device uses (a CPU's): the estimate errs low
        from tdlab.train.trainer import auto_chunk

        chunk = auto_chunk(members, train.batch, train.seq_len, "cpu")
    chunk = min(chunk, members)
    model = subconfig_with(cfg, "d", "layers")
    mp, m = model if model is not None else ("model.", None)
    d, vocab = (m.d, model_vocab(cfg, m)) if m is not None else (1, 2)
    layers, heads = (m.layers, getattr(m, "heads", 1)) if m is not None else (1, 1)
    mlp = getattr(m, "mlp_ratio", 4) if m is not None else 4
    T = train.seq_len
    # Per token, kept for backward: logits, softmax and their gradient (3 V); per layer the residual,
    # q, k, v, attention output, the MLP's hidden pre- and post-activation ((6 + 2 mlp) d) and the
    # attention pattern of every head over the T positions (T per head).
    per_token = 3 * vocab + 2 * d + layers * ((6 + 2 * mlp) * d + heads * T)
    tokens = chunk * train.batch * T
    fields = (
        f"{tp}batch",
        f"{tp}seq_len",
        "members" if chunk == members else f"members per chunk ({tp}chunk)",
        f"({mp}d, {mp}vocab, {mp}layers, attention {tp}seq_len² per {mp}heads)",
    )
    return Estimate(4.0 * tokens * per_token, fields)


def _regression(cfg: BaseModel) -> Estimate | None:
    """In-context regression by gradient descent: every member's prompts, in float64."""
    found = subconfig_with(cfg, "prompts", "context")
    if found is None:
        return None
    tp, train = found
    members = int(getattr(cfg, "members", 1))
    task = subconfig_with(cfg, "dims")
    width = sum(task[1].dims) + 1 if task is not None else 2
    wp = f"{task[0]}dims" if task is not None else "token width"
    # The prompts (x, y) and the activations of one layer's forward/backward over them (x 2).
    need = 8.0 * 2 * members * train.prompts * (train.context + 1) * width
    return Estimate(need, ("members", f"{tp}prompts", f"{tp}context", wp))


def estimate(cfg: BaseModel) -> Estimate:
    """The larger of the generic estimates that apply to ``cfg`` (zero when none does)."""
    found = [e for e in (_sequence_training(cfg), _regression(cfg)) if e is not None]
    return max(found, key=lambda e: e.bytes, default=Estimate(0.0, ()))


def check_memory(cfg: BaseModel, available: float | None = None) -> Estimate:
    """Refuse a configuration whose :func:`estimate` exceeds ``available`` bytes (default: this
    machine's physical memory). Returns the estimate.

    Raises:
        ConfigError: one line naming the fields and both sizes.
    """
    est = estimate(cfg)
    have = machine_bytes() if available is None else available
    if est.bytes > have:
        raise ConfigError(
            f"{est.describe()} needs ~{est.bytes / GB:.3g} GB of memory, "
            f"the machine has {have / GB:.3g} GB; make them smaller"
        )
    return est
