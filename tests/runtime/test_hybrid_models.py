"""The hybrids with a recurrent state per request against HF: Qwen3-Next and Qwen3.5 (gated delta nets:
qwen3_next.py, gated_delta_net.py) and Granite 4.0 (Mamba-2 mixers: granite_hybrid.py, mamba2.py).  Logits of
prefills, chunked prefills, decodes and mixed steps over each request row's state; the oracle noticing the attention's
output gate, the convolution's carried inputs, Mamba-2's D skip and its per-group gated norm left out; both rules'
chunked forms against their token-by-token forms; and the scheduler serving them greedily as HF generates, with
chunked prefills, a request retracted for lack of KV and started again, and the settings that would rewind a state
refused.
"""

import random

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from paged_checks import (
    check_chunked_prefill,
    check_decode_pair,
    check_mixed_step,
    check_prefill_single_and_batch,
    check_triton_backend,
)
from scheduler_harness import collect, make_scheduler, run_until_idle, submit
from tiny_models import TINY_HYBRID_ARCHS

from radixlm.runtime.models import gated_delta_rule, loader, ssd_rule

pytest.importorskip("transformers.models.qwen3_5")


@pytest.fixture(scope="module", params=TINY_HYBRID_ARCHS)
def case(request, tiny_model):
    return family_case(request.param, tiny_model(request.param), 30)


def test_logits_of_prefills_chunks_decodes_and_mixed_steps(case):
    check_prefill_single_and_batch(case)
    check_chunked_prefill(case, 7)
    if case[0] in ("qwen3_5", "granitemoehybrid_dense"):   # the state steps of each kind; the dense models are quicker
        check_decode_pair(case, 12, 20)
        check_mixed_step(case, 12, 9)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", TINY_HYBRID_ARCHS)
def test_triton_backend_on_cuda(tiny_model, arch):
    """The attention layer over the Triton kernels, the delta nets in torch on the GPU: a prefill, then decodes."""
    check_triton_backend(family_case(arch, tiny_model(arch), 30), "cuda", split=22)


def test_config_fields(tiny_model):
    c = loader.read_model_config(tiny_model("qwen3_next"))
    la = c.linear_attention
    assert (la.linear_layers, la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim, la.conv_kernel) == (
        (0, 1, 3), 4, 8, 16, 8, 4)
    assert la.packed_projections and c.kv_layers == 1 and c.rotary_dim == 16 and c.qk_norm
    assert c.moe.sparse_layers == (0, 1, 2) and c.moe.shared_expert_intermediate_size == 48 and c.moe.shared_expert_gate
    dense = loader.read_model_config(tiny_model("qwen3_5"))
    assert dense.moe is None and not dense.linear_attention.packed_projections and dense.rotary_dim == 16
    g = loader.read_model_config(tiny_model("granitemoehybrid"))
    m = g.mamba2
    assert (m.mamba_layers, m.num_heads, m.head_dim, m.n_groups, m.d_state, m.conv_kernel, m.conv_bias) == (
        (0, 1, 3), 8, 16, 2, 8, 4, True)
    assert g.kv_layers == 1 and g.nope_layers == () and g.moe.shared_expert_intermediate_size == 48
    assert (g.embedding_multiplier, g.residual_multiplier, g.attention_multiplier, g.logits_scaling) == (3.0, 0.5, 0.2, 2.0)
    d = loader.read_model_config(tiny_model("granitemoehybrid_dense"))
    assert d.moe is None and d.intermediate_size == 48 and d.nope_layers == (0, 1, 2, 3) and d.mamba2.proj_bias
    assert d.attention_bias and d.o_proj_bias and d.mamba2.mamba_layers == (0, 1, 3)


def _leave_out(what, model, monkeypatch):
    from hybrid_models import forget_convolution_inputs

    from radixlm.runtime.models import mamba2, qwen3_next

    if what == "output gate":
        monkeypatch.setattr(qwen3_next.torch, "sigmoid", lambda g: torch.ones_like(g))
    elif what == "carried convolution inputs":
        forget_convolution_inputs(monkeypatch)
    elif what == "D skip":
        monkeypatch.setattr(mamba2.Mamba2Mixer, "D", property(lambda mixer: torch.zeros(mixer.m.num_heads)), raising=False)
    elif what == "per-group gated norm":
        whole = torch.nn.functional.rms_norm   # mamba2.F is torch.nn.functional itself
        monkeypatch.setattr(mamba2.F, "rms_norm", lambda x, shape, eps: whole(
            x.flatten(-2), (x.shape[-2] * x.shape[-1],), eps=eps).view(x.shape) if x.dim() == 3 else whole(x, shape,
                                                                                                          eps=eps))


@pytest.mark.parametrize("arch, what", [("qwen3_next", "output gate"), ("qwen3_next", "carried convolution inputs"),
                                        ("granitemoehybrid_dense", "D skip"),
                                        ("granitemoehybrid_dense", "per-group gated norm")])
def test_the_oracle_notices_each_feature_left_out(tiny_model, arch, what, monkeypatch):
    _, path, hf, ids = family_case(arch, tiny_model(arch), 24)
    ref = hf(ids)
    paged = Paged(path, seed=6)
    _leave_out(what, paged.model, monkeypatch)
    out = torch.cat([paged.step([(0, ids[:9])]), paged.step([(0, ids[9:])])])
    with pytest.raises(AssertionError):
        assert_close(out, ref, what)


