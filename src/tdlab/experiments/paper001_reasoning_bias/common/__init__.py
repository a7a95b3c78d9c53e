"""What seed 001's experiments share: :mod:`.training` (the anchors' set-up and training: γ arms, the GPT,
data, curves, health, the reasoning-first claim), :mod:`.gamma_sweep` (the γ-sweep experiment anchors-bias
registers and the probe experiments extend, and their probe source) and :mod:`.cosines` (the embedding-cosine
readings of anchors-mlp, anchors-embedding and anchors-attention)."""
