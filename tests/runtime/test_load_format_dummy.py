"""--load-format dummy: a model folder with config.json and tokenizer only, weights made from a seed where
the model lives.  Oracles: the folder's lack of weights (auto must fail), exact equality between two loads
of one seed, HF transformers on the same weights (exported to safetensors) for logits and greedy output."""

import json
import shutil

import pytest
import torch
from logits_oracle import HF, assert_close

from radixlm.runtime.models.loader import load_model, resolve_load_format
from radixlm.runtime.runner.attention_backend import create_attention_backend
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

STD = 0.3    # the config's initializer_range: large enough that greedy picks are far from ties
IDS = [5, 17, 42, 99, 3, 250, 7, 61, 128, 33]


@pytest.fixture(scope="module")
def weightless(tiny_model, tmp_path_factory):
    """A tiny Qwen3 folder (q/k norms, q/k/v/o biases) without its *.safetensors, initializer_range STD."""
    src, dst = tiny_model("qwen3"), tmp_path_factory.mktemp("dummy") / "qwen3-no-weights"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, "initializer_range": STD}))
    assert not list(dst.glob("*.safetensors"))
    return dst


def _load(path, seed=0, load_format="dummy"):
    """-> (model, logits [len(IDS), V] of IDS as one prefill)."""
    box = {}

    def factory(config):
        box["kv"] = KVPool(config.num_layers, 64, config.num_kv_heads, config.head_dim, dtype=torch.float32)
        return create_attention_backend("torch", box["kv"], config.sm_scale)

    model, _ = load_model(path, torch.float32, factory, load_format=load_format, seed=seed)
    table = ReqToTokenPool(1, 64)
    table.write(0, 0, list(range(len(IDS))))
    fb = ForwardBatch.build(IDS, [0], [len(IDS)], [0], list(range(len(IDS))), table.table,
                            logits_indices=list(range(len(IDS))))
    with torch.inference_mode():
        return model, model.compute_logits(model.forward(fb)[fb.logits_indices])  # [L, V]


def _export(model, src, dst):
    """The model's weights under their HF names as one safetensors file beside src's config and tokenizer."""
    from safetensors.torch import save_file

    shutil.copytree(src, dst)
    state = {}
    for name, (view, broadcast) in model._weight_targets().items():
        state[name] = (view[0] if broadcast else view).detach().clone().contiguous()  # q/k norms: one row each
    save_file(state, str(dst / "model.safetensors"))
    return dst


def test_auto_needs_weight_files_and_dummy_does_not(weightless):
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_model(weightless, load_format="auto")
    model, logits = _load(weightless)
    assert torch.isfinite(logits).all()
    params = dict(model.named_parameters())
    norms = [n for n in params if "norm" in n.rsplit(".", 1)[-1]]
    biases = [n for n in params if "bias" in n.rsplit(".", 1)[-1]]
    assert "norm" in norms and any("qk_norm" in n for n in norms) and any("qkv_bias" in n for n in biases)
    for n in norms:
        assert torch.equal(params[n], torch.ones_like(params[n])), n
    for n in biases:
        assert torch.equal(params[n], torch.zeros_like(params[n])), n
    for n in ("embed_tokens", "lm_head", "layers.0.self_attn.qkv_proj", "layers.1.mlp.down_proj"):
        p = params[n].float()
        assert abs(p.mean().item()) < 0.05 * STD and abs(p.std().item() / STD - 1) < 0.1, n


def test_same_seed_same_logits_other_seed_others(weightless):
    _, a = _load(weightless, seed=0)
    _, b = _load(weightless, seed=0)
    _, c = _load(weightless, seed=1)
    assert torch.equal(a, b)
    assert (a - c).abs().max().item() > 0.1


def test_dummy_logits_match_hf_on_the_same_weights(weightless, tmp_path):
    model, ours = _load(weightless, seed=3)
    exported = _export(model, weightless, tmp_path / "exported")
    assert_close(ours, HF(exported)(IDS), "dummy weights vs HF on them")


def test_load_format_checked_and_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("RADIXLM_LOAD_FORMAT", raising=False)
    assert resolve_load_format() == "auto" and resolve_load_format("dummy") == "dummy"
    monkeypatch.setenv("RADIXLM_LOAD_FORMAT", "dummy")
    assert resolve_load_format() == "dummy" and resolve_load_format("safetensors") == "safetensors"
    with pytest.raises(ValueError, match="load format"):
        resolve_load_format("npz")


def test_engine_greedy_on_dummy_weights_equals_hf(weightless, tmp_path, monkeypatch):
    """The Engine's scheduler child loads the weightless folder (--load-format dummy reaches it) and decodes
    greedily what HF decodes from the same weights written out."""
    from transformers import AutoModelForCausalLM

    from radixlm import Engine

    model, _ = _load(weightless, seed=0)
    exported = _export(model, weightless, tmp_path / "exported")
    prompts, n = [IDS, IDS[3:] + [11, 12]], 8
    hf = AutoModelForCausalLM.from_pretrained(str(exported), dtype=torch.float32).eval()
    with torch.no_grad():
        want = [hf.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                            pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    monkeypatch.delenv("RADIXLM_LOAD_FORMAT", raising=False)
    with Engine(model=str(weightless), dtype="float32", max_total_tokens=2048, log_level="warning",
                load_format="dummy") as engine:
        outs = engine.generate(input_ids=prompts,
                               sampling_params={"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
    assert [o["output_ids"] for o in outs] == want
