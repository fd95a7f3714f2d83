"""GIT's text decoder and XLM's causal LMs served as causal LMs (tests/tiny_encdec_models.py; encdec.py,
encdec_config.py) against HF transformers on the same tiny random weights (logits_oracle.py), each served as prefills,
a chunk beside a decode and decodes; GIT through the real runner and scheduler against HF's greedy tokens (HF's XLM
generate appends a mask token to every step: not a causal LM's generation).  test_each_difference_matters proves the
oracle notices any one of what sets them apart left out.
"""

import pytest
import torch
from paged_checks import check_batched_prefills_chunks_and_decodes, check_difference_left_out, hf_logits_cache
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_more_models import TINY_ENCDEC_ARCHS

from radixlm.runtime.models import encdec
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gpt_config import GptLayout

LENGTH = 26
_BERT = encdec.BertDecoderForCausalLM
DIFFERENCES = [
    ("git", "the post-norm layers", "fields", {"gpt": GptLayout(positions=64, post_norm=False)}),
    ("git", "the embedding LayerNorm", "attr", (_BERT, "norm_embeddings", lambda self, x: x)),
    ("git", "the lm head's bias", "attr", (_BERT, "compute_logits",
                                           lambda self, h: torch.nn.functional.linear(h, self.lm_head).float())),
    ("xlm", "the post-norm layers", "fields", {"gpt": GptLayout(positions=64, post_norm=False)}),
    ("xlm", "the embedding LayerNorm", "attr", (_BERT, "norm_embeddings", lambda self, x: x)),
    ("xlm", "the exact gelu", "fields", {"hidden_act": "gelu_tanh"}),
    ("xlm", "the learned positions", "attr", (_BERT, "position_embeddings", lambda self, fb: 0.0)),
    ("xlm_sinusoidal", "the relu MLP", "fields", {"hidden_act": "gelu"}),
]


@pytest.fixture(scope="module")
def hf_logits(tiny_model):
    return hf_logits_cache(tiny_model, LENGTH)


@pytest.mark.parametrize("arch,left_out,how,change", DIFFERENCES, ids=[f"{d[0]}-{d[1]}" for d in DIFFERENCES])
def test_each_difference_matters(arch, left_out, how, change, hf_logits, tmp_path, monkeypatch):
    """The same weights run with one difference left out leave the bound of HF's own float noise."""
    check_difference_left_out(hf_logits(arch), left_out, how, change, tmp_path, monkeypatch)


@pytest.mark.parametrize("arch", TINY_ENCDEC_ARCHS)
def test_batched_prefills_chunks_and_decodes(arch, hf_logits):
    """Two prefills in one step, a chunk beside a decode, then both rows decoding (one HF run: each row reads a prefix
    of its prompt)."""
    path, ids, _ = hf_logits(arch)
    assert 4 not in ids or not arch.startswith("xlm")   # XLM's pad id: HF's pad-count rule is not a causal LM's
    check_batched_prefills_chunks_and_decodes(hf_logits(arch), LENGTH)


def test_greedy_serving_matches_hf(tiny_model):
    """GIT through the real runner and scheduler with chunked prefills and a radix cache hit: HF's greedy tokens."""
    assert_greedy_serving_matches_hf(tiny_model("git"))


def test_xlm_sinusoidal_table_computed_where_missing(tiny_model, tmp_path, monkeypatch):
    """An XLM checkpoint with sinusoidal_embeddings but without its table: HF computes its interleaved sinusoids, and
    so do we; zeros, or Pegasus's sines-then-cosines order, leave the bound."""
    import shutil

    from logits_oracle import HF, Paged, assert_close
    from safetensors.torch import load_file, save_file

    from radixlm.runtime.models import bart_decoder

    folder = tmp_path / "no-table"
    shutil.copytree(tiny_model("xlm_sinusoidal"), folder)
    weights = load_file(folder / "model.safetensors")
    del weights["transformer.position_embeddings.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    ids = list(range(5, 5 + LENGTH))
    ref = HF(folder)(ids)
    assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, "sinusoids computed")
    for name, table in (("zeros", lambda rows, dim: torch.zeros(rows, dim)), ("pegasus", bart_decoder.pegasus_positions)):
        monkeypatch.setattr(encdec, "xlm_positions", table)
        shutil.copytree(folder, tmp_path / name)   # Paged keeps a model per folder
        with pytest.raises(AssertionError):
            assert_close(Paged(tmp_path / name, reference=True).step([(0, ids)]), ref, name)


def test_refusals():
    """A bidirectional XLM (causal=False), XLM's adaptive softmax head and an XLM decoder are refused at load."""
    import transformers

    bad = [transformers.XLMConfig(architectures=["XLMWithLMHeadModel"]),
           transformers.XLMConfig(causal=True, asm=True, architectures=["XLMWithLMHeadModel"]),
           transformers.XLMConfig(causal=True, is_encoder=False, architectures=["XLMWithLMHeadModel"])]
    for config, match in zip(bad, ("causal=False", "asm=True", "is_encoder=False"), strict=True):
        with pytest.raises(ValueError, match=match):
            ModelConfig.from_hf(config)


def test_xlm_plain_call_adds_no_language_embedding(hf_logits, tmp_path, monkeypatch):
    """HF's plain input_ids call passes no langs, so no language embedding: adding lang_id's row (what HF's generate
    passes beside its mask token) leaves the bound."""
    from safetensors.torch import load_file

    path = hf_logits("xlm")[0]
    row = load_file(path / "model.safetensors")["transformer.lang_embeddings.weight"][1]   # the config's lang_id
    norm = _BERT.norm_embeddings
    change = (_BERT, "norm_embeddings", lambda self, x: norm(self, x + row))
    check_difference_left_out(hf_logits("xlm"), "no language embedding", "attr", change, tmp_path, monkeypatch)
