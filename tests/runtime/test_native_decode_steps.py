"""Decode steps in one native call (runtime/models/native_decode.py) against HF transformers' float64 logits,
with the bound of logits_oracle.py: one row, eight rows (float32), and bfloat16 at one and 32 rows against the
op-by-op path's own distance from float64."""

import pytest
import torch
from logits_oracle import HF, NOISE_FACTOR, Paged, assert_close

from radixlm.runtime.models.loader import load_tokenizer
from radixlm.runtime.models.native_decode import NativeDecode
from radixlm.runtime.models.packed_linear import amx_pack_available


def record_native_steps(monkeypatch) -> list:
    """-> a list that gets each NativeDecode.run result (None where a step ran op by op)."""
    taken = []
    run = NativeDecode.run
    monkeypatch.setattr(NativeDecode, "run", lambda self, x, fb: taken.append(run(self, x, fb)) or taken[-1])
    return taken


def test_single_row_decode_steps_in_one_native_call(case, monkeypatch):
    """Decode steps of one row take the one-call native path (where the architecture has it: not Qwen3's
    q/k norms), each step reading the K/V the previous native steps wrote."""
    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=6)
    taken = record_native_steps(monkeypatch)
    paged.step([(1, ids[:10])])
    for i in range(10, 16):
        assert_close(paged.step([(1, [ids[i]])])[0], ref[i], f"decode at {i}")
    native = [out is not None for out in taken]
    if paged.config.qk_norm:
        assert paged.model.native_decode is None and native == []
    else:
        assert native == [False] + [True] * 6, native  # the prefill runs op by op


def test_decode_batch_of_eight_in_one_native_call(case, monkeypatch):
    """A decode step of eight rows (up to MAX_ROWS_F32, the limit off AMX) in one native call: the row kernel's
    two groups of x rows and the attention of rows at different lengths.  The limit is set to 8 here so the
    path is checked on every CPU; which limit a CPU gets decides only its speed."""
    path, hf, ids = case
    seqs = [ids[r:] + ids[:r] for r in range(8)]
    refs = [hf(seq) for seq in seqs]
    paged = Paged(path, seed=8, rows=8)
    if paged.model.native_decode is not None:
        monkeypatch.setattr(paged.model.native_decode, "max_rows", 8)
    taken = record_native_steps(monkeypatch)
    paged.step([(r, seq[:6 + r]) for r, seq in enumerate(seqs)])
    for i in range(3):
        out = paged.step([(r, [seq[6 + r + i]]) for r, seq in enumerate(seqs)])  # [8, V]
        for r in range(8):
            assert_close(out[r], refs[r][6 + r + i], f"decode step {i}, request {r}")
    native = [out is not None for out in taken]
    assert native == ([] if paged.config.qk_norm else [False, True, True, True]), native


def test_bf16_native_decode_of_32_rows_is_as_close_to_float64_as_op_by_op(smollm2_path, monkeypatch):
    """bfloat16 steps of 32 rows (MAX_ROWS_BF16: eight groups of x rows a weight block) natively and op by op:
    the same distance from HF's float64 logits, as in the one-row test below."""
    tok = load_tokenizer(smollm2_path)
    words = "The capital of France is Paris. Counting: one, two, three, four, five, six, seven".split()
    seqs = [tok.encode(" ".join(words[r % 8:] + words[:r % 8]) + f" {r}", add_special_tokens=False)[:12]
            for r in range(32)]
    hf = HF(smollm2_path)
    exact = [hf(seq).exact for seq in seqs]
    errors = {}
    for native in (True, False):
        paged = Paged(smollm2_path, torch.bfloat16, seed=9, rows=32)
        model = paged.model
        assert model.native_decode is not None
        monkeypatch.setattr(model.native_decode, "max_rows", 32)
        kept, model.native_decode = model.native_decode, (model.native_decode if native else None)
        try:
            paged.step([(r, seq[:9]) for r, seq in enumerate(seqs)])
            errors[native] = 0.0
            for i in range(9, 12):
                out = paged.step([(r, [seq[i]]) for r, seq in enumerate(seqs)]).double()   # [32, V]
                errors[native] = max(errors[native], max((out[r] - exact[r][i]).abs().max().item()
                                                         for r in range(32)))
        finally:
            model.native_decode = kept
    assert errors[True] <= NOISE_FACTOR * errors[False], errors


def test_bf16_native_decode_is_as_close_to_float64_as_op_by_op(smollm2_path):
    """In bfloat16 the native call differs from the op-by-op path only in its linear layers' float32 sums,
    so its logits are as far from HF's float64 ones as the op-by-op path's (the bf16 rounding dominates
    both; a wrong slot, rotation or weight would move them by the logits' own size)."""
    ids = load_tokenizer(smollm2_path).encode("The capital of France is Paris. Counting: one, two, three, four",
                                              add_special_tokens=False)
    exact = HF(smollm2_path)(ids).exact
    errors = {}
    for native in (True, False):
        paged = Paged(smollm2_path, torch.bfloat16, seed=7)
        model = paged.model
        kept, model.native_decode = model.native_decode, (model.native_decode if native else None)
        try:
            assert kept is not None
            paged.step([(0, ids[:8])])
            errors[native] = max((paged.step([(0, [ids[i]])])[0].double() - exact[i]).abs().max().item()
                                 for i in range(8, len(ids)))
        finally:
            model.native_decode = kept
    assert errors[True] <= NOISE_FACTOR * errors[False], errors


