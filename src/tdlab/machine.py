"""What this machine has to spend: its physical memory, which the size checks refuse against before
anything is built (:func:`tdlab.train.memory.check_memory` for a run's config,
:func:`tdlab.models.hf_encoder.check_size` for a local checkpoint's ``config.json``)."""

from __future__ import annotations

import os

__all__ = ["GB", "machine_bytes"]

GB = 1e9
"""Bytes in the gigabyte that refusals give sizes in."""


def machine_bytes() -> int:
    """Physical memory of this machine, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
