"""Muse Glimmer's and Muse Spark's differences from their neighbours, each as test_muse_families.py's
test_each_difference_matters leaves it out: (what, how, change) with how "fields" (ModelConfig fields), "layout"
(MuseLayout fields; "spark": its MuseSparkMoE fields) or "patch" (a monkeypatch.setattr argument tuple)."""

import torch
import torch.nn.functional as F

from radixlm.runtime.models import muse, muse_spark
from radixlm.runtime.models.layers import gemma_rms_norm
from radixlm.runtime.models.packed_linear import linear


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


def _choose(multiplier: bool, bias: bool):
    """MuseSparkMoE.choose with the router's output_multiplier or the correction bias left out."""
    def choose(self, x):
        scores = torch.sigmoid(F.linear(x.float(), self.router) * (self.multiplier if multiplier else 1.0))
        ids = torch.topk(scores + (self.correction_bias if bias else 0.0), self.top_k, dim=-1, sorted=False)[1]
        weights = scores.gather(1, ids)
        return weights / (weights.sum(-1, keepdim=True) + muse_spark.TOPK_EPS) * self.scaling, ids
    return choose


def _plain_residual(gate, temperature, residual, h):
    return residual + h


GLIMMER_DIFFERENCES = [
    ("the output gate", "patch", (muse.MuseAttention, "forward", _attention(gate=False, qk_norm=True))),
    ("the q/k norms", "patch", (muse.MuseAttention, "forward", _attention(gate=True, qk_norm=False))),
    ("qk_scale_factor", "fields", {"attention_multiplier": None}),
    ("the NoPE layer", "fields", {"nope_layers": ()}),
    ("the sliding windows", "fields", {"layer_windows": ()}),
    ("the image and video ids embedded as id 0", "fields", {"placeholders_as_pad": ()}),
    ("the embeddings' norm", "patch", (muse.MuseGlimmerTextForCausalLM, "embed_inputs", _unnormed_embeddings)),
    ("the layers' (1 + weight) norms", "patch", (muse, "gemma_rms_norm", _plain_rms_norm)),
    ("the final norm's plain weight", "patch", (muse.MuseGlimmerTextForCausalLM, "final_norm", _centered_final_norm)),
    ("post_norm_eps", "layout", {"post_norm_eps": 1e-6}),
    ("output_multiplier", "layout", {"output_multiplier": 1.0}),
    ("the final soft-cap", "fields", {"final_softcap": None}),
    ("the untied lm head of a text_config that ties", "fields", {"tie_word_embeddings": True}),
]
SPARK_DIFFERENCES = [
    ("the attention output's norm", "patch", (muse_spark.MuseSparkAttention, "forward", muse.MuseAttention.forward)),
    ("the residual gates", "patch", (muse_spark, "residual_gate", _plain_residual)),
    ("the input-scaled norms", "patch", (muse_spark, "input_scaled_rms_norm", gemma_rms_norm)),
    ("the layers' and experts' (1 + weight) norms", "patch", (muse_spark, "centered_rms_norm", _plain_rms_norm)),
    ("the router's output_multiplier", "patch", (muse_spark.MuseSparkMoE, "choose", _choose(False, True))),
    ("the correction bias", "patch", (muse_spark.MuseSparkMoE, "choose", _choose(True, False))),
    ("routed_scaling_factor", "layout", {"spark": {"routed_scaling_factor": 1.0}}),
    ("residual_gate_temperature", "layout", {"spark": {"residual_gate_temperature": 1.0}}),
    ("the audio id embedded as id 0", "fields", {"placeholders_as_pad": (0, 40, 41)}),
    ("the untied lm head of a config that ties", "fields", {"tie_word_embeddings": True}),
]
