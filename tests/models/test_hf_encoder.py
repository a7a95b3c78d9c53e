"""HFEncoder on tiny randomly initialised models saved to tmp_path (no download), one of each architecture the
seed measures (BERT, RoBERTa, ALBERT, ELECTRA, BART), each with a tiny tokenizer of its family (WordPiece,
byte-level BPE, SentencePiece unigram): the word embeddings are the saved token table's rows of the words' mid-text
tokens, the window attention is the model's own attention (an independent forward on the tokenizer's own encoding
of the text) at the words' first pieces, words split into pieces (or unknown) skipped and counted, the random-init
control differs; an architecture outside the table, a missing folder, custom code, pickled weights are one-line
ConfigErrors; topics-real runs end to end on a checkpoint of each architecture."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from tdlab.config import ConfigError  # noqa: E402
from tdlab.models.hf_encoder import READERS, HFEncoder  # noqa: E402

T = transformers
WORDS = ["apple", "banana", "boat", "ship", "sail", "the"]  # whole-word tokens of every tiny tokenizer
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "apple", "banana", "##s", "boat", "ship", "sail", "the"]


def wordpiece(cls):
    """BERT / ELECTRA: WordPiece over PIECES ("bananas" = banana ##s, an unknown word = [UNK])."""
    return cls(vocab={t: i for i, t in enumerate(PIECES)})


def byte_level_bpe(cls):
    """RoBERTa / BART: byte-level BPE whose merges spell every word only after a space ("Ġapple", as mid-text;
    "apple" at the start of a text is five letters), "s" a piece of its own."""
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])}
    for c in sorted(set("".join(WORDS)) | {"s", "Ġ"}):
        vocab.setdefault(c, len(vocab))
    merges = []
    for w in WORDS:
        cur = "Ġ"
        for c in w:
            merges.append((cur, c))
            cur += c
            vocab.setdefault(cur, len(vocab))
    return cls(vocab=vocab, merges=list(dict.fromkeys(merges)))


