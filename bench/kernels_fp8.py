"""FP8 against bf16 on CUDA, the kernels behind --kv-cache-dtype fp8_e4m3 and --quantization fp8 (issue 37).

decode: Triton decode attention at context 8,192 (32 query / 8 KV heads, d=128, Llama-3.1-8B's) over a bf16
KV pool and over the same pool stored as e4m3 (per-layer scales), CUDA-graph replays; ratio = bf16 time /
fp8 time (target 1.6x: half the bytes read).  gemm: one decoder layer's four linear products at the 8B shape
(qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down 4096x14336) for M tokens, bf16 F.linear against
fp8_linear (per-token activation quantization + torch._scaled_mm, what the model runs); ratio = bf16 / fp8.
Called by `bench/kernels.py --fp8`; returns rows for its JSON.
"""

import torch
import torch.nn.functional as F

DECODE_TARGET, DECODE_CONTEXT, DECODE_BATCHES = 1.6, 8192, (1, 8, 32, 128)
LINEARS_8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
GEMM_TOKENS = (1, 64, 512, 4096)


def bench_decode_fp8(timer, make_pool, page_size, hq=32, hkv=8, head_dim=128, batches=DECODE_BATCHES,
                     context=DECODE_CONTEXT, device="cuda"):
    """Rows of decode time, bf16 KV against e4m3 KV, same requests and block table."""
    from radixlm.kernels import dispatch
    from radixlm.kernels.torch_ref import E4M3, to_kv

    ops = dispatch.get_attention_ops("triton", device)
    rows = []
    for bsz in batches:
        k, v, table, rows_idx = make_pool([context] * bsz, hkv, head_dim, page_size, torch.bfloat16, device)
        k8, v8 = to_kv(k, E4M3, 0.5), to_kv(v, E4M3, 0.5)  # [S, Hkv, D] e4m3 each
        q = torch.randn(bsz, hq, head_dim, dtype=torch.bfloat16, device=device)  # [B, Hq, D]
        lens = torch.full((bsz,), context, dtype=torch.int32, device=device)  # [B]
        scale = head_dim ** -0.5
        bf16_ms = timer.graph(lambda: ops.decode_attention(q, k, v, table, rows_idx, lens, scale))
        fp8_ms = timer.graph(lambda: ops.decode_attention(q, k8, v8, table, rows_idx, lens, scale,
                                                          k_scale=0.5, v_scale=0.5))
        ref = ops.decode_attention(q, k, v, table, rows_idx, lens, scale).float()
        got = ops.decode_attention(q, k8, v8, table, rows_idx, lens, scale, k_scale=0.5, v_scale=0.5).float()
        rows.append(dict(kernel="decode-fp8-kv", hq=hq, hkv=hkv, head_dim=head_dim, batch=bsz, context=context,
                         bf16_us=1e3 * bf16_ms, fp8_us=1e3 * fp8_ms, ratio=bf16_ms / fp8_ms, target=DECODE_TARGET,
                         max_abs_diff_vs_bf16=(got - ref).abs().max().item()))
    return rows


def bench_gemm_fp8(timer, linears=LINEARS_8B, tokens=GEMM_TOKENS, device="cuda"):
    """Rows of one 8B layer's linear products, bf16 against FP8 weights and activations."""
    from radixlm.runtime.models.fp8_linear import Fp8Weight, choose_mode, fp8_linear

    weights = {}
    for name, (n, k) in linears.items():
        dense = torch.randn(n, k, dtype=torch.bfloat16, device=device) * 0.02  # [N, K]
        weights[name] = (dense, Fp8Weight.from_dense(dense, choose_mode(device, n, k)))
    rows = []
    for m in tokens:
        bf16_ms = fp8_ms = 0.0
        modes = set()
        for name, (dense, w8) in weights.items():
            x = torch.randn(m, dense.shape[1], dtype=torch.bfloat16, device=device)  # [M, K]
            bf16_ms += timer.graph(lambda: F.linear(x, dense))
            fp8_ms += timer.graph(lambda: fp8_linear(x, w8))
            modes.add(w8.mode)
        rows.append(dict(kernel="gemm-fp8-layer", tokens=m, bf16_us=1e3 * bf16_ms, fp8_us=1e3 * fp8_ms,
                         ratio=bf16_ms / fp8_ms, mode="/".join(sorted(modes))))
    return rows


def print_fp8(rows):
    print(f"{'kernel':<16} {'shape':<34} {'bf16 us':>9} {'fp8 us':>9} {'x':>6}  note")
    for r in rows:
        if r["kernel"] == "decode-fp8-kv":
            shape = f"B={r['batch']} ctx={r['context']} {r['hq']}/{r['hkv']}h d={r['head_dim']}"
            note = f"target {r['target']}x, max |fp8 - bf16| {r['max_abs_diff_vs_bf16']:.3g}"
        else:
            shape, note = f"8B layer, {r['tokens']} tokens", f"mode {r['mode']}"
        print(f"{r['kernel']:<16} {shape:<34} {r['bf16_us']:>9.1f} {r['fp8_us']:>9.1f} {r['ratio']:>5.2f}x  {note}")


def run_fp8(timer, make_pool, page_size):
    rows = bench_decode_fp8(timer, make_pool, page_size)
    rows += bench_gemm_fp8(timer)
    print_fp8(rows)
    return rows
