"""Trained models out of tdlab, into other tools.

* :mod:`tdlab.export.transformer_lens` — one member of a trained GPT arm as a TransformerLens model
  (``tdlab export RUN_DIR --arm ARM --member I --to transformer-lens``).
* :mod:`tdlab.export.tensorboard` — a run's metrics as TensorBoard scalars, one run per member, tags
  ``ARM/NAME`` (``tdlab export RUN_DIR --to tensorboard --out DIR``; live: ``tdlab run NAME --tensorboard DIR``).
"""

from tdlab.export.transformer_lens import export_member

__all__ = ["export_member"]
