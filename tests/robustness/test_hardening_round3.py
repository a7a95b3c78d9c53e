"""The third hardening round (issue 40): one test per mishandled input, each failing on the code before it.

* item 2: a run folder (or a file in one) that is a symlink is skipped with one warning by ``runs --reindex``,
  ``docs build`` and ``atlas build``; nothing outside the runs folder is read or copied;
* item 3: a checkpoint whose ``model.safetensors.index.json`` maps weights to a pickle is refused, and no
  pickle is ever loaded (tdlab reads the checked safetensors itself);
* item 4: a failed ``docs build`` leaves the earlier site as it was and no new folder;
* item 5: a checkpoint config too big for memory is refused in seconds, naming the field;
* item 6: damaged run data (a row id that is a number, an interval of one bound) skips the run with a
  warning; a TensorBoard folder holding a file named ``member-0`` is refused before training;
* item 7: ``runs --reindex`` skips folders whose name is not a run id;
* item 8: ``--budget``/``--looks`` without ``--decide``, ``--set members`` with ``--seeds``, ``--tensorboard ""``
  are refused; an unknown ``model_type`` gets tdlab's list; transformers' load messages are silenced;
  markdown in a claim's text does not break the strict docs build.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the inputs live beside this file (tests are not a package)
import hardening_inputs as hi

# ------------------------------------------------------------------------------------------ checkpoints


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT checkpoint (safetensors weights, WordPiece tokenizer) and a corpus of its words."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("round3-ck")
    hi._bert(root / "bert")
    words = ["apple", "banana", "boat", "ship", "sail", "bananas"]
    (root / "corpus.txt").write_text("\n".join(" ".join(words[(i + j) % 6] for j in range(30)) for i in range(20)))
    return root / "bert"


def _topics(checkpoint: Path, w: Path) -> list[str]:
    """``tdlab run topics-real`` measuring the checkpoint ``checkpoint`` (nothing trained)."""
    ctx = hi.Ctx(w, w, checkpoint, checkpoint.parent / "corpus.txt")
    return [str(a) for a in hi.topics(ctx, w, f"model.checkpoint={checkpoint}")]


def _copy(checkpoint: Path, w: Path, **config: object) -> Path:
    """A copy of the checkpoint with ``config.json``'s fields ``config`` changed."""
    ck = w / "ck"
    shutil.copytree(checkpoint, ck)
    shutil.copy(checkpoint.parent / "corpus.txt", w)
    doc = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**doc, **config}))
    return ck


def test_item3_a_weight_map_naming_a_pickle_is_refused_and_never_unpickled(fz, checkpoint, tmp_path, monkeypatch):
    """The check passed (a model.safetensors was there) and transformers followed the index to torch.load."""
    import torch

    ck = _copy(checkpoint, tmp_path)
    torch.save({"embeddings.word_embeddings.weight": torch.zeros(12, 16)}, ck / "pytorch_model.bin")
    weight_map = {"embeddings.word_embeddings.weight": "pytorch_model.bin"}
    (ck / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a pickle was loaded"))
    before = fz.digest(ck)
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["weight_map"], before, ck, key="index-to-pickle")
    assert "pytorch_model.bin" in r.stderr and hi.no_run_written(tmp_path / "out")(None) is None
    for escape in ("../bert/model.safetensors", "/etc/passwd", "sub/model.safetensors"):
        (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": escape}}))
        r = fz.invoke(_topics(ck, tmp_path))
        fz.refused("round 3: model.checkpoint", r, ["weight_map"], fz.digest(ck), ck, key=f"index-to-{escape}")


def test_item3_the_weights_loaded_are_the_checked_files_and_no_loader_gets_the_folder(checkpoint, monkeypatch):
    """tdlab reads model.safetensors itself: the model's tensors equal the file's, and no model class's
    from_pretrained is given a path to look for weights in."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from tdlab.models.hf_encoder import HFEncoder

    real = transformers.PreTrainedModel.from_pretrained.__func__
    paths = []

    def spy(cls, path, *args, **kwargs):
        paths.append(path)
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(spy))
    enc = HFEncoder(checkpoint, ["apple", "boat"])
    assert paths == [None]
    saved = load_file(str(checkpoint / "model.safetensors"))
    assert saved and all(torch.equal(t, enc.model.state_dict()[k]) for k, t in saved.items())


def test_item5_a_config_too_big_for_memory_is_refused_in_seconds(fz, checkpoint, tmp_path, monkeypatch):
    """num_hidden_layers: 1000000 built for as long as it was allowed, memory growing, no message."""
    import transformers

    def built(*a, **k):
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.BertModel, "__init__", built)  # a build would take hours
    ck = _copy(checkpoint, tmp_path, num_hidden_layers=1_000_000)
    t0 = time.monotonic()
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["num_hidden_layers"], fz.digest(ck), ck, key="layers-1e6")
    assert time.monotonic() - t0 < 30 and "model.checkpoint" in r.stderr


def test_item8_an_unknown_model_type_gets_tdlabs_list(fz, checkpoint, tmp_path):
    """transformers' ValueError (truncated) came first instead of tdlab's supported architectures."""
    ck = _copy(checkpoint, tmp_path, model_type="not-a-model")
    r = fz.invoke(_topics(ck, tmp_path))
    fz.refused("round 3: model.checkpoint", r, ["bert (BERT), roberta (RoBERTa)"], fz.digest(ck), ck, key="type")


def test_item8_transformers_load_messages_are_silenced(checkpoint, tmp_path, capfd):
    """A task model's checkpoint (a BertForMaskedLM's keys) made transformers print its load report and a
    progress bar before tdlab's one line; its verbosity is restored after the load."""
    import torch
    import transformers

    from tdlab.models.hf_encoder import HFEncoder

    ck = _copy(checkpoint, tmp_path)
    config = transformers.BertConfig.from_pretrained(str(ck))
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(str(ck))
    capfd.readouterr()
    before = transformers.logging.get_verbosity()
    enc = HFEncoder(ck, ["apple", "boat"])
    out, err = capfd.readouterr()
    assert out + err == "" and enc.describe()["architecture"] == "BERT"
    assert transformers.logging.get_verbosity() == before
