"""The model checks every family's logits test runs, against the HF oracle (logits_oracle.py): each takes a family
case (arch, path, HF, ids) and the positions where its family's differences bind (windows, YaRN's original context,
a scaling's floor steps), and steps our model through the paged pool as the server does.
"""

import torch
from logits_oracle import Paged, assert_close


def check_prefill_single_and_batch(case, short: int = 13):
    """The whole prompt alone, then beside its first `short` tokens in one batch."""
    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path)
    assert_close(paged.step([(0, ids)]), ref, "single prefill")
    both = paged.step([(1, ids[:short]), (2, ids)])
    assert_close(both[:short], hf(ids[:short]), "batched prefill, request 1")
    assert_close(both[short:], ref, "batched prefill, request 2")


def check_extend_on_a_cached_prefix(case, prefix: int):
    """The prompt's rest extending a cached `prefix`, beside a rotated prompt extending a prefix of 4."""
    _, path, hf, ids = case
    other = ids[5:] + ids[:3]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:prefix]), (3, other[:4])])
    out = paged.step([(0, ids[prefix:]), (3, other[4:])])
    assert_close(out[:len(ids) - prefix], ref[prefix:], f"extend after prefix {prefix}")
    assert_close(out[len(ids) - prefix:], ref_other[4:], "extend after prefix 4")


def check_chunked_prefill(case, chunk: int):
    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, len(ids), chunk):
        assert_close(paged.step([(1, ids[start:start + chunk])]), ref[start:start + chunk], f"chunk at {start}")


def check_decode_pair(case, start_a: int, start_b: int, end_b: int = None, paged=None):
    """Two requests, the prompt and its rotation, prefilled to start_a / start_b, then decoding together, one token
    each a step, until b reaches end_b (default: its last token)."""
    _, path, hf, ids = case
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = paged or Paged(path, seed=3)
    paged.step([(0, seq_a[:start_a]), (2, seq_b[:start_b])])
    for i in range((end_b or len(ids)) - start_b):
        out = paged.step([(0, [seq_a[start_a + i]]), (2, [seq_b[start_b + i]])])  # [2, V]
        assert_close(out[0], ref_a[start_a + i], f"decode at {start_a + i}, request a")
        assert_close(out[1], ref_b[start_b + i], f"decode at {start_b + i}, request b")


def check_batched_prefills_chunks_and_decodes(case, length: int):
    """case: hf_logits_cache's (path, ids, logits).  Two prefills in one step (9 and 13 tokens), a chunk beside a
    decode, then both rows decoding to `length` (one HF run: each row reads a prefix of its prompt)."""
    path, ids, ref = case
    paged = Paged(path)
    out = paged.step([(0, ids[:9]), (1, ids[:13])])
    assert_close(out[:9], ref[:9], "batched prefill, row 0")
    assert_close(out[9:], ref[:13], "batched prefill, row 1")
    out = paged.step([(1, [ids[13]]), (0, ids[9:16])])
    assert_close(out[0], ref[13], "decode of row 1 beside a chunk")
    assert_close(out[1:], ref[9:16], "chunk of row 0 beside a decode")
    for i in range(length - 16):
        out = paged.step([(0, [ids[16 + i]]), (1, [ids[14 + i]])])
        assert_close(out[0], ref[16 + i], f"decode at {16 + i}, row 0")
        assert_close(out[1], ref[14 + i], f"decode at {14 + i}, row 1")


def check_mixed_step(case, a: int, b: int, prefill: int = 10):
    """Two decodes (at a, and at b of the reversed prompt) beside a prefill of `prefill` tokens in one step."""
    _, path, hf, ids = case
    other = ids[::-1]
    ref, ref_other = hf(ids), hf(other)
    paged = Paged(path, seed=4)
    paged.step([(0, ids[:a]), (1, other[:b])])
    out = paged.step([(0, [ids[a]]), (1, [other[b]]), (2, ids[:prefill])])
    assert_close(out[0], ref[a], "mixed step: decode of request 0")
    assert_close(out[1], ref_other[b], "mixed step: decode of request 1")
    assert_close(out[2:], ref[:prefill], "mixed step: prefill of request 2")


