"""Quality beside speed: perplexity and top-1 agreement of the default model (SmolLM2-135M) with its GGUF weights
kept quantized (--quantization gguf), format by format, against the same model in bfloat16, in one run.

Text: Isaac Newton's "Opticks" (Project Gutenberg), which ships inside the installed tvm_ffi package
(3rdparty/libbacktrace/Isaac.Newton-Opticks.txt, a compression test corpus); nothing is downloaded.  Its first
--tokens tokens are cut into windows of --window tokens, each run as one prefill from an empty cache; every token
after a window's first is scored.  Perplexity = exp(mean negative log-likelihood).  Top-1 agreement: the share of
those positions where the quantized model's argmax equals the bfloat16 model's (teacher-forced greedy choices).

The bfloat16 reference is the default Q4_1 GGUF dequantized (radixlm's load without --quantization); each
quantized file is loaded kept quantized.  The Q8_0, Q4_0 and Q4_K_M files are requantized from the Q4_1 one with
llama.cpp's llama-quantize --allow-requantize (bench/build_llama_server.sh builds it and makes them).

    .venv/bin/python bench/quality.py --out bench/results/quality.json                # the Q4_1 file alone
    eval "$(bash bench/build_llama_server.sh)"
    .venv/bin/python bench/quality.py --gguf $GGUF_Q8_0 --gguf $GGUF_Q4_0 --gguf $GGUF_Q4_K_M
"""

import argparse
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _common import machine_info, print_table, write_json  # noqa: E402

sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]   # bench/kernels.py would shadow `kernels`


def corpus_text() -> str:
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("bench/quality.py reads a text shipped in the tvm_ffi package, which is not installed")
    for root in spec.submodule_search_locations:
        path = Path(root) / "3rdparty" / "libbacktrace" / "Isaac.Newton-Opticks.txt"
        if path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    raise SystemExit("Isaac.Newton-Opticks.txt not found in tvm_ffi")


def _load(path, gguf):
    import torch

    from radixlm.runtime.models.loader import load_model
    from radixlm.runtime.runner.attention_backend import create_attention_backend
    from radixlm.runtime.runner.memory_pool import KVPool

    def factory(config):
        pool = KVPool(config.num_layers, 4096, config.num_kv_heads, config.head_dim, dtype=torch.bfloat16)
        return create_attention_backend("auto", pool, config.sm_scale)

    model, _ = load_model(path, torch.bfloat16, factory, gguf=gguf)
    if gguf is None:
        model.pack_weights()
    return model


def _window_logits(model, ids):
    """ids [L] from an empty cache -> log-probabilities [L, V] float32 of every next token."""
    import torch

    from radixlm.runtime.runner.forward_batch import ForwardBatch

    n = len(ids)
    table = torch.zeros(2, n + 1, dtype=torch.int32)                                 # [rows, context]
    table[0, :n] = torch.arange(n, dtype=torch.int32)
    fb = ForwardBatch.build(ids, [0], [n], [0], list(range(n)), table, logits_indices=list(range(n)))
    with torch.inference_mode():
        logits = model.compute_logits(model.forward(fb))                             # [L, V]
    return torch.log_softmax(logits.float(), dim=-1)                                 # [L, V]


def evaluate(model, windows):
    """-> (perplexity, argmax per scored position [list of [L-1] tensors], seconds)."""
    import torch

    nll, count, argmaxes, start = 0.0, 0, [], time.perf_counter()
    for ids in windows:
        logp = _window_logits(model, ids)[:-1]                                       # [L-1, V]
        target = torch.tensor(ids[1:])                                               # [L-1]
        nll -= logp.gather(1, target[:, None]).sum().item()
        count += target.numel()
        argmaxes.append(logp.argmax(-1))
    return math.exp(nll / count), argmaxes, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", action="append", default=[], help="more quantized files (Q4_1 always runs)")
    ap.add_argument("--tokens", type=int, default=51200)
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    from radixlm.kernels import cpu_quant
    from radixlm.runtime.model_paths import gguf_file
    from radixlm.runtime.models.gguf_weights import quantization_name
    from radixlm.runtime.models.loader import load_tokenizer, resolve_model_path

    default = str(gguf_file("smollm2-135m-instruct"))
    path = resolve_model_path(default)
    ids = load_tokenizer(path).encode(corpus_text())
    if len(ids) < args.tokens:
        raise SystemExit(f"the text has {len(ids)} tokens, fewer than --tokens {args.tokens}")
    ids = ids[:args.tokens - args.tokens % args.window]
    windows = [ids[i:i + args.window] for i in range(0, len(ids), args.window)]
    ppl, ref_argmax, secs = evaluate(_load(path, None), windows)
    rows = [{"weights": "bf16 (Q4_1 dequantized)", "file_mib": "", "ppl": round(ppl, 4), "ppl_vs_bf16": "",
             "top1_vs_bf16": 1.0, "seconds": round(secs, 1)}]
    for gguf in [default, *args.gguf]:
        model = _load(path, gguf)
        q_ppl, argmax, secs = evaluate(model, windows)
        agree = sum(int((a == b).sum()) for a, b in zip(argmax, ref_argmax)) / sum(a.numel() for a in argmax)
        rows.append({"weights": quantization_name(model.quantization), "file_mib": round(os.path.getsize(gguf) / 2**20, 1),
                     "ppl": round(q_ppl, 4), "ppl_vs_bf16": f"{100 * (q_ppl / ppl - 1):+.2f}%",
                     "top1_vs_bf16": round(agree, 4), "seconds": round(secs, 1), "file": os.path.basename(gguf)})
        del model
    print_table(rows, [(k, k, "{}") for k in ("weights", "file_mib", "ppl", "ppl_vs_bf16", "top1_vs_bf16", "seconds")])
    print(f"{len(windows)} windows of {args.window} tokens ({len(ids)} tokens, {len(ids) - len(windows)} scored) of "
          f"Newton's Opticks; kernels {cpu_quant.best_isa()}, threads {torch.get_num_threads()}")
    if args.out:
        write_json(args.out, {"machine": machine_info(), "tokens": len(ids), "window": args.window, "rows": rows})


if __name__ == "__main__":
    main()