def test_chunked_delta_rule_equals_the_token_by_token_rule():
    gen = torch.Generator().manual_seed(0)
    T, H, Dk, Dv = 150, 3, 8, 5   # more than two chunks
    q, k = (gated_delta_rule.l2_normalized(torch.randn(T, H, Dk, generator=gen, dtype=torch.float64)) for _ in "qk")
    v = torch.randn(T, H, Dv, generator=gen, dtype=torch.float64)
    g = -2 * torch.rand(T, H, generator=gen, dtype=torch.float64)
    beta = torch.rand(T, H, generator=gen, dtype=torch.float64)
    start = torch.randn(H, Dk, Dv, generator=gen, dtype=torch.float64)
    state, steps = start.clone(), start.clone()[None]
    out = gated_delta_rule.chunked(q, k, v, g, beta, state)
    want = torch.stack([gated_delta_rule.recurrent_step(q[t:t + 1], k[t:t + 1], v[t:t + 1], g[t:t + 1],
                                                        beta[t:t + 1], steps)[0] for t in range(T)])
    assert torch.allclose(out, want, atol=1e-10) and torch.allclose(state, steps[0], atol=1e-10)


def test_chunked_state_space_rule_equals_the_token_by_token_rule():
    gen = torch.Generator().manual_seed(0)
    T, H, P, N = 300, 3, 4, 5   # more than two chunks
    x = torch.randn(T, H, P, generator=gen, dtype=torch.float64)
    dt = torch.rand(T, H, generator=gen, dtype=torch.float64)
    A = -torch.rand(H, generator=gen, dtype=torch.float64)
    B, C = (torch.randn(T, H, N, generator=gen, dtype=torch.float64) for _ in "BC")
    start = torch.randn(H, P, N, generator=gen, dtype=torch.float64)
    state, steps = start.clone(), start.clone()[None]
    out = ssd_rule.chunked(x, dt, A, B, C, state)
    want = torch.stack([ssd_rule.recurrent_step(x[t:t + 1], dt[t:t + 1], A, B[t:t + 1], C[t:t + 1], steps)[0]
                        for t in range(T)])
    assert torch.allclose(out, want, atol=1e-10) and torch.allclose(state, steps[0], atol=1e-10)


def _runner(path, tokens):
    from radixlm.runtime.runner.model_runner import ModelRunner

    return ModelRunner(str(path), dtype="float32", max_total_tokens=tokens, num_rows=8)


def test_served_greedily_as_hf_generates_with_chunks_and_a_retraction(tiny_model):
    from tiny_models import hf_auto_class
    from transformers import AutoConfig

    path = tiny_model("qwen3_5")
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 380) for _ in range(n)] for n in (19, 23, 19)]
    prompts[2][:16] = prompts[0][:16]   # a shared prefix, where the first's chunks of 8 left a state snapshot
    sched = make_scheduler(_runner(path, 56), chunked_prefill_size=8, new_token_ratio=0.0, overlap_schedule=True)
    assert not sched.config.disable_radix_cache and sched.config.overlap_schedule   # plain decodes in flight
    for i, prompt in enumerate(prompts):
        submit(sched, str(i), prompt, 14, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    assert sched.stats.retracted > 0, "the KV budget should force a retraction"
    hf = hf_auto_class(AutoConfig.from_pretrained(str(path)).model_type).from_pretrained(
        str(path), dtype=torch.float32).eval()
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            want = hf.generate(torch.tensor([prompt]), max_new_tokens=14, min_new_tokens=14, do_sample=False)
        assert out[str(i)]["tokens"] == want[0, len(prompt):].tolist(), i
        assert out[str(i)]["cached_tokens"] == (16 if i == 2 else 0)


@pytest.mark.parametrize("setting", [{"speculative_algorithm": "ngram"}, {"kv_host_size": "1G", "kv_host_on_cpu": True}])
def test_settings_that_rewind_a_state_are_refused(tiny_model, setting):
    with pytest.raises(ValueError, match="recurrent state"):
        make_scheduler(_runner(tiny_model("qwen3_5"), 256), **setting)


def test_qwen3_5_moe_multimodal_checkpoint_serves_its_language_model(tmp_path_factory):
    from hybrid_models import qwen3_5_moe_multimodal
    from tiny_models import make_tiny_tokenizer, save_tiny_model

    tok = make_tiny_tokenizer()
    config = qwen3_5_moe_multimodal(len(tok), tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>"))
    path = save_tiny_model(tmp_path_factory, config, "tiny-qwen3_5_moe_mm", tok, seed=3000)
    c = loader.read_model_config(path)
    assert c.language_model == "Qwen3_5MoeForCausalLM" and c.moe.norm_topk_prob and c.moe.sparse_layers == (0, 1, 2, 3)
    case = family_case("qwen3_5_moe_mm", path, 24)
    check_prefill_single_and_batch(case)
    check_chunked_prefill(case, 9)


def test_state_rows_fit_a_share_of_the_free_memory(monkeypatch):
    from radixlm.runtime.runner import model_setup

    class States:
        def bytes_per_row(self):
            return 100

    monkeypatch.setattr(model_setup, "_free_bytes", lambda device: 4000)
    assert model_setup.recurrent_rows(States(), 264, "cpu") == 9   # a quarter of 4000 is 10 rows, one the scratch row
    assert model_setup.recurrent_rows(States(), 5, "cpu") == 5
    assert model_setup.recurrent_rows(States(), 264, "cpu", copies=2) == 4   # each row with its snapshot
