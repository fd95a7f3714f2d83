"""gpt-oss split over two gloo ranks: `--tp-size 2` (query heads with their q/k/v biases and sinks, o_proj columns,
every expert's width with its b13 rows) and `--tp-size 2 --ep-size 2` (the experts split whole, with their biases),
on the tiny random gpt-oss (tiny_models.py: sliding, full, sliding layers with a window of 6, sinks, YaRN, biases
everywhere, 8 experts top 2, a binding SwiGLU clamp).

Oracles: the full checkpoint, which the ranks' shards must rebuild (a row-parallel bias, o_proj's and b2, held
whole by rank 0 and as zeros by the others, so that the all-reduced sum adds it once); HF transformers in float64,
within NOISE_FACTOR times the single process's own float32 error (test_tp_logits.py derives the bound); the single
process's greedy tokens and expert load through Engine, on an MXFP4 checkpoint (dequantized, then sharded)."""

import pytest
import torch
from test_gpt_oss import _write_folder, quantize_mxfp4
from test_tp_logits import NOISE_FACTOR, NOISE_FLOOR_ULPS, PROMPTS, RUNNER, hf_float64, run_steps, run_tp2

from radixlm.runtime.distributed.sharding import shard_config, shard_weights
from radixlm.runtime.models.gpt_oss import to_our_layout
from radixlm.runtime.models.loader import iter_safetensors, read_model_config
from radixlm.runtime.runner.model_runner import ModelRunner

EXPERTS = ("w13", "b13", "w2", "b2")
ENGINE_PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick", "Hello, world! How are", '{"name": "Alice"']
GREEDY = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}


def test_shards_rebuild_the_full_heads_experts_and_biases(tiny_model):
    path = tiny_model("gpt_oss")
    config = read_model_config(path)
    full = dict(to_our_layout(iter_safetensors(path), torch.float32))
    assert {k: v.shape for k, v in to_our_layout(full.items(), torch.float32)} == {k: v.shape for k, v in full.items()}
    p = "model.layers.1."
    w13, b13, w2, b2 = (full[p + "mlp.experts." + k] for k in EXPERTS)     # [E, 2I, H], [E, 2I], [E, H, I], [E, H]
    half = w2.shape[2] // 2
    tp = [dict(shard_weights(full.items(), config, rank, 2)) for rank in (0, 1)]
    for key, t in (("w13", w13), ("b13", b13)):                            # my I range of the gate and of the up rows
        shards = [s[p + "mlp.experts." + key] for s in tp]                 # [E, I, ...] each: I/2 gate, I/2 up
        assert torch.equal(torch.cat([s[:, :half] for s in shards], 1), t[:, :2 * half])
        assert torch.equal(torch.cat([s[:, half:] for s in shards], 1), t[:, 2 * half:])
    assert torch.equal(torch.cat([s[p + "mlp.experts.w2"] for s in tp], 2), w2)
    for bias, whole in ((p + "mlp.experts.b2", b2), (p + "self_attn.o_proj.bias", full[p + "self_attn.o_proj.bias"])):
        assert torch.equal(tp[0][bias], whole) and not tp[1][bias].any()    # added once, by rank 0
    for name in ("self_attn.sinks", "self_attn.q_proj.bias", "self_attn.k_proj.bias"):
        assert torch.equal(torch.cat([s[p + name] for s in tp]), full[p + name])   # by heads
    for rank in (0, 1):
        assert torch.equal(tp[rank][p + "mlp.router.bias"], full[p + "mlp.router.bias"])
        assert shard_config(config, 2, rank, ep_size=2).moe.expert_offset == 4 * rank
    ep = [dict(shard_weights(full.items(), config, rank, 2, ep_size=2)) for rank in (0, 1)]
    for key in EXPERTS:                                                    # experts 0-3 on rank 0, 4-7 on rank 1
        assert torch.equal(torch.cat([s[p + "mlp.experts." + key] for s in ep]), full[p + "mlp.experts." + key])
    assert torch.equal(torch.cat([s[p + "self_attn.sinks"] for s in ep]), full[p + "self_attn.sinks"])


@pytest.fixture(scope="module")
def oracle(tiny_model):
    path = tiny_model("gpt_oss")
    return path, hf_float64(path), run_steps(ModelRunner(str(path), **RUNNER))


@pytest.mark.parametrize("ep_size", [1, 2])
def test_tp2_logits_within_float32_noise_of_hf_float64(ep_size, oracle, tmp_path):
    """A batched prefill of 7 and 5 tokens, then 3 decodes each: past the window of 6 on the sliding layers."""
    path, exact, tp1 = oracle
    tp2 = run_tp2(path, tmp_path, ep_size)
    for r in range(len(PROMPTS)):
        noise = (tp1[r] - exact[r]).abs().max().item()
        floor = NOISE_FLOOR_ULPS * torch.finfo(torch.float32).eps * exact[r].abs().max().item()
        err = (tp2[r] - exact[r]).abs().max().item()
        assert err <= NOISE_FACTOR * noise + floor, (ep_size, r, err, noise)
        assert torch.equal(tp2[r].argmax(-1), tp1[r].argmax(-1))


def _generate(path, tp_size, ep_size=1):
    from radixlm.runtime.engine import Engine

    with Engine(model=str(path), dtype="float32", tp_size=tp_size, ep_size=ep_size, max_total_tokens=1024,
                num_threads=1, log_level="warning") as engine:
        tokens = [o["output_ids"] for o in engine.generate(ENGINE_PROMPTS, {**GREEDY})]
        return tokens, engine.get_server_info()["moe_expert_tokens"]


@pytest.fixture(scope="module")
def mxfp4_single(tiny_model, tmp_path_factory):
    """An MXFP4 checkpoint of the tiny model (the experts as blocks and scales) and the single process's run."""
    path = tiny_model("gpt_oss")
    tensors = {}
    for name, t in iter_safetensors(path):
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            tensors[name + "_blocks"], tensors[name + "_scales"] = quantize_mxfp4(t.transpose(1, 2))   # rows first
        else:
            tensors[name] = t
    folder = tmp_path_factory.mktemp("gpt-oss-mxfp4") / "model"
    _write_folder(path, folder, tensors, True)
    return folder, _generate(folder, 1)


@pytest.mark.parametrize("ep_size", [1, 2])
def test_mxfp4_checkpoint_under_tp2_gives_the_single_process_tokens(ep_size, mxfp4_single):
    folder, (single, single_load) = mxfp4_single
    tokens, load = _generate(folder, 2, ep_size)
    assert tokens == single
    assert load == single_load       # rank 0 routes every token, whichever experts it holds
