"""tie_word_embeddings as HF reads it (runtime/models/tied_head.py): a model class that declares no tied weights keeps
its own lm head with the flag set (NemotronH, Kimi Linear, Ling 3, xLSTM), one that does ties it (Qwen2), and Zamba2
with the flag off, which HF reads as untied shared blocks, is refused.  Oracle: HF's logits on the same checkpoint."""

import random

import pytest
from logits_oracle import HF, Paged, assert_close
from tiny_models import _SEED_ORDER, _hf_config, make_tiny_tokenizer, save_tiny_model
from transformers import AutoConfig

from radixlm.runtime.models.config import ModelConfig


def _checkpoint(tmp_path_factory, arch, tie):
    tok = make_tiny_tokenizer()
    config = _hf_config(arch, len(tok), tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>"))
    config.tie_word_embeddings = tie
    return save_tiny_model(tmp_path_factory, config, f"tied-{arch}", tok, 1000 + _SEED_ORDER.index(arch))


@pytest.mark.parametrize("arch,tied", [("nemotron_h", False), ("kimi_linear", False), ("bailing_hybrid", False),
                                       ("xlstm", False), ("qwen2", True)])
def test_the_flag_ties_only_where_hf_ties(tmp_path_factory, arch, tied):
    path = _checkpoint(tmp_path_factory, arch, True)
    assert ModelConfig.from_hf(AutoConfig.from_pretrained(path)).tie_word_embeddings is tied
    ids = random.Random(3).choices(range(3, 300), k=24)
    paged, hf = Paged(path), HF(path)
    out = paged.step([(0, ids[:15])])
    assert_close(out, hf(ids[:15]), f"{arch} prefill")
    assert_close(paged.step([(0, ids[15:])]), hf(ids)[15:], f"{arch} extend")


def test_zamba2_untied_is_refused(tmp_path_factory):
    path = _checkpoint(tmp_path_factory, "zamba2", False)
    with pytest.raises(ValueError, match="tie_word_embeddings=False is not supported"):
        ModelConfig.from_hf(AutoConfig.from_pretrained(path))
