"""`radixlm serve` on a tiny gpt-oss folder (tiny_models.py: sinks, sliding and full layers, YaRN, 8 experts): the
server starts with the model's full context (the window is enforced, not a cap), and its greedy /generate answer for a
prompt longer than the window equals HF transformers' greedy generate (experts token by token), twice: the second
from a cached prefix longer than the window."""

import random

import torch
from server_harness import ServerProcess, load_make_tiny_model


def test_serve_generate_equals_hf_greedy(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = load_make_tiny_model()(tmp_path_factory, "gpt_oss")
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, experts_implementation="eager").eval()
    prompt = [random.Random(9).randrange(3, hf.config.vocab_size) for _ in range(18)]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False)[0, 18:].tolist()
    srv = ServerProcess(path, tmp_path_factory.mktemp("logs"), "--check-ledger").wait_ready()
    try:
        params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
        for _ in range(2):
            r = srv.post("/generate", json={"input_ids": prompt, "sampling_params": params})
            assert r.status_code == 200, r.text
            assert r.json()["output_ids"] == want
        assert r.json()["meta_info"]["cached_tokens"] >= 17
        assert srv.get("/model_info").json()["context_length"] == 256
    finally:
        assert srv.stop() == 0, srv.log()[-4000:]
