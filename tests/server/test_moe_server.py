"""A Qwen3-MoE and a Qwen2-MoE folder served by `radixlm serve`: /generate answers greedily as the Engine does,
/get_server_info carries moe_expert_tokens and /metrics radixlm_moe_expert_tokens_total{layer,expert} and
radixlm_moe_expert_share, and the routed counts grow by exactly top_k per sparse layer for every token the
model runs."""

import pytest
from server_harness import ServerProcess

from radixlm.runtime.models.loader import read_model_config

PROMPT = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe"])
def test_moe_model_serves_and_reports_expert_load(arch, tiny_model, tmp_path):
    path = tiny_model(arch)
    moe = read_model_config(path).moe
    srv = ServerProcess(path, tmp_path, "--check-ledger", "--disable-radix-cache").wait_ready()
    try:
        before = srv.server_info().get("moe_expert_tokens")
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}
        r = srv.post("/generate", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert len(out["output_ids"]) == 6
        load = srv.server_info()["moe_expert_tokens"]
        assert sorted(load, key=int) == [str(i) for i in moe.sparse_layers]
        ran = len(PROMPT) + 6 - 1                    # the last sampled token is never run through the model
        for layer, row in load.items():
            grew = sum(row) - (sum(before[layer]) if before else 0)
            assert len(row) == moe.num_experts and grew == ran * moe.top_k, (layer, row, before)
        metrics = srv.get("/metrics").text
        layer, row = next(iter(load.items()))
        busiest = max(range(len(row)), key=row.__getitem__)
        line = f'radixlm_moe_expert_tokens_total{{expert="{busiest}",layer="{layer}"}} {float(row[busiest])}'
        assert line in metrics, metrics[-2000:]
        share = f'radixlm_moe_expert_share{{expert="{busiest}",layer="{layer}"}} {row[busiest] / sum(row)!r}'
        assert share in metrics
    finally:
        assert srv.stop() == 0
