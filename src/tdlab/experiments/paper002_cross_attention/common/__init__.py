"""What seed 002's synthetic experiments share: :mod:`.synthetic` (the prompt law, the test sets, the training
settings, models built at the Thm 6.2/6.3 initialisations, the health gate of arms trained by gradient descent,
per-member test rows read back) and :mod:`.reference` (the finite-context references: replicate Monte-Carlo
minimisers of the trained losses, :mod:`tdlab.theory.icl_minimisers`, kept on disk)."""