def test_decode_batch_on_a_shared_prefix_attends_it_once(case, monkeypatch):
    """Eight requests on one cached prefix (the same slots in every row, as the radix cache hands a system prompt
    out): an extend step of each one's own tokens, then decode steps in one native call, the prefix's keys
    attended once for all rows (csrc/cpu_decode_layers.c through radixlm_shared_keys_attention, where the FMA
    loops take the head dim) and merged with each row's own; every logit within HF's float64 bound."""
    from radixlm.kernels import cpu_shared_prefix
    from radixlm.runtime.runner.attention_backend import KernelAttentionBackend

    monkeypatch.setattr(cpu_shared_prefix, "MIN_KEYS", 8)    # a 12-token prefix qualifies; speed decides the
    monkeypatch.setattr(cpu_shared_prefix, "MIN_WORK", 1)    # real thresholds, not correctness
    found = {"decode": [], "extend": []}   # each step's shared prefix, as the backend found it
    init = KernelAttentionBackend.init_forward_metadata

    def spy(self, fb):
        init(self, fb)
        if self._decode_step is not None:
            found["decode"].append(self._decode_step.shared)
        elif not fb.is_decode:
            found["extend"].append(self._extend_shared)

    monkeypatch.setattr(KernelAttentionBackend, "init_forward_metadata", spy)
    path, hf, ids = case
    prefix, own = ids[:12], ids[12:]
    seqs = [prefix + own[r:] + own[:r] for r in range(8)]
    refs = [hf(seq) for seq in seqs]
    paged = Paged(path, seed=10, rows=8)
    if paged.model.native_decode is not None:
        monkeypatch.setattr(paged.model.native_decode, "max_rows", 8)
    taken = record_native_steps(monkeypatch)
    paged.step([(0, prefix)])
    for r in range(1, 8):
        paged.table.write(r, 0, paged.table.table[0, :12].tolist())
        paged.cached[r] = 12
    out = paged.step([(r, seq[12:14]) for r, seq in enumerate(seqs)])   # [16, V]
    for r in range(8):
        for t in range(2):
            assert_close(out[2 * r + t], refs[r][12 + t], f"extend on the shared prefix, request {r}, token {t}")
    for i in range(14, 17):
        out = paged.step([(r, [seq[i]]) for r, seq in enumerate(seqs)])  # [8, V]
        for r in range(8):
            assert_close(out[r], refs[r][i], f"decode at {i}, request {r}")
    if paged.config.layer_windows:   # windowed layers (the tiny Mistral) attend through the window kernels
        return
    assert found["extend"][-1] is not None and found["extend"][-1].length == 12
    assert [s is not None and s.length == 12 for s in found["decode"]] == [True] * 3
    if not paged.config.qk_norm:   # SmolLM2's head dim 64 takes the shared keys natively; the tiny models' do not
        assert [out is not None for out in taken] == [False, False, True, True, True]


@pytest.mark.skipif(not amx_pack_available(torch.bfloat16, "cpu"),
                    reason="no AMX linear on this CPU (or no native build): bfloat16 native steps use the row kernel")
def test_bf16_native_decode_with_the_amx_linear_equals_op_by_op(smollm2_path):
    """Where the weights carry the AMX linear's copies, native steps of 3 to 32 rows take it (csrc/cpu_decode_layers.c)
    for every linear layer and the lm head: the op-by-op path's GEMM for those rows, and its ops otherwise, so the
    same logits bit for bit."""
    tok = load_tokenizer(smollm2_path)
    words = "The capital of France is Paris. Counting: one, two, three, four, five, six, seven".split()
    seqs = [tok.encode(" ".join(words[r % 8:] + words[:r % 8]) + f" {r}", add_special_tokens=False)[:12]
            for r in range(32)]
    for batch in (3, 8, 32):
        logits, taken = {}, []
        for native in (True, False):
            paged = Paged(smollm2_path, torch.bfloat16, seed=batch, rows=32, amx_pack=True)
            model = paged.model
            kept, model.native_decode = model.native_decode, (model.native_decode if native else None)
            try:
                paged.step([(r, seq[:9]) for r, seq in enumerate(seqs[:batch])])
                if native:
                    run = kept.run
                    kept.run = lambda x, fb: taken.append(run(x, fb)) or taken[-1]
                logits[native] = [paged.step([(r, [seq[i]]) for r, seq in enumerate(seqs[:batch])]) for i in (9, 10)]
            finally:
                model.native_decode = kept
                kept.__dict__.pop("run", None)
        assert len(taken) == 2 and all(out is not None for out in taken), batch   # both steps went native
        assert all(torch.equal(a, b) for a, b in zip(logits[True], logits[False])), batch
