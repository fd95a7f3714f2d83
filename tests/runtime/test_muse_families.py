"""Muse Glimmer served for text prompts (runtime/models/muse.py, muse_config.py).

Oracle: HF's MuseGlimmerForConditionalGeneration on the same tiny random weights, vision tower included, called with
token ids only as a text chat is (its image and video ids among them, which HF embeds as id 0): its float64 logits
with the derived bound (logits_oracle.py) and its greedy generate.  The tiny model is tiny_muse_models.py's.
"""

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F
from logits_oracle import HF, Paged, assert_close
from paged_checks import check_difference_left_out
from scheduler_harness import assert_greedy_serving_matches_hf
from tiny_muse_models import IMAGE_ID, VIDEO_ID, make_muse, muse_config

from radixlm.runtime.models import muse
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.layers import gemma_rms_norm
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.models.multimodal_text import is_vision_weight
from radixlm.runtime.models.muse_config import MuseLayout
from radixlm.runtime.models.packed_linear import linear

LENGTH, DECODE_FROM = 20, 15


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(path, ids, HF's logits of the ids): the ids random, with the image id at 3 and 17, the video id at 9."""
    path = make_muse(tmp_path_factory, "muse_glimmer")
    ids = random.Random(17).choices(range(read_model_config(path).vocab_size), k=LENGTH)
    ids[3] = ids[17] = IMAGE_ID
    ids[9] = VIDEO_ID
    return path, ids, HF(path)(ids)


def test_prefill_extend_and_decode_match_hf(case):
    """Prefill, extend after a cached prefix, decode (an image id among the decoded tokens): HF's whole model's
    logits; past the window of 6 on the sliding layers."""
    path, ids, ref = case
    config = read_model_config(path)
    assert (config.architecture, config.language_model) == ("MuseGlimmerForConditionalGeneration",
                                                            "MuseGlimmerTextForCausalLM")
    assert (config.layer_windows, config.nope_layers, config.placeholders_as_pad) == ((6, None, 6), (2,),
                                                                                      (0, IMAGE_ID, VIDEO_ID))
    assert any(is_vision_weight(k) for k, _ in iter_safetensors(path))
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill")
    paged.step([(1, ids[:11])])
    assert_close(paged.step([(1, ids[11:])]), ref[11:], "extend after a cached prefix of 11")
    paged.step([(2, ids[:DECODE_FROM])])
    for i in range(DECODE_FROM, LENGTH):
        assert_close(paged.step([(2, [ids[i]])]), ref[i:i + 1], f"decode at {i}")


def _attention(gate: bool, qk_norm: bool):
    """MuseAttention.forward with its output gate or its q/k norms left out."""
    def forward(self, x, rotary, fb):
        t, hq, hkv = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(x, self.qkv_proj, self.qkv_bias).view(t, hq + 2 * hkv, self.head_dim)
        qk = muse.weightless_rms_norm(qkv[:, :hq + hkv], self.eps) if qk_norm else qkv[:, :hq + hkv].clone()
        if self.rope:
            qk = rotary.apply_(qk)
        o = self.attn_backend.forward(qk[:, :hq], qk[:, hq:], qkv[:, hq + hkv:], self.layer_id, fb).reshape(t, -1)
        return linear(o * torch.sigmoid(linear(x, self.gate_proj)) if gate else o, self.o_proj, self.o_bias)
    return forward


def _plain_rms_norm(x, weight, eps):
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * weight.float()).to(x.dtype)


def _unnormed_embeddings(self, fb):
    ids = torch.where(torch.isin(fb.input_ids, self.placeholders), 0, fb.input_ids)
    return self.embed_tokens[ids]


def _centered_final_norm(self, x):
    return gemma_rms_norm(x, self.norm, self.config.rms_norm_eps)


_LAYOUT = MuseLayout(output_multiplier=0.7, post_norm_eps=0.05)
DIFFERENCES = [
    ("the output gate", "patch", (muse.MuseAttention, "forward", _attention(gate=False, qk_norm=True))),
    ("the q/k norms", "patch", (muse.MuseAttention, "forward", _attention(gate=True, qk_norm=False))),
    ("qk_scale_factor", "fields", {"attention_multiplier": None}),
    ("the NoPE layer", "fields", {"nope_layers": ()}),
    ("the sliding windows", "fields", {"layer_windows": ()}),
    ("the image and video ids embedded as id 0", "fields", {"placeholders_as_pad": ()}),
    ("the embeddings' norm", "patch", (muse.MuseGlimmerTextForCausalLM, "embed_inputs", _unnormed_embeddings)),
    ("the layers' (1 + weight) norms", "patch", (muse, "gemma_rms_norm", _plain_rms_norm)),
    ("the final norm's plain weight", "patch", (muse.MuseGlimmerTextForCausalLM, "final_norm", _centered_final_norm)),
    ("post_norm_eps", "fields", {"muse": dataclasses.replace(_LAYOUT, post_norm_eps=1e-6)}),
    ("output_multiplier", "fields", {"muse": dataclasses.replace(_LAYOUT, output_multiplier=1.0)}),
    ("the final soft-cap", "fields", {"final_softcap": None}),
]


@pytest.mark.parametrize("left_out,how,change", DIFFERENCES, ids=[d[0] for d in DIFFERENCES])
def test_each_difference_matters(left_out, how, change, case, tmp_path, monkeypatch):
    """Each of Muse Glimmer's differences from its neighbours, left out in turn, leaves the bound of HF's own float
    noise."""
    check_difference_left_out(case, left_out, how, change, tmp_path, monkeypatch)


def test_greedy_serving_matches_hf_generate(case):
    """Through the real runner and scheduler (chunked prefill, a prompt reused from the radix cache), HF's greedy
    tokens."""
    assert type(assert_greedy_serving_matches_hf(case[0])).__name__ == "MuseGlimmerForConditionalGeneration"


@pytest.mark.parametrize("change,message", [
    (dict(hidden_activation="gelu_pytorch_tanh"), "hidden_activation 'gelu_pytorch_tanh' is not supported"),
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}), "rope_type 'linear'"),
    (dict(layer_rope_theta=[1e4, 0]), "layer_rope_theta must give one rope base"),
    (dict(final_logit_softcapping=0.0), "final_logit_softcapping 0.0 is not supported"),
])
def test_configs_we_do_not_run_are_refused(change, message):
    config = muse_config("muse_glimmer", vocab=64, eos=1, pad=2)
    for key, value in change.items():
        setattr(config.text_config, key, value)
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(config)
