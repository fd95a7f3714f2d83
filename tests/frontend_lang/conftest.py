"""Fixtures: a tiny random llama with a 2048-token context (the shared tiny models stop at 256, too short
for the fork test), one module-scoped Engine on it, one `radixlm serve` on it for the session (`long_tiny_server`, and
`endpoint`: it with a RuntimeEndpoint), and HF transformers on the same folder as the oracle."""

import pathlib
import sys

import pytest
import torch

import radixlm as rl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "server"))
from server_harness import ServerProcess  # noqa: E402


@pytest.fixture(scope="session")
def long_tiny_model(tmp_path_factory):
    from tiny_models import make_tiny_tokenizer
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = make_tiny_tokenizer()
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, num_hidden_layers=2, rms_norm_eps=1e-5, eos_token_id=eos,
                         pad_token_id=pad, bos_token_id=None, max_position_embeddings=2048,
                         tie_word_embeddings=False, rope_theta=10000.0)
    gen = torch.Generator().manual_seed(4242)
    model = AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.dim() == 1:
                p.copy_((1.0 if "norm" in name else 0.0) + 0.1 * noise)
            else:
                p.copy_(0.3 * noise)   # larger than the shared models' 0.1: sharper, less flat distributions
    folder = tmp_path_factory.mktemp("tiny-long-llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def engine(long_tiny_model):
    with rl.Engine(model=str(long_tiny_model), dtype="float32", max_total_tokens=8192, log_level="warning",
                   num_threads=1) as e:
        yield e


@pytest.fixture(scope="module")
def backend(engine):
    return rl.EngineBackend(engine)


@pytest.fixture(scope="session")
def long_tiny_server(long_tiny_model, tmp_path_factory):
    """One `radixlm serve --check-ledger` on the long tiny model for every file here; it must live to the end."""
    srv = ServerProcess(long_tiny_model, tmp_path_factory.mktemp("fl-logs"), "--check-ledger",
                        "--max-total-tokens", "8192").wait_ready()
    try:
        yield srv
    finally:
        crashed = srv.proc.poll()
        srv.stop()
        assert crashed is None, srv.log()[-4000:]


@pytest.fixture(scope="module")
def endpoint(long_tiny_server):
    """(the server process, a RuntimeEndpoint on it)."""
    return long_tiny_server, rl.RuntimeEndpoint(long_tiny_server.url, api_key=long_tiny_server.api_key)


@pytest.fixture(scope="module")
def hf_model(long_tiny_model):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(long_tiny_model), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer_of_long(long_tiny_model):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(long_tiny_model))
