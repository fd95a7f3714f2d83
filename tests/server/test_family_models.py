"""`radixlm serve` on a tiny Gemma 3 and Phi-3 folder (Gemma 2 and the other families are served through the
scheduler in tests/runtime/test_family_serving.py): the server starts, reports the model's full context
(the sliding window is enforced, not a cap), and its greedy /generate and /v1/completions answers for a prompt
longer than the window equal HF transformers' greedy generate on the same weights; an unsupported architecture
(Whisper, a speech model) fails the start with a message naming it."""

import random

import pytest
import torch
from server_harness import ServerProcess, free_port, load_make_tiny_model

FAMILIES = ("gemma3", "phi3")


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory):
    path = load_make_tiny_model()(tmp_path_factory, request.param)
    srv = ServerProcess(path, tmp_path_factory.mktemp("logs"), "--check-ledger").wait_ready()
    yield path, srv
    assert srv.stop() == 0, srv.log()[-4000:]


def test_generate_equals_hf_greedy(served):
    from transformers import AutoModelForCausalLM

    path, srv = served
    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    prompt = [random.Random(9).randrange(3, hf.config.vocab_size) for _ in range(18)]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False)[0, 18:].tolist()
    params = {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}
    for _ in range(2):  # the second request reuses the cached prompt (longer than the window)
        r = srv.post("/generate", json={"input_ids": prompt, "sampling_params": params})
        assert r.status_code == 200, r.text
        assert r.json()["output_ids"] == want
    assert r.json()["meta_info"]["cached_tokens"] >= 17
    r = srv.post("/v1/completions", json={"model": str(path), "prompt": prompt, "max_tokens": 8, "temperature": 0,
                                          "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == r_text(path, want)
    assert srv.get("/model_info").json()["context_length"] == 256


def r_text(path, ids):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path)).decode(ids, skip_special_tokens=True)


def test_serve_refuses_an_unsupported_architecture_clearly(tmp_path):
    """Whisper (a speech model) is not served: the start fails naming the architecture and what is supported."""
    import subprocess
    import sys

    from transformers import WhisperConfig

    WhisperConfig(architectures=["WhisperForConditionalGeneration"]).save_pretrained(tmp_path)
    from tiny_models import make_tiny_tokenizer

    make_tiny_tokenizer().save_pretrained(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "radixlm.runtime.cli", "serve", "--model", str(tmp_path), "--port",
                           str(free_port()), "--num-threads", "1"], capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert "unsupported model architecture ['WhisperForConditionalGeneration']" in proc.stderr + proc.stdout
    assert "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM" in proc.stderr + proc.stdout
