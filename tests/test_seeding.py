"""Seed derivation: one root seed, independent per-member/per-purpose streams that do not depend on
how many members are drawn together."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from tdlab.seeding import Purpose, derive_seed, generators, member_seeds


def _to63(ss: np.random.SeedSequence) -> int:
    s0, s1 = (int(v) for v in ss.generate_state(2, dtype=np.uint32))
    return ((s0 << 31) ^ s1) & ((1 << 63) - 1)


def _reference_seed(root: int, *key: int) -> int:
    # Independent route through NumPy's SeedSequence tree: spawn_key (k,) is the k-th spawned child
    # (only for small keys: spawn(k + 1) materialises k + 1 children).
    ss = np.random.SeedSequence(root)
    for k in key:
        ss = ss.spawn(k + 1)[k]
    return _to63(ss)


@pytest.mark.parametrize("root", [0, 1, 12345, 2**40 + 7])
def test_derive_seed_follows_the_seedsequence_tree(root):
    for path in [(0,), (3,), (2, 5)]:
        assert derive_seed(root, *path) == _reference_seed(root, *path)


def test_purpose_names_map_to_stable_crc32_keys():
    # Python's hash() is salted per process; crc32 is not, so a purpose always gives the same stream.
    assert derive_seed(7, 2, "init") == derive_seed(7, 2, zlib.crc32(b"init"))
    key = (2, zlib.crc32(b"train-data"))
    assert derive_seed(7, *key) == _to63(np.random.SeedSequence(7, spawn_key=key))
    assert derive_seed(7, 2, Purpose.TRAIN_DATA) == _to63(np.random.SeedSequence(7, spawn_key=key))


def test_seeds_are_63_bit_and_distinct_across_paths():
    seeds = {derive_seed(r, m, p) for r in range(3) for m in range(20) for p in ("init", "train-data", "eval-data")}
    assert len(seeds) == 3 * 20 * 3
    assert all(0 <= s < 2**63 for s in seeds)


def test_member_seeds_do_not_depend_on_the_ensemble_size():
    eight = member_seeds(11, 8)
    assert len(eight) == len(set(eight)) == 8
    assert member_seeds(11, 3) == eight[:3]
    assert member_seeds(11, [5, 2]) == [eight[5], eight[2]]
    assert member_seeds(12, 3) != eight[:3]


def test_generators_give_per_member_streams_independent_of_the_others():
    seeds = member_seeds(3, 4)
    together = [torch.rand(6, generator=g) for g in generators(seeds, Purpose.TRAIN_DATA)]
    alone = torch.rand(6, generator=generators([seeds[2]], Purpose.TRAIN_DATA)[0])
    assert torch.equal(together[2], alone)
    # Each generator is seeded with derive_seed(member_seed, purpose).
    ref = torch.Generator().manual_seed(derive_seed(seeds[1], Purpose.TRAIN_DATA))
    assert torch.equal(together[1], torch.rand(6, generator=ref))
    # Different purposes and different members give different streams.
    init = torch.rand(6, generator=generators([seeds[2]], Purpose.INIT)[0])
    assert not torch.equal(init, alone)
    assert not torch.equal(together[0], together[1])


def test_negative_root_seed_is_rejected():
    with pytest.raises(ValueError, match="seed"):
        derive_seed(-1, 0)
