"""Trained models out of tdlab, into other tools.

* :mod:`tdlab.export.transformer_lens` — one member of a trained GPT arm as a TransformerLens model
  (``tdlab export RUN_DIR --arm ARM --member I --to transformer-lens``).
"""

from tdlab.export.transformer_lens import export_member

__all__ = ["export_member"]
