"""Expert parallelism and tensor parallelism of mixture-of-experts models on CPU (gloo), against the single process
(the oracle): `Engine(tp_size=2, ep_size=2)` (each rank holds half the experts whole) and `Engine(tp_size=2)` (each
rank holds half of every expert's width) give the single process's greedy tokens, and logprobs within float32
noise, on Qwen2-MoE (shared expert, dense layers among sparse ones, top-k not renormalised) and Mixtral.  The
shards themselves are checked against the full checkpoint, and configurations that cannot split are refused."""

import pytest
import torch

from radixlm.runtime.engine import Engine

PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick", "Hello, world! How are", '{"name": "Alice"']
GREEDY = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}


def _generate(path, tp_size, ep_size=1):
    with Engine(model=str(path), dtype="float32", tp_size=tp_size, ep_size=ep_size, max_total_tokens=1024,
                num_threads=1, log_level="warning") as engine:
        outs = engine.generate(PROMPTS, {**GREEDY}, return_logprob=True)
        load = engine.get_server_info()["moe_expert_tokens"]
    tokens = [o["output_ids"] for o in outs]
    logprobs = [lp for o in outs for lp, _, _ in o["meta_info"]["output_token_logprobs"]]
    return tokens, logprobs, load


@pytest.mark.parametrize("arch,runs", [("qwen2_moe", [(2, 2), (2, 1)]), ("mixtral", [(2, 2)])])
def test_parallel_greedy_tokens_equal_the_single_process(arch, runs, tiny_model):
    path = tiny_model(arch)
    single, single_lp, single_load = _generate(path, 1)
    for tp_size, ep_size in runs:
        tokens, logprobs, load = _generate(path, tp_size, ep_size)
        assert tokens == single, (tp_size, ep_size)
        assert logprobs == pytest.approx(single_lp, abs=1e-4)
        assert load == single_load      # rank 0 routes every token, whichever experts it holds


def test_expert_parallel_shards_hold_whole_experts(tiny_model):
    from radixlm.runtime.distributed.sharding import shard_config, shard_weights
    from radixlm.runtime.models.loader import iter_safetensors, read_model_config

    path = tiny_model("qwen3_moe")
    config = read_model_config(path)
    full = dict(iter_safetensors(path))
    for rank in (0, 1):
        local = shard_config(config, 2, rank, ep_size=2)
        assert (local.moe.num_local_experts, local.moe.expert_offset) == (4, 4 * rank)
        mine = dict(shard_weights(full.items(), config, rank, 2, ep_size=2))
        experts = {int(n.split(".")[5]) for n in mine if ".experts." in n}
        assert experts == set(range(4 * rank, 4 * rank + 4))
        name = f"model.layers.0.mlp.experts.{4 * rank + 1}.gate_proj.weight"
        assert torch.equal(mine[name], full[name])                              # whole, not split
        assert torch.equal(mine["model.layers.0.mlp.gate.weight"], full["model.layers.0.mlp.gate.weight"])
        width = dict(shard_weights(full.items(), config, rank, 2))                # ep_size 1: every expert's width
        assert width[name].shape[0] == full[name].shape[0] // 2


def test_ep_options_are_refused_with_a_clear_message(tiny_model):
    with pytest.raises(ValueError, match="--ep-size must be 1 or equal to --tp-size"):
        Engine(model=str(tiny_model("qwen3_moe")), tp_size=2, ep_size=4)
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        Engine(model=str(tiny_model("llama")), tp_size=2, ep_size=2)


def test_bad_ep_size_fails_at_parse_time(capsys):
    from radixlm.runtime.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--tp-size", "2", "--ep-size", "3"])
    assert exc.value.code == 2 and "--ep-size must be 1 or equal to --tp-size (2)" in capsys.readouterr().err


def test_data_parallel_replicas_sum_their_expert_load():
    from radixlm.runtime.dp.control import merge_server_info

    a = {"num_running_reqs": 1, "moe_expert_tokens": {"0": [3, 0, 5], "2": [1, 1, 0]}}
    b = {"num_running_reqs": 2, "moe_expert_tokens": {"0": [1, 4, 0], "2": [0, 2, 2]}}
    merged = merge_server_info([a, b])
    assert merged["moe_expert_tokens"] == {"0": [4, 4, 5], "2": [1, 3, 2]} and merged["num_running_reqs"] == 3
