"""Seed 999, "Sticky tokens" (an example paper that does not exist): the paper package.

In tdlab a paper package lives at ``src/tdlab/experiments/paperNNN_short_name/``, one module per reproduced
figure or table; importing a module registers its experiment. Here the package sits beside its example,
and importing it registers ``sticky-copy``.
"""

from paper999_sticky import copying

__all__ = ["copying"]
