"""Log-mel spectrograms with numpy/scipy only (the audio half of the ``avdigits`` stand-in, seed 002 App. I.1).

avMNIST pairs each image with a 28 × 28 audio spectrogram (App. I.1: ``A_i ∈ R^{1×28×28}``). The
stand-in makes one from a fixed-length waveform:

* mel scale (HTK/O'Shaughnessy): ``mel(f) = 2595 log10(1 + f/700)``, so ``mel(1000 Hz) ≈ 1000``;
* ``n_mels`` triangular filters whose edges are ``n_mels + 2`` points equally spaced in mel between
  ``fmin`` and ``fmax``; filter ``k`` (0-based) rises from point ``k`` to 1 at point ``k + 1`` (its
  centre) and falls to 0 at point ``k + 2``. Filters have peak 1 (no area normalisation), so a pure
  tone lands in the band whose centre is nearest in mel — the property the tests check;
* short-time Fourier transform (``scipy.signal.stft``, Hann window, 50 % overlap) whose hop is chosen
  so the waveform gives exactly ``frames`` frames; power ``|X|^2``, mel energies, decibels
  ``10 log10``, floored ``top_db`` below the loudest cell (as librosa's ``power_to_db(top_db=80)``).

Rows of the returned array are mel bands (row 0 the lowest), columns are time frames.
"""

from __future__ import annotations

import numpy as np
import scipy.signal

__all__ = ["fix_length", "hz_to_mel", "log_mel", "mel_filterbank", "mel_to_hz", "trim_silence"]


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """HTK mel of frequency ``f`` (Hz): ``2595 log10(1 + f / 700)``."""
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def mel_to_hz(m: np.ndarray | float) -> np.ndarray:
    """Inverse of :func:`hz_to_mel`: ``700 (10^(m / 2595) − 1)`` Hz."""
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(n_mels: int, n_fft: int, sr: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """Triangular mel filters on the ``n_fft // 2 + 1`` rFFT bins, shape ``(n_mels, n_fft // 2 + 1)``.

    Filter ``k`` is 0 below edge ``k``, 1 at its centre (edge ``k + 1``) and 0 above edge ``k + 2``;
    edges are equally spaced in mel from ``fmin`` to ``fmax`` (default ``sr / 2``).
    """
    fmax = sr / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < fmax <= sr / 2.0:
        raise ValueError(f"mel_filterbank: need 0 <= fmin < fmax <= sr/2, got fmin={fmin}, fmax={fmax}, sr={sr}")
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # Hz, (n_mels + 2,)
    bins = np.fft.rfftfreq(n_fft, d=1.0 / sr)  # (n_fft // 2 + 1,)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    return np.clip(np.minimum(rising, falling), 0.0, None)


def trim_silence(wave: np.ndarray, threshold: float = 0.01) -> np.ndarray:
    """``wave`` from its first to its last sample above ``threshold × max|wave|`` (all of it if silent)."""
    peak = float(np.max(np.abs(wave))) if wave.size else 0.0
    if peak == 0.0:
        return wave
    loud = np.flatnonzero(np.abs(wave) > threshold * peak)
    return wave[loud[0] : loud[-1] + 1]


def fix_length(wave: np.ndarray, length: int) -> np.ndarray:
    """``wave`` cut to ``length`` samples or right-padded with zeros (start-aligned: a word starts at 0)."""
    if wave.shape[0] >= length:
        return wave[:length]
    return np.concatenate([wave, np.zeros(length - wave.shape[0], dtype=wave.dtype)])


def log_mel(
    wave: np.ndarray,
    sr: int,
    n_mels: int = 28,
    frames: int = 28,
    fmin: float = 0.0,
    fmax: float | None = None,
    top_db: float = 80.0,
) -> np.ndarray:
    """Log-mel spectrogram of a mono waveform, shape ``(n_mels, frames)``, float64, in dB.

    The hop is ``len(wave) // (frames + 1)`` and the window ``2 × hop`` (Hann, 50 % overlap, no
    boundary padding), so exactly ``frames`` frames cover the waveform (its last ``len % hop`` samples
    are dropped). Values are ``10 log10`` of the mel energies, floored at ``max − top_db`` (silence
    then has a finite value); the loudest cell is the maximum.

    Args:
        wave: ``(n,)`` samples, any scale; ``n >= 2 (frames + 1)``.
        sr: sampling rate (Hz).
    """
    wave = np.asarray(wave, dtype=np.float64)
    if wave.ndim != 1:
        raise ValueError(f"log_mel: wave must be 1-D, got shape {wave.shape}")
    hop = wave.shape[0] // (frames + 1)
    if hop < 1:
        raise ValueError(f"log_mel: {wave.shape[0]} samples are too few for {frames} frames")
    nperseg = 2 * hop
    _, _, spec = scipy.signal.stft(
        wave[: hop * (frames + 1)], fs=sr, window="hann", nperseg=nperseg, noverlap=hop, boundary=None, padded=False
    )
    power = np.abs(spec) ** 2  # (nperseg // 2 + 1, frames)
    assert power.shape[1] == frames, power.shape
    mel = mel_filterbank(n_mels, nperseg, sr, fmin, fmax) @ power  # (n_mels, frames)
    db = 10.0 * np.log10(np.maximum(mel, 1e-30))
    return np.maximum(db, db.max() - top_db)
