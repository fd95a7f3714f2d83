"""Ministral 3's Llama 4 query scaling against HF transformers (logits_oracle.py): queries times
1 + beta * log(1 + floor(position / original_max_position_embeddings)) after rope, so its context runs to
max_position_embeddings.  A tiny Ministral3ForCausalLM with an original context of 16 and beta 0.5 (far from neutral):
prompts of 40 tokens cross the floor steps at 16 and 32 in a prefill, an extend on a cached prefix, chunks and decode
steps, as the server runs it on a CPU (attention backend "auto", packed weights, the native one-call decode below 16
and op by op from there), over the torch reference kernels, the Triton kernels under the interpreter and once
wrapped as Mistral3ForConditionalGeneration; the bound notices the scaling left out.
"""

import pytest
import torch
from logits_oracle import Paged, assert_close, family_case
from paged_checks import check_chunked_prefill, check_reference_kernels, check_triton_backend
from tiny_models import make_tiny_tokenizer, save_tiny_model

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.loader import read_model_config

LENGTH, ORIGINAL, BETA = 40, 16, 0.5


def _ministral3_config(vocab: int, eos: int, pad: int):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Ministral3Config"):
        pytest.skip("transformers without Ministral 3")
    return transformers.Ministral3Config(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, eos_token_id=eos, pad_token_id=pad,
        bos_token_id=None, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                         "original_max_position_embeddings": ORIGINAL, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": BETA,
                         "max_position_embeddings": 256})


def _build(tmp_path_factory, wrapped: bool):
    tok = make_tiny_tokenizer()
    config = _ministral3_config(len(tok), tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>"))
    if wrapped:
        from transformers import Mistral3Config, PixtralVisionConfig

        pixtral = PixtralVisionConfig(image_size=16, patch_size=4, head_dim=16, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2).to_dict()
        config = Mistral3Config(text_config=config.to_dict(), vision_config=pixtral, tie_word_embeddings=False)
        config.architectures = ["Mistral3ForConditionalGeneration"]
    name = "tiny-mistral3-ministral3-scaled" if wrapped else "tiny-ministral3-scaled"
    return save_tiny_model(tmp_path_factory, config, name, tok, seed=3100 + wrapped)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return family_case("ministral3", _build(tmp_path_factory, wrapped=False), LENGTH)


def test_config_reads_the_scaling_and_the_whole_context(case):
    config = read_model_config(case[1])
    assert config.query_scale == (BETA, ORIGINAL)
    assert config.context_length == config.max_position_embeddings == 256


def test_prefill_and_extend_on_a_cached_prefix(case):
    _, path, hf, ids = case
    ref, other = hf(ids), ids[7:] + ids[:7]
    ref_other = hf(other)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "prefill across 16 and 32")
    paged.step([(1, other[:10])])
    assert_close(paged.step([(1, other[10:])]), ref_other[10:], "extend after a cached prefix of 10")


def test_chunked_prefill(case):
    check_chunked_prefill(case, chunk=7)


def test_decode_steps_across_the_floor_steps(case, monkeypatch):
    """Two requests decode from 12 to 39: the native one-call decode (no query scale) while every context is within
    16 tokens, op by op from there."""
    _, path, hf, ids = case
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    native_runs, native = [], paged.model.native_decode
    if native is not None:
        run = native.run

        def counted(x, fb):
            out = run(x, fb)
            native_runs.extend([int(fb.positions.max())] if out is not None else [])
            return out

        monkeypatch.setattr(native, "run", counted)
    paged.step([(0, seq_a[:12]), (2, seq_b[:11])])
    for i in range(12, LENGTH):
        out = paged.step([(0, [seq_a[i]]), (2, [seq_b[i - 1]])])  # [2, V]
        assert_close(out[0], ref_a[i], f"decode at {i}, request a")
        assert_close(out[1], ref_b[i - 1], f"decode at {i - 1}, request b")
    if native is not None:
        assert native_runs == [12, 13, 14, 15]


def test_reference_kernels_and_dense_weights(case, monkeypatch):
    check_reference_kernels(case, prefill=14, monkeypatch=monkeypatch)


def test_triton_backend_under_the_interpreter(case):
    from radixlm.kernels import dispatch

    if torch.cuda.is_available() or not dispatch.triton_interpreter_enabled():
        pytest.skip("CPU only, under the Triton interpreter")
    check_triton_backend(case, "cpu", split=30, end=34)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_backend_on_cuda(case):
    check_triton_backend(case, "cuda", split=30, end=34)


def test_the_oracle_notices_the_scaling_left_out(case, monkeypatch):
    from radixlm.runtime.models import llama

    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=6)
    monkeypatch.setattr(llama, "query_scale", lambda config, positions, dtype: None)
    out = paged.step([(0, ids)])
    assert_close(out[:ORIGINAL], ref[:ORIGINAL], "unscaled positions")
    with pytest.raises(AssertionError, match="max abs logit error"):
        assert_close(out[ORIGINAL:], ref[ORIGINAL:], "scaling left out")


def test_wrapped_as_mistral3(tmp_path_factory):
    path = _build(tmp_path_factory, wrapped=True)
    config = read_model_config(path)
    assert (config.language_model, config.query_scale) == ("Ministral3ForCausalLM", (BETA, ORIGINAL))
    _, _, hf, ids = family_case("mistral3", path, LENGTH)
    ref = hf(ids)
    paged = Paged(path, seed=7)
    assert_close(paged.step([(0, ids[:20])]), ref[:20], "prefill")
    for i in range(20, LENGTH, 6):
        assert_close(paged.step([(0, ids[i:i + 6])]), ref[i:i + 6], f"extend at {i}")


def test_a_beta_without_an_original_context_is_refused():
    tok = make_tiny_tokenizer()
    config = _ministral3_config(len(tok), tok.eos_token_id, 0)
    config.rope_parameters = {**config.rope_parameters, "original_max_position_embeddings": None}
    with pytest.raises(ValueError, match="llama_4_scaling_beta needs a positive original_max_position_embeddings"):
        ModelConfig.from_hf(config)
