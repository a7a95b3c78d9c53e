"""Seed 999, "Sticky tokens" (an example paper that does not exist): the seed package.

In tdlab a seed package lives at ``src/tdlab/experiments/seedNNN_short_name/``, one module per reproduced
figure or table; importing a module registers its experiment. Here the package sits beside its example,
and importing it registers ``sticky-copy``.
"""

from seed999_sticky import copying

__all__ = ["copying"]
