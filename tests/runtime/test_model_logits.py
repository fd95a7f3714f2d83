"""Our Llama-family forward pass against HF transformers on the same weights (the oracle).

Every step goes through the paged KV pool with shuffled, non-contiguous slots over a pool filled
with garbage, so a wrong slot, a stale read or a broken mask changes the logits.  The model runs as
the server runs it on a CPU (attention backend "auto", linear weights packed for the CPU GEMM, fused
native elementwise ops, decode steps of a few rows in one native call: runtime/models/native_decode.py);
one test covers the torch reference kernels and ops with dense weights.

The bound is derived, not guessed.  The oracle is HF in float64 on the same weights; HF's own float32
run differs from it by the float32 noise of this machine's kernels (GEMM blocking and accumulation
order differ between AVX2, AVX-512 and AMX builds of oneDNN/MKL, so a fixed absolute bound fails on
some CPUs and is loose on others).  Our float32 error against float64 must stay within NOISE_FACTOR
times HF's float32 error on the same positions: a different but equally valid float32 summation
order lands within a small multiple of it, while a real bug (a wrong slot, a stale read, a broken
mask) moves logits by orders of magnitude more.  NOISE_FLOOR keeps the bound meaningful where HF's
own error happens to be near zero (tiny models): a few float32 ulps of the largest logit.
"""

import random

import pytest
import torch

from radixlm.runtime.attention_backend import create_attention_backend
from radixlm.runtime.forward_batch import ForwardBatch
from radixlm.runtime.memory_pool import KVPool, ReqToTokenPool
from radixlm.runtime.model_loader import load_model, load_tokenizer, resolve_model_path

TINY_ARCHS = ("llama", "qwen2", "qwen3", "mistral")  # built by conftest.make_tiny_model
NOISE_FACTOR = 4.0
NOISE_FLOOR_ULPS = 16
NUM_SLOTS, ROWS, MAX_CONTEXT = 512, 4, 128


class HF:
    """The oracle: HF transformers in float64 (reference) and float32 (its own noise) on one model."""

    def __init__(self, path):
        from transformers import AutoModelForCausalLM

        self.fp32 = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        self.fp64 = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float64).eval()

    def __call__(self, ids) -> "Ref":
        with torch.no_grad():
            x = torch.tensor([ids])
            return Ref(self.fp64(x).logits[0], self.fp32(x).logits[0].double())  # [L, V] each


class Ref:
    """float64 logits [L, V] and HF's float32 logits of the same positions; slicing keeps them paired."""

    def __init__(self, exact, fp32):
        self.exact, self.fp32 = exact, fp32

    def __getitem__(self, idx) -> "Ref":
        return Ref(self.exact[idx], self.fp32[idx])


class Paged:
    """Our model over a KV pool and block table; requests are rows, slots are shuffled.

    Models (with their pool) are cached per (path, dtype); each Paged refills the pool with garbage
    and starts an empty block table, so instances must not be interleaved.
    """

    _loaded = {}  # (path, dtype, reference) -> (model, config, kv pool): loading SmolLM2 is the slow part

    def __init__(self, path, dtype=torch.float32, seed=0, reference=False, rows=ROWS, rows_pack=False):
        key = (str(path), dtype, reference, rows_pack)
        if key not in self._loaded:
            box = {}

            def factory(config):
                box["kv"] = KVPool(config.num_layers, NUM_SLOTS, config.num_kv_heads, config.head_dim, dtype=dtype)
                return create_attention_backend("torch" if reference else "auto", box["kv"], config.sm_scale)

            model, config = load_model(path, dtype, factory)
            if not reference:
                model.enable_native_decode()
                model.pack_weights(rows_pack=rows_pack)
            self._loaded[key] = (model, config, box["kv"])
        self.model, self.config, kv = self._loaded[key]
        gen = torch.Generator().manual_seed(seed)
        for buf in kv.k_buffers + kv.v_buffers:  # garbage where nothing was written
            buf.copy_(10 * torch.randn(buf.shape, generator=gen))
        self.table = ReqToTokenPool(rows, MAX_CONTEXT)
        self.free = list(range(NUM_SLOTS))
        random.Random(seed).shuffle(self.free)
        self.cached = {}  # row -> tokens in the pool

    def step(self, reqs):
        """reqs: [(row, new_ids)] in one ForwardBatch -> logits of every new token [T, V] float32."""
        ids, prefix, ext, rows, locs = [], [], [], [], []
        for row, new in reqs:
            start = self.cached.get(row, 0)
            slots = [self.free.pop() for _ in new]
            self.table.write(row, start, slots)
            self.cached[row] = start + len(new)
            ids += new
            prefix.append(start)
            ext.append(len(new))
            rows.append(row)
            locs += slots
        fb = ForwardBatch.build(ids, prefix, ext, rows, locs, self.table.table, logits_indices=list(range(len(ids))))
        hidden = self.model.forward(fb)  # [T, H]
        return self.model.compute_logits(hidden[fb.logits_indices])  # [T, V]


