"""Log-mel spectrograms (tasks.spectrogram) against closed forms and an independent slow implementation:
the HTK mel scale, the triangular filterbank's partition of unity, pure tones landing in the band whose
centre is nearest in mel, and the STFT/mel/dB chain recomputed frame by frame with numpy's rfft."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tdlab.tasks.spectrogram import fix_length, hz_to_mel, log_mel, mel_filterbank, mel_to_hz, trim_silence

SR = 22_050  # espeak-ng's rate


def _expected_band(freq: float, n_mels: int, fmin: float, fmax: float) -> int:
    """Band whose centre is nearest ``freq`` on the mel scale, from the HTK formula written out again."""
    mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)  # noqa: E731
    step = (mel(fmax) - mel(fmin)) / (n_mels + 1)
    centres = [mel(fmin) + (k + 1) * step for k in range(n_mels)]
    return min(range(n_mels), key=lambda k: abs(centres[k] - mel(freq)))


def test_mel_scale_closed_form() -> None:
    assert hz_to_mel(0.0) == 0.0
    assert hz_to_mel(1000.0) == pytest.approx(2595.0 * math.log10(1.0 + 1000.0 / 700.0), rel=1e-12)
    assert hz_to_mel(1000.0) == pytest.approx(1000.0, abs=0.1)  # the HTK scale is built to put 1 kHz at ~1000 mel
    f = np.array([0.0, 50.0, 440.0, 3000.0, 11025.0])
    np.testing.assert_allclose(mel_to_hz(hz_to_mel(f)), f, rtol=1e-12, atol=1e-9)


def test_filterbank_triangles_partition_unity() -> None:
    n_mels, n_fft, fmax = 28, 2048, 8000.0
    fb = mel_filterbank(n_mels, n_fft, SR, 0.0, fmax)
    assert fb.shape == (n_mels, n_fft // 2 + 1)
    assert fb.min() >= 0.0 and fb.max() <= 1.0
    bins = np.fft.rfftfreq(n_fft, 1.0 / SR)
    centres = mel_to_hz(np.linspace(0.0, hz_to_mel(fmax), n_mels + 2))[1:-1]
    # between the first and the last centre, adjacent triangles sum to exactly 1 (linear interpolation)
    inside = (bins >= centres[0]) & (bins <= centres[-1])
    np.testing.assert_allclose(fb[:, inside].sum(0), 1.0, atol=1e-12)
    assert np.all(fb[:, bins > fmax] == 0.0)
    # each filter is largest at the bin nearest its centre
    for k in range(n_mels):
        assert abs(bins[np.argmax(fb[k])] - centres[k]) <= SR / n_fft


@pytest.mark.parametrize("freq", [1000.0, 300.0, 2500.0, 5000.0])
def test_tone_peaks_in_its_mel_band(freq: float) -> None:
    t = np.arange(int(0.8 * SR)) / SR
    wave = 0.5 * np.sin(2 * np.pi * freq * t)
    spec = log_mel(wave, SR, n_mels=28, frames=28, fmax=8000.0)
    assert spec.shape == (28, 28)
    expected = _expected_band(freq, 28, 0.0, 8000.0)
    assert np.all(np.argmax(spec, axis=0) == expected), (np.argmax(spec, axis=0), expected)


def test_log_mel_shape_finite_and_floor() -> None:
    rng = np.random.default_rng(0)
    for n in (1000, 17_641, 22_050):
        spec = log_mel(rng.standard_normal(n), SR, n_mels=20, frames=12)
        assert spec.shape == (20, 12) and np.isfinite(spec).all()
        assert spec.max() - spec.min() <= 80.0 + 1e-9
    silent = log_mel(np.zeros(5000), SR)
    assert np.isfinite(silent).all()
    with pytest.raises(ValueError, match="too few"):
        log_mel(np.zeros(10), SR, frames=28)


def test_log_mel_matches_frame_by_frame_rfft() -> None:
    """The scipy STFT chain against frames cut by hand, a periodic Hann window and numpy's rfft."""
    rng = np.random.default_rng(1)
    wave = rng.standard_normal(6000) * np.linspace(0.1, 1.0, 6000)
    n_mels, frames = 16, 10
    hop = 6000 // (frames + 1)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(2 * hop) / (2 * hop))  # periodic Hann (scipy's "hann")
    power = np.stack(
        [np.abs(np.fft.rfft(win * wave[i * hop : i * hop + 2 * hop]) / win.sum()) ** 2 for i in range(frames)], axis=1
    )
    mel = mel_filterbank(n_mels, 2 * hop, SR) @ power
    db = 10 * np.log10(mel)
    db = np.maximum(db, db.max() - 80.0)
    np.testing.assert_allclose(log_mel(wave, SR, n_mels=n_mels, frames=frames), db, rtol=0, atol=1e-9)


def test_trim_and_fix_length() -> None:
    wave = np.r_[np.zeros(10), 0.001, np.ones(5), np.zeros(7)]
    np.testing.assert_array_equal(trim_silence(wave), np.ones(5))  # 0.001 is below 1 % of the peak
    np.testing.assert_array_equal(trim_silence(np.zeros(4)), np.zeros(4))
    np.testing.assert_array_equal(fix_length(np.arange(5.0), 3), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(fix_length(np.arange(2.0), 4), [0.0, 1.0, 0.0, 0.0])
