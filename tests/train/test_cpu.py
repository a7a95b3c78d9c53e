"""CPU execution settings: thread count and denormal flushing are scoped to their block."""

from __future__ import annotations

import pytest
import torch

from tdlab.train.cpu import cpu_threads, flush_denormals

DENORMAL = 1e-39  # below the smallest normal fp32 (1.18e-38), above the smallest denormal (1.4e-45)


def test_flush_denormals_zeroes_denormal_results_inside_the_block_only():
    x = torch.tensor([DENORMAL * 4], dtype=torch.float32)
    assert (x / 4).item() != 0.0  # denormals kept by default
    with flush_denormals("cpu"):
        assert (x / 4).item() == 0.0
        assert (torch.tensor([1e-30]) / 4).item() == pytest.approx(2.5e-31, rel=1e-6)  # normal values untouched
    assert (x / 4).item() != 0.0  # restored


def test_flush_denormals_leaves_other_devices_alone():
    x = torch.tensor([DENORMAL * 4], dtype=torch.float32)
    with flush_denormals("cuda"):
        assert (x / 4).item() != 0.0


def test_cpu_threads_is_scoped_and_ignores_none_and_other_devices():
    old = torch.get_num_threads()
    with cpu_threads(1, "cpu"):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == old
    with cpu_threads(None, "cpu"), cpu_threads(1, "cuda"):
        assert torch.get_num_threads() == old
