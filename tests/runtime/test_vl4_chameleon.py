"""Chameleon served for text prompts (runtime/models/chameleon.py, chameleon_config.py).

Oracle: HF's ChameleonForConditionalGeneration on the same tiny random weights (VQ tokenizer included), called with
token ids only: its float64 logits with the derived bound (logits_oracle.py) on the text tokens' columns (HF sets the
image tokens' to its dtype's minimum: ours are float32's), and its greedy generate.  The tiny models are
tiny_vl4_models.py's, their image tokens' lm head rows scaled so that, unmasked, they would win.
"""

import random
import shutil

import pytest
import torch
from logits_oracle import HF, Paged, assert_close
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_vl4_models import IMAGE_TOKENS, make_vl4, vl4_config

from radixlm.runtime.models import chameleon
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama_like import OneRankLlama
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.parallel_block import layer_norm

LENGTH, DECODE_FROM = 20, 16
NAMES = ("chameleon", "chameleon_swin")


@pytest.fixture(scope="module")
def vl4(tmp_path_factory):
    built = {}

    def folder(name):
        if name not in built:
            built[name] = make_vl4(tmp_path_factory, name)
        return built[name]
    return folder


def _case(path):
    """(text columns, ids, HF's logits of the ids) of the model at `path`."""
    vocab = read_model_config(path).vocab_size
    text = [i for i in range(vocab) if i not in IMAGE_TOKENS]
    ids = random.Random(17).choices(range(vocab), k=LENGTH)
    return text, ids, HF(path)(ids)


def _assert_image_tokens_at_the_minimum(ours):
    assert (ours[:, list(IMAGE_TOKENS)] == torch.finfo(torch.float32).min).all()


@pytest.mark.parametrize("name", NAMES)
def test_prefill_extend_and_decode_match_hf(name, vl4):
    """Prefill, extend after a cached prefix, decode: HF's logits on the text columns, the image tokens' at the
    minimum (HF's too)."""
    path = vl4(name)
    assert read_model_config(path).chameleon.swin_norm == (name == "chameleon_swin")
    assert any(k.startswith("model.vqmodel.") for k, _ in iter_safetensors(path))
    text, ids, ref = _case(path)
    assert (ref.exact[:, list(IMAGE_TOKENS)] == torch.finfo(torch.float64).min).all()
    paged = Paged(path)
    ours = paged.step([(0, ids)])
    assert_close(ours[:, text], ref[:, text], "prefill")
    _assert_image_tokens_at_the_minimum(ours)
    paged.step([(1, ids[:11])])
    assert_close(paged.step([(1, ids[11:])])[:, text], ref[11:, text], "extend after a cached prefix of 11")
    paged.step([(2, ids[:DECODE_FROM])])
    for i in range(DECODE_FROM, LENGTH):
        ours = paged.step([(2, [ids[i]])])
        assert_close(ours[:, text], ref[i:i + 1, text], f"decode at {i}")
        _assert_image_tokens_at_the_minimum(ours)


def _without_qk_norm_bias(self, qk):
    return layer_norm(qk, self.qk_norm, None, chameleon.QK_NORM_EPS)


def _unmasked(self, hidden):
    return OneRankLlama.compute_logits(self, hidden)


@pytest.mark.parametrize("left_out,change", [
    ("the q/k norms' biases", (chameleon.ChameleonAttention, "norm_qk", _without_qk_norm_bias)),
    ("swin_norm's post-norm layer", (chameleon.ChameleonDecoderLayer, "forward",
                                     chameleon.LlamaDecoderLayer.forward)),
], ids=["qk_norm_bias", "swin_norm"])
def test_each_difference_matters(left_out, change, vl4, tmp_path, monkeypatch):
    """Each head's q/k LayerNorm bias and swin_norm's layer: leaving either out leaves the bound of HF's own float
    noise on the text columns."""
    path = vl4("chameleon_swin")
    text, ids, ref = _case(path)
    folder = tmp_path / "variant"
    shutil.copytree(path, folder)
    monkeypatch.setattr(*change)
    with pytest.raises(AssertionError):
        assert_close(Paged(folder, reference=True).step([(0, ids)])[:, text], ref[:, text], f"without {left_out}")


def test_unmasked_image_tokens_would_win(vl4, tmp_path, monkeypatch):
    """Without the mask our greedy token would be an image token at most positions: the serving test below binds it."""
    path = vl4("chameleon")
    _, ids, _ = _case(path)
    folder = tmp_path / "variant"
    shutil.copytree(path, folder)
    monkeypatch.setattr(chameleon.ChameleonForCausalLM, "compute_logits", _unmasked)
    winners = Paged(folder, reference=True).step([(0, ids)]).argmax(-1).tolist()
    assert sum(w in IMAGE_TOKENS for w in winners) > LENGTH // 2


@pytest.mark.parametrize("name", NAMES)
def test_greedy_serving_matches_hf_generate(name, vl4):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens: never an image token."""
    hf = assert_greedy_serving_matches_hf(vl4(name))
    assert type(hf).__name__ == "ChameleonForConditionalGeneration"


def test_image_tokens_outside_the_vocabulary_are_refused():
    config = vl4_config("chameleon", vocab=64, eos=1, pad=2)
    with pytest.raises(ValueError, match="image tokens must be ids of the 64-token vocabulary"):
        ModelConfig.from_hf(config)
