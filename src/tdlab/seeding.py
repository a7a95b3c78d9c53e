"""Every random draw in tdlab derives from one root seed.

A run has a root seed; each ensemble member and each *purpose* (initialisation, training data,
evaluation data, ...) gets its own independent stream, derived with NumPy's ``SeedSequence`` so
that streams never overlap and do not depend on how many members are trained together. That is
what makes member ``i`` of an ensemble identical to a single model trained with member ``i``'s seed.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["Purpose", "derive_seed", "generators", "member_seeds"]


class Purpose:
    """Names of the random streams of a member. Any string works; these are the common ones."""

    INIT = "init"
    TRAIN_DATA = "train-data"
    EVAL_DATA = "eval-data"


def _purpose_key(purpose: str) -> int:
    # A stable (process-independent) integer for a purpose name; Python's hash() is salted.
    return zlib.crc32(purpose.encode())


def derive_seed(root: int, *path: int | str) -> int:
    """A 63-bit seed for the stream named by ``path`` under ``root``.

    ``derive_seed(root, member, "init")`` is the seed of member ``member``'s initialisation.
    Strings in the path are mapped to stable integers, so the same path always gives the same seed.
    """
    if root < 0:
        raise ValueError(f"seed must be >= 0, got {root}")
    key = tuple(_purpose_key(p) if isinstance(p, str) else int(p) for p in path)
    state = np.random.SeedSequence(entropy=int(root), spawn_key=key).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def member_seeds(root: int, members: int | Sequence[int]) -> list[int]:
    """Seeds of ensemble members: ``members`` is a count (members 0..E-1) or explicit member indices."""
    idx = range(members) if isinstance(members, int) else members
    return [derive_seed(root, int(i)) for i in idx]


def generators(seeds: Sequence[int], purpose: str, device: str | torch.device = "cpu") -> list[torch.Generator]:
    """One ``torch.Generator`` per member seed for the given purpose, on ``device``."""
    out = []
    for s in seeds:
        g = torch.Generator(device=device)
        g.manual_seed(derive_seed(s, purpose))
        out.append(g)
    return out
