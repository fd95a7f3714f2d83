"""The decoders of encoder-decoder families served as causal LMs (tests/tiny_decoder_models.py): the BART-like ones
(bart_decoder.py, decoder_config.py) and the BERT-like ones (bert_decoder.py, bert_config.py) against HF transformers on
the same tiny random weights (logits_oracle.py), each served as prefills, a chunk beside a decode and decodes; one of
each kind through the real runner and scheduler against HF's greedy tokens.  test_each_difference_matters proves the
oracle notices any one of what sets them apart left out.
"""

import dataclasses

import pytest
import torch
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_DECODER_ARCHS

from radixlm.runtime.models import bart_decoder, bert_decoder, roformer
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.decoder_config import DecoderLayout
from radixlm.runtime.models.gpt_config import GptLayout

LENGTH = 26
_POST = GptLayout(positions=66, position_offset=2, post_norm=True)
_BART = DecoderLayout(embed_norm="after_positions")
_BART_CLASS, _BERT = bart_decoder.BartDecoderForCausalLM, bert_decoder.BertDecoderForCausalLM
_ROBERTA = DecoderLayout(embed_norm="after_positions", pad_row=5, type_rows=2, head_transform=True, head_act="gelu")
# (arch, what is left out, how: "json" config.json keys to set, "fields" ModelConfig fields to replace or "attr" an
# attribute to monkeypatch, value)
DIFFERENCES = [
    ("bart", "the post-norm layers", "fields", {"gpt": dataclasses.replace(_POST, post_norm=False)}),
    ("bart", "the position offset of 2", "fields", {"gpt": dataclasses.replace(_POST, position_offset=0)}),
    ("bart", "layernorm_embedding", "attr", (_BART_CLASS, "norm_embeddings", lambda self, x: x)),
    ("bart", "the embedding scale", "fields", {"embedding_multiplier": 1.0}),
    ("mbart", "the final layer_norm", "attr", (_BART_CLASS, "final_norm", lambda self, x: x)),
    ("blenderbot_small", "layernorm_embedding before the positions", "fields", {"decoder": _BART}),
    ("bigbird_pegasus", "its own lm head", "fields", {"tie_word_embeddings": True}),
    ("bert", "the token type 0 embedding", "attr", (_BERT, "type_embedding", lambda self: 0.0)),
    ("bert", "the head transform", "attr", (_BERT, "transform_head", lambda self, x: x)),
    ("bert", "the embedding LayerNorm", "attr", (_BERT, "norm_embeddings", lambda self, x: x)),
    ("roberta", "positions from pad_token_id + 1", "fields", {"gpt": GptLayout(positions=64, post_norm=True)}),
    ("roberta", "the head's exact gelu", "fields", {"decoder": dataclasses.replace(_ROBERTA, head_act="relu")}),
    ("megatron_bert", "the pre-norm layers", "fields", {"gpt": GptLayout(positions=64, post_norm=True)}),
    ("bigbird", "the rescaled embeddings", "fields", {"embedding_multiplier": 1.0}),
    ("xmod", "the default language's adapter", "fields",
     {"decoder": dataclasses.replace(_ROBERTA, xmod_adapter=("en_XX", 8, True))}),
    ("xmod", "the adapter's residual after the norm", "fields",
     {"decoder": dataclasses.replace(_ROBERTA, xmod_adapter=("de_DE", 8, False))}),
    ("roc_bert", "the shape and pronunciation rows", "attr",
     (bert_decoder.RoCBertDecoderForCausalLM, "glyph_rows",
      lambda self, T: [torch.zeros(T, table.shape[1]) for table in self.glyphs.values()])),
    ("roformer", "its table as the rotary cache", "attr", (roformer.RoFormerDecoderForCausalLM, "use_table",
                                                           lambda self, table: None)),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", [arch for arch in TINY_DECODER_ARCHS if arch != "trocr_sinusoidal"])
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """Two prefills in one step, a chunk beside a decode, then both rows decoding (one HF run: each row reads a prefix
    of its prompt)."""
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


@pytest.mark.parametrize("arch", ["mbart", "roberta"])
def test_greedy_serving_matches_hf(arch, tiny_model):
    """Through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    assert_greedy_serving_matches_hf(tiny_model(arch))


def _without_table(tiny_model, arch, table, tmp_path):
    """A copy of the tiny `arch` without the checkpoint tensor `table` -> (folder, ids, HF's logits): HF computes its
    sinusoids."""
    import shutil

    from logits_oracle import HF
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "no-table"
    shutil.copytree(tiny_model(arch), folder)
    weights = load_file(folder / "model.safetensors")
    del weights[table]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    ids = list(range(5, 5 + LENGTH))
    return folder, ids, HF(folder)(ids)


@pytest.mark.parametrize("arch,table,module", [("pegasus", "model.decoder.embed_positions.weight", bart_decoder),
                                               ("roformer", "roformer.encoder.embed_positions.weight", roformer)])
def test_sinusoidal_table_computed_where_missing(arch, table, module, tiny_model, tmp_path, monkeypatch):
    """A Pegasus or RoFormer checkpoint without its sinusoidal table: HF computes the sinusoids, and so do we (zeros
    leave the bound)."""
    import shutil

    from logits_oracle import Paged, assert_close

    folder, ids, ref = _without_table(tiny_model, arch, table, tmp_path)
    assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, "sinusoids computed")
    monkeypatch.setattr(module, "pegasus_positions", lambda rows, dim: torch.zeros(rows, dim))
    shutil.copytree(folder, tmp_path / "zeros")   # Paged keeps a model per folder
    with pytest.raises(AssertionError):
        assert_close(Paged(tmp_path / "zeros", reference=True).step([(0, ids)]), ref, "without the sinusoids")


def test_roformer_interleaved_pairs_matter(tiny_model, tmp_path, monkeypatch):
    """With HF's sinusoids (the tiny checkpoint's random table barely rotates), q and k rotated as rotate-half pairs
    instead of interleaved ones leave the bound."""
    from logits_oracle import Paged, assert_close

    folder, ids, ref = _without_table(tiny_model, "roformer", "roformer.encoder.embed_positions.weight", tmp_path)
    monkeypatch.setattr(roformer, "interleaved_to_half_order", lambda head_dim, rope_dim: torch.arange(head_dim))
    with pytest.raises(AssertionError):
        assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, "rotate-half pairs")


def test_trocr_sinusoidal_positions(tiny_model, tmp_path, monkeypatch):
    """TrOCR's fairseq sinusoids from pad_token_id + 1 (HF's from_pretrained cannot build them off the meta device, so
    the oracle is HF's model from its config with the checkpoint's weights): a prefill, a chunk and a decode within
    the bound, a zero table leaves it."""
    import shutil

    import transformers
    from logits_oracle import Paged, Ref, assert_close
    from safetensors.torch import load_file

    path = tiny_model("trocr_sinusoidal")
    config = transformers.AutoConfig.from_pretrained(str(path))

    def hf(dtype):
        model = transformers.TrOCRForCausalLM(config).eval()
        model.load_state_dict(load_file(path / "model.safetensors"), strict=False)   # the lm head: tied
        return model.to(dtype)

    ids = list(range(5, 5 + LENGTH))
    with torch.no_grad():
        x = torch.tensor([ids])
        ref = Ref(hf(torch.float64)(x).logits[0], hf(torch.float32)(x).logits[0].double())
    paged = Paged(path)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "prefill")
    assert_close(paged.step([(0, ids[20:25])]), ref[20:25], "chunk")
    assert_close(paged.step([(0, ids[25:])]), ref[25:], "decode")
    monkeypatch.setattr(bart_decoder, "sinusoidal_positions", lambda rows, dim: torch.zeros(rows, dim))
    shutil.copytree(path, tmp_path / "zeros")   # Paged keeps a model per folder
    with pytest.raises(AssertionError):
        assert_close(Paged(tmp_path / "zeros", reference=True).step([(0, ids)]), ref, "without the sinusoids")


def test_refusals():
    """MVP's prompt tuning, TrOCR's sinusoidal positions without a pad_token_id to count from, a Marian decoder
    vocabulary of its own, an X-MOD without default_language, a BERT without is_decoder (bidirectional), ERNIE's task
    embeddings and cross-attention are refused at load."""
    import transformers

    bad = [transformers.MvpConfig(use_prompt=True, architectures=["MvpForCausalLM"]),
           transformers.TrOCRConfig(use_learned_position_embeddings=False, pad_token_id=None,
                                    architectures=["TrOCRForCausalLM"]),
           transformers.MarianConfig(vocab_size=100, decoder_vocab_size=90, architectures=["MarianForCausalLM"])]
    bad += [transformers.XmodConfig(is_decoder=True, architectures=["XmodForCausalLM"]),
            transformers.BertConfig(architectures=["BertLMHeadModel"]),
            transformers.ErnieConfig(is_decoder=True, use_task_id=True, architectures=["ErnieForCausalLM"]),
            transformers.BertConfig(is_decoder=True, add_cross_attention=True, architectures=["BertLMHeadModel"])]
    matches = ("use_prompt", "pad_token_id", "decoder_vocab_size", "default_language", "is_decoder", "use_task_id",
               "add_cross_attention")
    for config, match in zip(bad, matches, strict=True):
        with pytest.raises(ValueError, match=match):
            ModelConfig.from_hf(config)