def _assert_close(ours, ref: Ref, what):
    err = (ours.double() - ref.exact).abs().max().item()
    noise = (ref.fp32 - ref.exact).abs().max().item()
    floor = NOISE_FLOOR_ULPS * torch.finfo(torch.float32).eps * ref.exact.abs().max().item()
    bound = NOISE_FACTOR * noise + floor
    assert err <= bound, (f"{what}: max abs logit error {err:.3g} against float64, above {bound:.3g} "
                          f"({NOISE_FACTOR:g} x HF's own float32 error {noise:.3g} + {floor:.3g})")


@pytest.fixture(scope="session")
def smollm2_path():
    """The embedded default model, converted from GGUF once into the user cache."""
    return resolve_model_path("smollm2-135m-instruct")


@pytest.fixture(scope="module", params=TINY_ARCHS + ("smollm2",))
def case(request, tiny_model, smollm2_path):
    """-> (path, hf model, token ids of a 22-token sequence)."""
    if request.param == "smollm2":
        path = smollm2_path
        tok = load_tokenizer(path)
        ids = tok.encode("The capital of France is Paris. Counting: one, two, three, four, five", add_special_tokens=False)
    else:
        path = tiny_model(request.param)
        ids = random.Random(7).choices(range(load_tokenizer(path).vocab_size), k=22)
    ids = (ids * 2)[:22]
    return path, HF(path), ids


def test_prefill_single_and_batch(case):
    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path)
    _assert_close(paged.step([(0, ids)]), ref, "single prefill")
    short = ids[:13]
    both = paged.step([(1, short), (2, ids)])  # two requests of different lengths, one batch
    _assert_close(both[:13], hf(short), "batched prefill, request 1")
    _assert_close(both[13:], ref, "batched prefill, request 2")


def test_extend_on_cached_prefix(case):
    path, hf, ids = case
    ref = hf(ids)
    other = ids[5:] + ids[:3]
    ref_other = hf(other)
    paged = Paged(path, seed=1)
    paged.step([(0, ids[:11]), (3, other[:4])])
    out = paged.step([(0, ids[11:]), (3, other[4:])])  # extends of different prefix lengths
    _assert_close(out[:len(ids) - 11], ref[11:], "extend after prefix 11")
    _assert_close(out[len(ids) - 11:], ref_other[4:], "extend after prefix 4")


def test_chunked_prefill(case):
    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=2)
    for start in range(0, len(ids), 5):
        out = paged.step([(1, ids[start:start + 5])])
        _assert_close(out, ref[start:start + 5], f"chunk at {start}")


def test_decode_batch_of_two(case):
    path, hf, ids = case
    seq_a, seq_b = ids, ids[3:] + ids[:3]
    ref_a, ref_b = hf(seq_a), hf(seq_b)
    paged = Paged(path, seed=3)
    paged.step([(0, seq_a[:9]), (2, seq_b[:14])])
    for i in range(4):
        out = paged.step([(0, [seq_a[9 + i]]), (2, [seq_b[14 + i]])])  # [2, V]
        _assert_close(out[0], ref_a[9 + i], f"decode step {i}, request a")
        _assert_close(out[1], ref_b[14 + i], f"decode step {i}, request b")


