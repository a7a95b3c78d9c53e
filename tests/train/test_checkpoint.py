"""Checkpoint files that share a folder: saving one never deletes another's tensor file, also when one name
extends the other (markov-icl-depth's arms ``relative`` and ``relative-kv``: saving the first used to
delete the second's tensors, so its resume failed with "cannot read checkpoint file")."""

from __future__ import annotations

import torch

from tdlab.train.checkpoint import load_checkpoint, remove_checkpoint, save_checkpoint


def test_saving_a_checkpoint_keeps_one_whose_name_extends_it(tmp_path):
    short, long = tmp_path / "k1__L1__relative.json", tmp_path / "k1__L1__relative-kv.json"
    save_checkpoint(long, {"step": 1}, {"w": torch.ones(2)})
    save_checkpoint(short, {"step": 1}, {"w": torch.zeros(2)})
    save_checkpoint(short, {"step": 2}, {"w": torch.full((2,), 2.0)})  # replaces its own previous tensor file only
    meta, tensors = load_checkpoint(long)
    assert meta == {"step": 1} and torch.equal(tensors["w"], torch.ones(2))
    meta, tensors = load_checkpoint(short)
    assert meta == {"step": 2} and torch.equal(tensors["w"], torch.full((2,), 2.0))
    assert len(list(tmp_path.glob("*.safetensors"))) == 2  # one tensor file each: the old one is gone


def test_a_name_with_glob_characters_cleans_up_its_own_files_only(tmp_path):
    odd, other = tmp_path / "arm[1].json", tmp_path / "arm1.json"
    save_checkpoint(other, {}, {"w": torch.ones(1)})
    save_checkpoint(odd, {}, {"w": torch.ones(1)})
    save_checkpoint(odd, {"n": 2}, {"w": torch.zeros(1)})
    assert load_checkpoint(other) is not None and load_checkpoint(odd)[0] == {"n": 2}
    assert len(list(tmp_path.glob("*.safetensors"))) == 2


def test_removing_a_checkpoint_removes_its_own_files_and_a_tensor_file_a_killed_removal_left(tmp_path):
    short, long = tmp_path / "relative.json", tmp_path / "relative-kv.json"
    save_checkpoint(long, {"step": 1}, {"w": torch.ones(2)})
    save_checkpoint(short, {"step": 1}, {"w": torch.zeros(2)})
    (orphan,) = [f for f in tmp_path.glob("relative-*.safetensors") if "kv" not in f.name]
    remove_checkpoint(short)
    assert load_checkpoint(short) is None and not orphan.exists()
    assert load_checkpoint(long)[0] == {"step": 1}  # a name that extends it is another checkpoint's
    save_checkpoint(short, {"step": 2}, {"w": torch.zeros(2)})
    short.unlink()  # killed between the JSON and the tensor file: the tensor file is named by nothing
    remove_checkpoint(short)
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(f.name for f in tmp_path.glob("relative-kv*"))
    remove_checkpoint(tmp_path / "never-written.json")  # nothing there: no error
