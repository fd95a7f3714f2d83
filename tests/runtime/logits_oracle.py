"""The logits oracle of the model tests: HF transformers in float64 and float32 on the same weights, our
model over a paged KV pool (Paged), and the derived bound (assert_close).

The bound is derived, not guessed.  The oracle is HF in float64 on the same weights; HF's own float32
run differs from it by the float32 noise of this machine's kernels (GEMM blocking and accumulation
order differ between AVX2, AVX-512 and AMX builds of oneDNN/MKL, so a fixed absolute bound fails on
some CPUs and is loose on others).  Our float32 error against float64 must stay within NOISE_FACTOR
times HF's float32 error on the same positions: a different but equally valid float32 summation
order lands within a small multiple of it, while a real bug (a wrong slot, a stale read, a broken
mask) moves logits by orders of magnitude more.  NOISE_FLOOR keeps the bound meaningful where HF's
own error happens to be near zero (tiny models): a few float32 ulps of the largest logit.
"""

import os
import random

import torch

from radixlm.runtime.models.loader import load_model
from radixlm.runtime.runner.attention_backend import create_attention_backend
from radixlm.runtime.runner.forward_batch import ForwardBatch
from radixlm.runtime.runner.memory_pool import KVPool, ReqToTokenPool

TINY_ARCHS = ("llama", "qwen2", "qwen3", "mistral")  # built by conftest.make_tiny_model
NOISE_FACTOR = 4.0
NOISE_FLOOR_ULPS = 16
NUM_SLOTS, ROWS, MAX_CONTEXT = 512, 4, 128


class HF:
    """The oracle: HF transformers in float64 (reference) and float32 (its own noise) on one model."""

    def __init__(self, path):
        from tiny_models import hf_auto_class
        from transformers import AutoConfig

        auto = hf_auto_class(AutoConfig.from_pretrained(str(path)).model_type)
        # experts token by token (HF's "eager"): its grouped_mm path has no float64
        kw = {"experts_implementation": "eager"} if _is_moe(path) else {}
        self.fp32 = auto.from_pretrained(str(path), dtype=torch.float32, **kw).eval()
        self.fp64 = auto.from_pretrained(str(path), dtype=torch.float64, **kw).eval()

    def __call__(self, ids) -> "Ref":
        with torch.no_grad():
            x = torch.tensor([ids])
            return Ref(self.fp64(x).logits[0], self.fp32(x).logits[0].double())  # [L, V] each


def _is_moe(path) -> bool:
    import json
    from pathlib import Path

    from radixlm.runtime.models.moe_config import MOE_ARCHITECTURES

    archs = set(json.loads((Path(path) / "config.json").read_text()).get("architectures", ()))
    return bool(archs & {*MOE_ARCHITECTURES, "Qwen3VLMoeForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                          "GraniteMoeHybridForCausalLM", "Lfm2MoeForCausalLM", "NemotronHForCausalLM",
                          "Gemma4ForCausalLM", "JambaForCausalLM", "LaraMiniForCausalLM",
                          "MiniMaxForCausalLM", "KimiLinearForCausalLM",
                          "BailingHybridForCausalLM", "Qwen4ExpForCausalLM", "Kimi_K25ForConditionalGeneration",
                          "Qwen3OmniMoeThinkerForConditionalGeneration", "Glm4vMoeForConditionalGeneration",
                          "NemotronH_Omni_Reasoning_V3", "ZayaForCausalLM", "LongcatFlashForCausalLM",
                          "MiMoV2FlashForCausalLM", "InklingForCausalLM", "Inkling2ForCausalLM",
                          "Inkling2LoopForCausalLM", "Ernie4_5_VLMoeForConditionalGeneration",
                          "AriaForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
                          "Dots3NoteForConditionalGeneration", "DeepseekOcr2ForConditionalGeneration",
                          "Step3p7ForConditionalGeneration",
                          "InklingForConditionalGeneration", "Inkling2ForConditionalGeneration",
                          "Inkling2LoopForConditionalGeneration", "HYV4VLForConditionalGeneration",
                          "MiniMaxM3SparseForConditionalGeneration", "MuseSparkForConditionalGeneration",
                          "MistralLarge4ForConditionalGeneration"})


def family_case(arch, path, length, seed=21):
    """-> (arch, path, HF oracle, `length` random token ids of the model's vocabulary): a family test's case."""
    from radixlm.runtime.models.loader import load_tokenizer

    ids = random.Random(seed).choices(range(load_tokenizer(path).vocab_size), k=length)
    return arch, path, HF(path), ids


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

    def __init__(self, path, dtype=torch.float32, seed=0, reference=False, rows=ROWS, rows_pack=False, amx_pack=False,
                 gguf=None):
        """gguf: load_model's gguf (weights kept quantized; the kernels' ISA from $RADIXLM_QUANT_ISA, else the best)."""
        key = (str(path), dtype, reference, rows_pack, amx_pack, gguf and (str(gguf), os.environ.get("RADIXLM_QUANT_ISA")))
        if key not in self._loaded:
            box = {}

            def factory(config):
                box["kv"] = KVPool(config.num_layers, NUM_SLOTS, config.num_kv_heads, config.head_dim, dtype=dtype,
                                   v_is_k=config.kv_v_is_k)
                return create_attention_backend("torch" if reference else "auto", box["kv"], config.sm_scale)

            model, config = load_model(path, dtype, factory, gguf=gguf)
            if not reference:
                model.enable_native_decode()
                model.pack_weights(rows_pack=rows_pack, amx_pack=amx_pack)
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


def assert_close(ours, ref: Ref, what):
    err = (ours.double() - ref.exact).abs().max().item()
    noise = (ref.fp32 - ref.exact).abs().max().item()
    floor = NOISE_FLOOR_ULPS * torch.finfo(torch.float32).eps * ref.exact.abs().max().item()
    bound = NOISE_FACTOR * noise + floor
    assert err <= bound, (f"{what}: max abs logit error {err:.3g} against float64, above {bound:.3g} "
                          f"({NOISE_FACTOR:g} x HF's own float32 error {noise:.3g} + {floor:.3g})")

