"""HFEncoder on a tiny randomly initialised BertModel saved to tmp_path (no download): input-embedding rows of
single-piece words, words split into pieces (or unknown) skipped and counted, attention restricted to the
words' first pieces equals the model's own attention, the random-init control differs; a missing folder is a
ConfigError naming model.checkpoint; topics-real runs end to end on the checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from tdlab.config import ConfigError  # noqa: E402
from tdlab.models.hf_encoder import HFEncoder  # noqa: E402

PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "apple", "banana", "##s", "boat", "ship", "sail", "the"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    (d / "vocab.txt").write_text("\n".join(PIECES) + "\n")
    tok = transformers.BertTokenizer(str(d / "vocab.txt"))
    tok.save_pretrained(str(d))
    cfg = transformers.BertConfig(vocab_size=len(PIECES), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertModel(cfg).save_pretrained(str(d))
    return d


VOCAB = ["apple", "bananas", "boat", "zebra", "ship"]  # "bananas" = banana ##s (2 pieces), "zebra" = [UNK]


def test_embeddings_of_single_piece_words_and_skipped_words(checkpoint):
    enc = HFEncoder(checkpoint, VOCAB, offset=2)
    assert enc.skipped == 2 and enc.excluded == frozenset({1, 3})
    table = enc.model.get_input_embeddings().weight.detach().double()
    emb = enc.word_embeddings()
    assert emb.shape == (1, 5, 16)
    torch.testing.assert_close(emb[0, 0], table[PIECES.index("apple")])
    torch.testing.assert_close(emb[0, 4], table[PIECES.index("ship")])
    assert torch.isnan(emb[0, 1]).all() and torch.isnan(emb[0, 3]).all()


def test_window_attention_is_the_models_attention_at_the_first_pieces(checkpoint):
    enc = HFEncoder(checkpoint, VOCAB, offset=2)
    win = torch.tensor([[2, 3, 4, 6, 0]])  # apple bananas boat ship [MASK]-id (not a word: [UNK])
    att = enc.window_attention(win)
    assert att.shape == (1, 1, 2, 2, 5, 5)
    ids = [2, 5, 6, 7, 8, 9, 1, 3]  # [CLS] apple banana ##s boat ship [UNK] [SEP]
    ref = enc.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    first = [1, 2, 4, 5, 6]
    for layer in range(2):
        torch.testing.assert_close(att[0, 0, layer], ref[layer][0][:, first][:, :, first].float())
    control = HFEncoder(checkpoint, VOCAB, offset=2, random_init=True, seed=3)
    assert not torch.allclose(control.word_embeddings()[0, 0], enc.word_embeddings()[0, 0])
    again = HFEncoder(checkpoint, VOCAB, offset=2, random_init=True, seed=3)
    torch.testing.assert_close(again.word_embeddings(), control.word_embeddings(), equal_nan=True)


def test_missing_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model.checkpoint"):
        HFEncoder(tmp_path / "nope", VOCAB)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="model.checkpoint"):
        HFEncoder(tmp_path / "empty", VOCAB)


def test_topics_real_measures_a_local_checkpoint_end_to_end(checkpoint, tmp_path):
    """A planted text file whose words are the checkpoint's pieces: the run trains nothing and measures it."""
    from tdlab.experiments.runner import execute
    from tdlab.experiments.seed004_topics.real import TopicsReal
    from tdlab.experiments.seed004_topics.real_text import MEASURE_ARMS

    rng = np.random.default_rng(0)
    words = ["apple", "banana", "boat", "ship", "sail", "bananas"]
    f = tmp_path / "text.txt"
    f.write_text("\n".join(" ".join(rng.choice(words, size=30)) for _ in range(20)) + "\n")
    exp = TopicsReal()
    cfg = exp.make_config("quick", ["corpus.source=text", f"corpus.path={f}", "corpus.min_count=1", "lda.topics=2",
                                    "lda.passes=1", "thetas=[0.5]", "train.seq_len=10", "train.batch=2",
                                    f"model.checkpoint={checkpoint}", "attn_windows=8"], members=1)
    r = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = r.summary
    assert s["status"] == "done" and "checkpoint" in s["notes"][0]
    assert s["measurements"]["corpus"]["skipped_words"] == 1  # "bananas"
    df = r.metrics()
    assert set(df["arm"]) == {MEASURE_ARMS["trained"], MEASURE_ARMS["untrained"]}  # nothing trained


# --- nothing in a checkpoint folder is executed ----------------------------------------------------------


def _planted(checkpoint, tmp_path, marker):
    """The checkpoint with an ``auto_map`` naming planted modules that each leave ``marker`` when run."""
    import json
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    conf = json.loads((ck / "config.json").read_text())
    conf["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"}
    (ck / "config.json").write_text(json.dumps(conf))
    for mod in ("configuration_evil", "modeling_evil"):
        (ck / f"{mod}.py").write_text(f"open({str(marker)!r}, 'a').write({mod!r})\n"
                                      "from transformers import BertConfig as EvilConfig, BertModel as EvilModel\n")
    return ck


@pytest.mark.parametrize("random_init", [False, True])
def test_a_config_naming_custom_code_is_refused_without_asking(checkpoint, tmp_path, monkeypatch, random_init):
    """transformers asked at the terminal whether to run the folder's code; answering y ran it."""
    marker = tmp_path / "code-ran"
    ck = _planted(checkpoint, tmp_path, marker)
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers asked to run the folder's code"))
    with pytest.raises(ConfigError, match="model.checkpoint: .*config.json names custom code") as err:
        HFEncoder(ck, VOCAB, random_init=random_init)
    assert "\n" not in str(err.value) and not marker.exists()


def test_transformers_is_told_never_to_trust_remote_code(checkpoint, monkeypatch):
    """Besides the refusal: every from_pretrained gets trust_remote_code=False (and safetensors only)."""
    seen = []
    for cls in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModel):
        real = cls.from_pretrained.__func__

        def spy(klass, *args, _real=real, **kwargs):
            seen.append((klass.__name__, kwargs))
            return _real(klass, *args, **kwargs)
        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    HFEncoder(checkpoint, VOCAB)
    HFEncoder(checkpoint, VOCAB, random_init=True)
    assert {name for name, _ in seen} >= {"AutoTokenizer", "AutoConfig", "AutoModel"}
    assert all(kw.get("trust_remote_code") is False and kw.get("local_files_only") is True for _, kw in seen)
    assert all(kw.get("use_safetensors") is True for name, kw in seen if name == "AutoModel")


class _Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_weights_are_never_loaded(checkpoint, tmp_path):
    """A malicious pytorch_model.bin was not executed but ended in a 137-line traceback: one line now."""
    import pickle
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    for f in ck.glob("*.safetensors"):
        f.unlink()
    marker = tmp_path / "unpickled"
    (ck / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Planted(str(marker))}))
    with pytest.raises(ConfigError, match="model.checkpoint: .*pytorch_model.bin and no model.safetensors") as err:
        HFEncoder(ck, VOCAB)
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_folder_transformers_cannot_read_is_one_line(checkpoint, tmp_path):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    (ck / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match="model.checkpoint: .*not a loadable local model") as err:
        HFEncoder(ck, VOCAB)
    assert "\n" not in str(err.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        HFEncoder(tmp_path / "file", VOCAB)