def unigram(cls):
    """ALBERT: a SentencePiece unigram model with pieces "▁word", "s" and single letters."""
    specials = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)]
    return cls(
        vocab=specials
        + [("▁" + w, -1.0) for w in WORDS]
        + [("s", -2.0), ("▁", -3.0)]
        + [(c, -5.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    )


SIZES = {
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "hidden_size": 16,
    "intermediate_size": 32,
    "max_position_embeddings": 64,
}
# architecture -> (tokenizer, config of vocabulary size V, spelling of a word mid-text, the token table's key in
# model.safetensors): read independently of the reader table
ARCHS = {
    "bert": (
        lambda: wordpiece(T.BertTokenizer),
        lambda V: T.BertConfig(vocab_size=V, **SIZES),
        "{}",
        "embeddings.word_embeddings.weight",
    ),
    "roberta": (
        lambda: byte_level_bpe(T.RobertaTokenizer),
        lambda V: T.RobertaConfig(
            vocab_size=V, **{**SIZES, "max_position_embeddings": 66}, pad_token_id=1, bos_token_id=0, eos_token_id=2
        ),
        "Ġ{}",
        "embeddings.word_embeddings.weight",
    ),
    "albert": (
        lambda: unigram(T.AlbertTokenizer),
        lambda V: T.AlbertConfig(vocab_size=V, embedding_size=8, **SIZES),
        "▁{}",
        "embeddings.word_embeddings.weight",
    ),
    "electra": (
        lambda: wordpiece(T.ElectraTokenizer),
        lambda V: T.ElectraConfig(vocab_size=V, embedding_size=8, **SIZES),
        "{}",
        "embeddings.word_embeddings.weight",
    ),
    "bart": (
        lambda: byte_level_bpe(T.BartTokenizer),
        lambda V: T.BartConfig(
            vocab_size=V,
            d_model=16,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_position_embeddings=64,
        ),
        "Ġ{}",
        "shared.weight",
    ),
}


def save_tiny(kind: str, d) -> None:
    """A tiny randomly initialised ``kind`` model (2 layers, 2 heads, width 16; ALBERT's and ELECTRA's token table
    8 wide) and its tokenizer, saved to ``d`` (safetensors)."""
    tok_fn, cfg_fn, _, _ = ARCHS[kind]
    tok = tok_fn()
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    T.AutoModel.from_config(cfg_fn(len(tok))).save_pretrained(str(d))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    save_tiny("bert", d)
    return d


@pytest.fixture(scope="module", params=list(ARCHS))
def tiny(request, tmp_path_factory):
    """``(kind, folder)`` of a tiny saved checkpoint of each architecture."""
    d = tmp_path_factory.mktemp(request.param)
    save_tiny(request.param, d)
    return request.param, d


VOCAB = ["apple", "bananas", "boat", "zebra", "ship", "sail"]  # "bananas" 2 pieces, "zebra" [UNK] or letters
SINGLE = [0, 2, 4, 5]  # the words with a token of their own in every tiny tokenizer
WINDOWS = [[0, 1, 2, 4, 3], [5, 4, 0, 2, 1]]  # corpus word ids


def test_the_reader_table_is_the_seeds_five_architectures():
    assert set(READERS) == {"bert", "roberta", "albert", "electra", "bart"}
    assert {k: r.word_prefix for k, r in READERS.items()} == {
        "bert": "",
        "roberta": " ",
        "albert": "",
        "electra": "",
        "bart": " ",
    }


def test_word_embeddings_are_the_saved_token_tables_rows(tiny):
    """Against the safetensors file itself: the row of each word's mid-text token (RoBERTa, BART: "Ġapple"),
    the table's own width (ALBERT, ELECTRA: embedding_size 8, not hidden 16); other words skipped."""
    from safetensors.torch import load_file

    kind, d = tiny
    _, _, spell, key = ARCHS[kind]
    enc = HFEncoder(d, VOCAB, offset=2)
    assert enc.skipped == 2 and enc.excluded == frozenset({1, 3})
    table = load_file(str(d / "model.safetensors"))[key].double()
    emb = enc.word_embeddings()
    assert emb.shape == (1, len(VOCAB), 8 if kind in ("albert", "electra") else 16)
    for w in SINGLE:
        torch.testing.assert_close(emb[0, w], table[enc.tokenizer.convert_tokens_to_ids(spell.format(VOCAB[w]))])
    assert torch.isnan(emb[0, [1, 3]]).all()
    if spell.startswith("Ġ"):  # the leading space matters: "apple" at the start of a text is not Ġapple
        assert len(enc.tokenizer("apple", add_special_tokens=False)["input_ids"]) > 1


def test_window_attention_is_the_models_own_attention_at_the_first_pieces(tiny):
    """Against an independent forward: the tokenizer's own encoding of the window's text (its special tokens
    around it, every word after a space), the model's own attentions (BART: the full encoder-decoder forward's
    encoder_attentions), restricted to each word's first piece. Rows are the model's weights, not renormalised:
    with the mass on the special tokens and later pieces they sum to 1."""
    kind, d = tiny
    enc = HFEncoder(d, VOCAB, offset=2)
    att = enc.window_attention(torch.tensor(WINDOWS) + 2)
    assert att.shape == (1, 2, 2, 2, 5, 5)
    ref_model = T.AutoModel.from_pretrained(str(d), attn_implementation="eager").eval()
    tok = enc.tokenizer
    for b, row in enumerate(WINDOWS):
        coded = tok(" " + " ".join(VOCAB[w] for w in row))
        ids, words = coded["input_ids"], coded.word_ids()
        first = [words.index(i) for i in range(len(row))]
        open_, close = ("<s>", "</s>") if kind in ("roberta", "bart") else ("[CLS]", "[SEP]")
        assert tok.convert_ids_to_tokens([ids[0], ids[-1]]) == [open_, close]
        with torch.no_grad():
            out = ref_model(input_ids=torch.tensor([ids]), output_attentions=True)
        ref = out.encoder_attentions if kind == "bart" else out.attentions
        assert len(ref) == 2
        for layer in range(2):
            full = ref[layer][0]  # (H, T', T')
            torch.testing.assert_close(full.sum(-1), torch.ones(full.shape[:2]))
            torch.testing.assert_close(att[0, b, layer], full[:, first][:, :, first])
            rest = full[:, first].sum(-1) - full[:, first][:, :, first].sum(-1)
            torch.testing.assert_close(att[0, b, layer].sum(-1) + rest, torch.ones(2, 5))


def test_the_hooked_forward_is_the_models_eager_one_bit_for_bit(tiny):
    """``forward`` runs transformers' eager attention through hook points: the same last hidden state and
    attention patterns as the model's own eager run, bit for bit, and the model is eager again after."""
    kind, d = tiny
    enc = HFEncoder(d, VOCAB, offset=2)
    ids = torch.tensor([[enc._open, 5, 8, 9, 6, enc._close]])
    encoder = enc.model.get_encoder() if kind == "bart" else enc.model
    with torch.no_grad():
        want = encoder(input_ids=ids, output_attentions=True)
        got, cache = enc.run_with_cache(ids[None])
    assert torch.equal(got[0], want.last_hidden_state)
    for layer, att in enumerate(want.attentions):
        assert torch.equal(cache[f"blocks.{layer}.attn.hook_pattern"][0], att)
    assert enc.model.config._attn_implementation == "eager"


def test_the_control_is_the_same_architecture_with_fresh_weights(tiny):
    _, d = tiny
    enc = HFEncoder(d, VOCAB, offset=2)
    control = HFEncoder(d, VOCAB, offset=2, random_init=True, seed=3)
    assert type(control.model) is type(enc.model)
    assert not torch.allclose(control.word_embeddings()[0, 0], enc.word_embeddings()[0, 0])
    again = HFEncoder(d, VOCAB, offset=2, random_init=True, seed=3)
    torch.testing.assert_close(again.word_embeddings(), control.word_embeddings(), equal_nan=True)
    torch.testing.assert_close(
        again.window_attention(torch.tensor(WINDOWS) + 2), control.window_attention(torch.tensor(WINDOWS) + 2)
    )


def test_an_id_outside_the_words_is_the_unknown_token(checkpoint):
    enc = HFEncoder(checkpoint, VOCAB, offset=2)
    att = enc.window_attention(torch.tensor([[2, 3, 4, 6, 0]]))  # apple bananas boat ship, then id 0: [UNK]
    ids = [2, 5, 6, 7, 8, 9, 1, 3]  # [CLS] apple banana ##s boat ship [UNK] [SEP]
    ref = enc.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    first = [1, 2, 4, 5, 6]
    for layer in range(2):
        torch.testing.assert_close(att[0, 0, layer], ref[layer][0][:, first][:, :, first].float())


def test_an_architecture_outside_the_table_is_refused_naming_the_supported_ones(tmp_path):
    d = tmp_path / "gpt2"
    wordpiece(T.BertTokenizer).save_pretrained(str(d))
    T.GPT2Model(T.GPT2Config(vocab_size=len(PIECES), n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(
        str(d)
    )
    for random_init in (False, True):
        with pytest.raises(
            ConfigError,
            match=r"model\.checkpoint: .*'gpt2' model; .*bert \(BERT\), roberta \(RoBERTa\), albert \(ALBERT\), electra \(ELECTRA\), bart \(BART\)",
        ) as err:
            HFEncoder(d, VOCAB, random_init=random_init)
        assert "\n" not in str(err.value)


def test_a_window_longer_than_the_positions_names_train_seq_len(tiny):
    """RoBERTa's positions start after the padding id: 66 - 2 = 64 tokens fit, as many as the others' 64."""
    _, d = tiny
    enc = HFEncoder(d, VOCAB, offset=2)
    assert enc.max_tokens == 64
    assert enc.window_attention(torch.full((1, 62), 2)).shape == (1, 1, 2, 2, 62, 62)  # 62 words + 2 specials
    with pytest.raises(ConfigError, match=r"train\.seq_len: a window of 63 words is 65 .* tokens"):
        enc.window_attention(torch.full((1, 63), 2))


def test_missing_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("model.checkpoint")):
        HFEncoder(tmp_path / "nope", VOCAB)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=re.escape("model.checkpoint")):
        HFEncoder(tmp_path / "empty", VOCAB)


def test_topics_real_measures_a_local_checkpoint_end_to_end(tiny, tmp_path, monkeypatch):
    """A planted text file whose words are the checkpoint's tokens, a checkpoint of each architecture: the run
    trains nothing and measures it (figures drawn for one architecture only: they do not depend on it)."""
    kind, checkpoint = tiny
    from tdlab.experiments.paper004_topics.common.real_text import MEASURE_ARMS
    from tdlab.experiments.paper004_topics.real import TopicsReal
    from tdlab.runner import execute

    rng = np.random.default_rng(0)
    words = ["apple", "banana", "boat", "ship", "sail", "bananas"]
    f = tmp_path / "text.txt"
    f.write_text("\n".join(" ".join(rng.choice(words, size=30)) for _ in range(20)) + "\n")
    exp = TopicsReal()
    if kind != "bert":
        monkeypatch.setattr(exp, "plot", lambda *args: [])
    cfg = exp.make_config(
        "quick",
        [
            "corpus.source=text",
            f"corpus.path={f}",
            "corpus.min_count=1",
            "lda.topics=2",
            "lda.passes=1",
            "thetas=[0.5]",
            "train.seq_len=10",
            "train.batch=2",
            f"model.checkpoint={checkpoint}",
            "attn_windows=4",
        ],
        members=1,
    )
    r = execute(exp, cfg, "quick", tmp_path / "runs", progress=False)
    s = r.summary
    assert s["status"] == "done" and "checkpoint" in s["notes"][0]
    assert s["measurements"]["corpus"]["skipped_words"] == 1  # "bananas"
    assert s["measurements"]["corpus"]["checkpoint"]["architecture"] == READERS[kind].name
    assert any(n.startswith(f"Checkpoint {READERS[kind].name}: the embedding is") for n in s["notes"])
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
        (ck / f"{mod}.py").write_text(
            f"open({str(marker)!r}, 'a').write({mod!r})\n"
            "from transformers import BertConfig as EvilConfig, BertModel as EvilModel\n"
        )
    return ck


@pytest.mark.parametrize("random_init", [False, True])
def test_a_config_naming_custom_code_is_refused_without_asking(checkpoint, tmp_path, monkeypatch, random_init):
    """transformers asked at the terminal whether to run the folder's code; answering y ran it."""
    marker = tmp_path / "code-ran"
    ck = _planted(checkpoint, tmp_path, marker)
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers asked to run the folder's code"))
    with pytest.raises(ConfigError, match=r"model\.checkpoint: .*config\.json names custom code") as err:
        HFEncoder(ck, VOCAB, random_init=random_init)
    assert "\n" not in str(err.value) and not marker.exists()


def test_transformers_is_told_never_to_trust_remote_code(checkpoint, monkeypatch):
    """Besides the refusal: every from_pretrained gets trust_remote_code=False; no model loader is given the
    folder (tdlab reads the weights from the safetensors files it checked)."""
    seen = []
    for cls in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModel):
        real = cls.from_pretrained.__func__

        def spy(klass, *args, _real=real, **kwargs):
            seen.append((klass.__name__, kwargs))
            return _real(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    HFEncoder(checkpoint, VOCAB)
    HFEncoder(checkpoint, VOCAB, random_init=True)
    assert {name for name, _ in seen} == {"AutoTokenizer", "AutoConfig"}
    assert all(kw.get("trust_remote_code") is False and kw.get("local_files_only") is True for _, kw in seen)


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
    with pytest.raises(ConfigError, match=r"model\.checkpoint: .*pytorch_model\.bin and no model\.safetensors") as err:
        HFEncoder(ck, VOCAB)
    assert "\n" not in str(err.value) and not marker.exists()


def test_a_folder_transformers_cannot_read_is_one_line(checkpoint, tmp_path):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(checkpoint, ck)
    (ck / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ConfigError, match=r"model\.checkpoint: .*not a loadable local model") as err:
        HFEncoder(ck, VOCAB)
    assert "\n" not in str(err.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        HFEncoder(tmp_path / "file", VOCAB)