def test_decode_batch_of_48_through_the_mkl_rows_pack(tiny_model, monkeypatch):
    """float32 decode batches of 40-64 rows multiply from MKL's packing for 64 rows, padded (packed_linear.py)."""
    from radixlm.runtime.models import packed_linear

    if not packed_linear.rows_pack_supported():
        pytest.skip("no MKL packed SGEMM for this CPU (used on Intel only): oneDNN runs every batch")
    assert packed_linear.rows_pack_available(torch.float32, "cpu")   # its self-test passed
    path = tiny_model("llama")
    hf, vocab = HF(path), load_tokenizer(path).vocab_size
    taken, real = [], packed_linear._linear_rows_pack
    monkeypatch.setattr(packed_linear, "_linear_rows_pack", lambda x, *a: taken.append(x.shape[0]) or real(x, *a))
    paged = Paged(path, seed=5, rows=48, rows_pack=True)
    seqs = [random.Random(100 + r).choices(range(vocab), k=6) for r in range(48)]
    paged.step([(r, seq[:5]) for r, seq in enumerate(seqs)])             # 240 prefill rows: oneDNN
    assert taken == []
    out = paged.step([(r, [seq[5]]) for r, seq in enumerate(seqs)])      # [48, V]
    assert taken and set(taken) == {48}                                   # every layer and the lm head
    for r, seq in enumerate(seqs):
        _assert_close(out[r], hf(seq)[5], f"request {r} of a 48-row decode step")


def test_single_row_decode_steps_in_one_native_call(case, monkeypatch):
    """Decode steps of one row take the one-call native path (where the architecture has it: not Qwen3's
    q/k norms), each step reading the K/V the previous native steps wrote."""
    from radixlm.runtime.models.native_decode import NativeDecode

    path, hf, ids = case
    ref = hf(ids)
    paged = Paged(path, seed=6)
    taken = []
    run = NativeDecode.run
    monkeypatch.setattr(NativeDecode, "run", lambda self, x, fb: taken.append(run(self, x, fb)) or taken[-1])
    paged.step([(1, ids[:10])])
    for i in range(10, 16):
        _assert_close(paged.step([(1, [ids[i]])])[0], ref[i], f"decode at {i}")
    native = [out is not None for out in taken]
    if paged.config.qk_norm:
        assert paged.model.native_decode is None and native == []
    else:
        assert native == [False] + [True] * 6, native  # the prefill runs op by op


def test_decode_batch_of_eight_in_one_native_call(case, monkeypatch):
    """A decode step of eight rows (up to MAX_ROWS_F32, the limit off AMX) in one native call: the row kernel's
    two groups of x rows and the attention of rows at different lengths.  The limit is set to 8 here so the
    path is checked on every CPU; which limit a CPU gets decides only its speed."""
    from radixlm.runtime.models.native_decode import NativeDecode

    path, hf, ids = case
    seqs = [ids[r:] + ids[:r] for r in range(8)]
    refs = [hf(seq) for seq in seqs]
    paged = Paged(path, seed=8, rows=8)
    if paged.model.native_decode is not None:
        monkeypatch.setattr(paged.model.native_decode, "max_rows", 8)
    taken = []
    run = NativeDecode.run
    monkeypatch.setattr(NativeDecode, "run", lambda self, x, fb: taken.append(run(self, x, fb)) or taken[-1])
    paged.step([(r, seq[:6 + r]) for r, seq in enumerate(seqs)])
    for i in range(3):
        out = paged.step([(r, [seq[6 + r + i]]) for r, seq in enumerate(seqs)])  # [8, V]
        for r in range(8):
            _assert_close(out[r], refs[r][6 + r + i], f"decode step {i}, request {r}")
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


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_reference_kernels_and_dense_weights(arch, tiny_model, monkeypatch):
    from radixlm.runtime.models import layer_ops

    monkeypatch.setattr(layer_ops, "_native", lambda x: False)  # torch elementwise ops too
    path = tiny_model(arch)
    ids = random.Random(9).choices(range(load_tokenizer(path).vocab_size), k=20)
    ref = HF(path)(ids)
    paged = Paged(path, seed=4, reference=True)
    _assert_close(paged.step([(0, ids[:12])]), ref[:12], "reference prefill")
    for i in range(12, 20):
        _assert_close(paged.step([(0, [ids[i]])])[0], ref[i], f"reference decode at {i}")


def test_packed_weights_are_used_on_cpu(tiny_model):
    from radixlm.runtime.models.packed_linear import packing_available

    if not packing_available(torch.float32, "cpu"):
        pytest.skip("this torch build cannot pack weights for the CPU GEMM")
    model = Paged(tiny_model("qwen2"), seed=5).model
    assert model.layers[0].self_attn.qkv_proj.is_mkldnn and model.lm_head.is_mkldnn
    assert not model.embed_tokens.is_mkldnn


