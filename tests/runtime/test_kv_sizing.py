"""KV sizing after a warm-up forward (the CUDA path, run here on CPU): the warm-up leaves the block
table as it was, a resized pool serves the same greedy tokens as a runner built at that size
(oracle), and the budget is mem_fraction of the free bytes given."""

import torch
from scheduler_harness import collect, make_scheduler, run_until_idle, submit

from radixlm.runtime.runner.model_runner import ModelRunner
from radixlm.runtime.runner.model_setup import MAX_DEFAULT_TOKENS, kv_budget, warm_up


def _tokens(runner):
    sched = make_scheduler(runner)
    for i, p in enumerate([[5, 17, 42, 99, 7], [5, 17, 42, 8]]):
        submit(sched, f"r{i}", p, 6, params={"ignore_eos": True})
    run_until_idle(sched)
    out = collect(sched)
    return [out[f"r{i}"]["tokens"] for i in range(2)]


def test_resized_pool_after_warm_up_serves_like_a_fresh_one(tiny_model):
    path = str(tiny_model("llama"))
    runner = ModelRunner(path, dtype="float32", max_total_tokens=40, num_rows=4)
    table_before = runner.req_to_token.table.clone()
    warm_up(runner.model, runner.req_to_token.table, 32, "cpu")
    assert torch.equal(runner.req_to_token.table, table_before)
    assert runner.kv_pool.k_buffers[0][:32].abs().sum() > 0      # the warm-up really ran through the pool
    runner.kv_pool.resize(0)
    runner.kv_pool.resize(201)
    runner.num_slots = 200
    runner.use_padded_decode(4, capture=False)  # its scratch slot moved with the pool
    assert runner.kv_pool.k_buffers[0].shape[0] == 201 and runner.kv_pool.v_buffers[-1].abs().sum() == 0
    fresh = ModelRunner(path, dtype="float32", max_total_tokens=200, num_rows=4)
    assert _tokens(runner) == _tokens(fresh)


def test_budget_is_a_fraction_of_the_free_bytes(tiny_model):
    from radixlm.runtime.models.loader import read_model_config
    cfg = read_model_config(str(tiny_model("llama")))
    per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4
    assert kv_budget(cfg, torch.float32, None, 0.5, "cpu", free_bytes=per_token * 3000) == 1500
    assert kv_budget(cfg, torch.float32, None, 0.5, "cpu", free_bytes=0) == 256                 # the floor
    assert kv_budget(cfg, torch.float32, None, 1.0, "cpu", free_bytes=per_token << 21) == MAX_DEFAULT_TOKENS
    assert kv_budget(cfg, torch.float32, 77, 0.5, "cpu", free_bytes=0) == 77
