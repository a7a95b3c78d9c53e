"""tdlab: a laboratory for studying how transformers learn on synthetic data with known ground truth."""

__version__ = "0.1.0"