def test_sharded_safetensors(make_tiny):
    path = make_tiny("qwen3", max_shard_size="100KB")
    shards = sorted(p.name for p in path.glob("*.safetensors"))
    assert (path / "model.safetensors.index.json").is_file() and len(shards) > 1, shards
    ids = list(range(3, 40, 2))
    _assert_close(Paged(path).step([(0, ids)]), HF(path)(ids), "sharded load")


def test_bf16_close_to_fp32(smollm2_path):
    ids = load_tokenizer(smollm2_path).encode(
        "Write a short poem about the sea and the wind, in three lines:", add_special_tokens=False)
    fp32 = Paged(smollm2_path, torch.float32).step([(0, ids)])
    bf16 = Paged(smollm2_path, torch.bfloat16).step([(0, ids)])
    assert bf16.dtype == torch.float32
    agree = (fp32.argmax(-1) == bf16.argmax(-1)).float().mean().item()
    rel = ((bf16 - fp32).norm(dim=-1) / fp32.norm(dim=-1)).max().item()
    assert agree >= 0.8, f"bf16 argmax agrees with fp32 on only {agree:.0%} of positions"
    assert rel < 0.1, f"bf16 logits differ from fp32 by {rel:.3f} (relative L2)"


def test_unknown_architecture_raises(tmp_path):
    from transformers import GPT2Config, LlamaConfig

    from radixlm.runtime.model_config import ModelConfig

    with pytest.raises(ValueError, match="unsupported model architecture"):
        ModelConfig.from_hf(GPT2Config())
    GPT2Config(architectures=["GPT2LMHeadModel"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        load_model(tmp_path)
    yarn = LlamaConfig(rope_scaling={"rope_type": "yarn", "factor": 4.0}, rope_theta=10000.0)
    with pytest.raises(ValueError, match="yarn"):
        ModelConfig.from_hf(yarn)


def test_model_config_fields(tiny_model, smollm2_path):
    from radixlm.runtime.model_loader import read_model_config

    smol = read_model_config(smollm2_path)
    assert (smol.architecture, smol.num_layers, smol.num_heads, smol.num_kv_heads, smol.head_dim,
            smol.vocab_size, smol.tie_word_embeddings) == ("LlamaForCausalLM", 30, 9, 3, 64, 49152, True)
    tok = load_tokenizer(smollm2_path)
    assert tok.is_fast and "<|im_start|>" in tok.chat_template
    assert tok.convert_tokens_to_ids("<|im_end|>") in smol.eos_token_ids
    mistral = read_model_config(tiny_model("mistral"))
    assert (mistral.max_position_embeddings, mistral.context_length) == (512, 128)  # capped to the window
    qwen3 = read_model_config(tiny_model("qwen3"))
    assert (qwen3.head_dim, qwen3.qk_norm, qwen3.attention_bias, qwen3.o_proj_bias) == (32, True, True, True)
    qwen2 = read_model_config(tiny_model("qwen2"))
    assert (qwen2.attention_bias, qwen2.o_proj_bias, qwen2.rope_scaling["rope_type"]) == (True, False, "linear")


def test_load_weights_rejects_incomplete_or_unknown(tiny_model):
    from radixlm.runtime.model_loader import iter_safetensors

    path = tiny_model("llama")
    model, _ = load_model(path)
    named = list(iter_safetensors(path))
    with pytest.raises(ValueError, match="missing"):
        model.load_weights(n for n in named if "mlp.up_proj" not in n[0])
    with pytest.raises(ValueError, match="unexpected"):
        model.load_weights(named + [("model.layers.0.mlp.extra.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        model.load_weights((n, t[:-1] if n == "model.norm.weight" else t) for n, t in named)


def test_resolve_model_path(smollm2_path, tiny_model, tmp_path):
    folder = resolve_model_path("smollm2-135m-instruct")
    assert folder == smollm2_path
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (folder / name).is_file(), name
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("smollm2-135m-instruct") == folder  # cached: not converted again
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime
    assert resolve_model_path(str(tiny_model("qwen2"))) == tiny_model("qwen2")
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError):
        resolve_model_path(str(tmp_path))  # a folder without config.json


def test_attention_backend_names():
    pool = KVPool(1, 4, 1, 8)
    from radixlm.kernels import cpu_native

    assert create_attention_backend("auto", pool, 0.5).name == ("cpu" if cpu_native.available() else "torch")
    assert create_attention_backend("torch", pool, 0.5).name == "torch"
    with pytest.raises(ValueError, match="unknown"):
        create_attention_backend("flash", pool, 0.5)