def check_reference_kernels(case, prefill: int, monkeypatch):
    """The torch reference ops and kernels with dense weights: a prefill of `prefill` tokens, then decode steps."""
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)
    _, path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=5, reference=True)
    assert_close(paged.step([(0, ids[:prefill])]), ref[:prefill], "reference prefill")
    for i in range(prefill, len(ids)):
        assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def check_triton_backend(case, device: str, split: int, end: int = None, slots: int = 64):
    """The model over the Triton kernels (float32 on `device`; on a CPU under TRITON_INTERPRET=1): a prefill of
    `split` tokens over shuffled slots (of a pool of `slots`), then decode steps to `end` (default: the last
    token)."""
    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.forward_batch import ForwardBatch
    from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

    _, path, hf, ids = case
    ref = hf(ids)

    def factory(config):
        kv = KVPool(config.num_layers, slots, config.num_kv_heads, config.head_dim, device=device,
                    v_is_k=config.kv_v_is_k)
        return create_attention_backend("triton", kv, config.sm_scale)

    model, _ = load_model(path, torch.float32, factory, device=device)
    table = ReqToTokenPool(2, slots, device=device)
    slots = torch.randperm(slots, generator=torch.Generator().manual_seed(8))[:len(ids)].tolist()
    table.write(0, 0, slots)
    fb = ForwardBatch.build(ids[:split], [0], [split], [0], slots[:split], table.table,
                            logits_indices=list(range(split)), device=device)
    assert_close(model.compute_logits(model.forward(fb)).cpu(), ref[:split], "triton prefill")
    for i in range(split, end or len(ids)):
        fb = ForwardBatch.build([ids[i]], [i], [1], [0], [slots[i]], table.table, device=device)
        assert_close(model.compute_logits(model.forward(fb))[0].cpu(), ref[i], f"triton decode at {i}")


class FamilyCases:
    """A test file's family cases (logits_oracle.family_case of `length` tokens), one HF oracle per tiny model that
    runs each prompt once; path(arch, tiny_model) skips where this transformers lacks the arch's config class
    (config_classes: arch -> its class name).  cases(arch, tiny_model) -> (arch, path, oracle, ids)."""

    def __init__(self, config_classes: dict, length: int):
        self.config_classes, self.length, self.cases = config_classes, length, {}

    def path(self, arch, tiny_model):
        import pytest
        import transformers

        if not hasattr(transformers, self.config_classes[arch]):
            pytest.skip(f"this transformers has no {self.config_classes[arch]}")
        return tiny_model(arch)

    def __call__(self, arch, tiny_model):
        from logits_oracle import family_case

        if arch not in self.cases:
            _, path, hf, ids = family_case(arch, self.path(arch, tiny_model), self.length)
            self.cases[arch] = arch, path, _Remembered(hf), ids
        return self.cases[arch]


class _Remembered:
    """An HF oracle that runs each prompt once (the checks ask for the same ones again)."""

    def __init__(self, hf):
        self.hf, self.refs = hf, {}

    def __call__(self, ids):
        if tuple(ids) not in self.refs:
            self.refs[tuple(ids)] = self.hf(ids)
        return self.refs[tuple(ids)]


def hf_logits_cache(tiny_model, length: int):
    """arch -> (path, `length` random token ids, HF's logits of them), each computed once."""
    import random

    from logits_oracle import HF

    from radixlm.runtime.models.loader import load_tokenizer

    cases = {}

    def get(arch):
        if arch not in cases:
            path = tiny_model(arch)
            ids = random.Random(21).choices(range(load_tokenizer(path).vocab_size), k=length)
            cases[arch] = (path, ids, HF(path)(ids))
        return cases[arch]
    return get


def check_difference_left_out(case, left_out: str, how: str, change, tmp_path, monkeypatch):
    """The same weights (case: hf_logits_cache's path, ids, logits) run with one difference left out leave the bound
    of HF's own float noise.  how: "json" (config.json fields `change`), "fields" (ModelConfig fields `change`), else
    `change` is a monkeypatch.setattr argument tuple."""
    import dataclasses
    import json
    import shutil

    import pytest

    from radixlm.runtime.models import loader

    path, ids, ref = case
    folder = tmp_path / "variant"
    shutil.copytree(path, folder)
    if how == "json":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))
    elif how == "fields":
        read = loader.read_model_config
        monkeypatch.setattr(loader, "read_model_config", lambda p: dataclasses.replace(read(p), **change))
    else:
        monkeypatch.setattr(*change)
    with pytest.raises(AssertionError):
        assert_close(Paged(folder, reference=True).step([(0, ids)]), ref, f"without {left_out}")
