"""XGrammar vs llguidance on the JSONSchemaBench dev set (tests/data/jsonschemabench-dev, 100 schemas).

Per engine, through radixlm's GrammarBackend (normalization, audit and number bounds included) on the
SmolLM2 tokenizer: compile success (a refusal is a 400 naming the keyword), compile seconds, and mask
time per token over a seeded random walk of up to 64 tokens per schema.  Prints a table, writes JSON.
    .venv/bin/python bench/grammar_backends.py [--out bench/grammar_backends.json] [--engines xgrammar,llguidance,auto]
"""

import argparse
import glob
import json
import os
import random
import statistics
import sys
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]   # bench/kernels.py shadows HF's kernels
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "constrained"))
from grammar_walk import allowed_ids  # noqa: E402

from radixlm.constrained.backend import GrammarBackend, GrammarError  # noqa: E402

DEV = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "jsonschemabench-dev", "schemas")


def run(engine: str, tok, paths) -> dict:
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=engine, timeout_s=30)
    res = {"compiled": 0, "refused": 0, "llguidance": 0, "compile_s": [], "mask_us": []}
    rng = random.Random(0)
    bitmask = torch.zeros(1, (len(tok) + 31) // 32, dtype=torch.int32)
    try:
        for path in paths:
            with open(path) as f:
                text = f.read()
            t0 = time.perf_counter()
            try:
                compiled = backend.compile(("json", text), timeout=120)
            except GrammarError:
                res["refused"] += 1
                continue
            res["compile_s"].append(time.perf_counter() - t0)
            res["compiled"] += 1
            res["llguidance"] += compiled.engine == "llguidance"
            m = backend.matcher(compiled)
            for _ in range(64):
                if m.is_terminated():
                    break
                t0 = time.perf_counter()
                m.fill_bitmask(bitmask, 0)
                res["mask_us"].append((time.perf_counter() - t0) * 1e6)
                allowed = allowed_ids(bitmask, len(tok))
                if not allowed or not m.accept_token(rng.choice(allowed)):
                    break
    finally:
        backend.shutdown()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/grammar_backends.json")
    ap.add_argument("--engines", default="xgrammar,llguidance,auto")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from radixlm.runtime.models.loader import resolve_model_path
    tok = AutoTokenizer.from_pretrained(str(resolve_model_path("smollm2-135m-instruct")))
    paths = sorted(glob.glob(os.path.join(DEV, "*.json")))
    rows = {}
    print(f"{'engine':<11} {'compiled':>8} {'refused':>7} {'via llg':>7} {'compile p50 s':>13} {'mask p50 us':>11} "
          f"{'mask mean us':>12} {'mask p99 us':>11}")
    for engine in args.engines.split(","):
        r = run(engine, tok, paths)
        masks = sorted(r["mask_us"]) or [0.0]
        rows[engine] = {"schemas": len(paths), "compiled": r["compiled"], "refused": r["refused"],
                        "via_llguidance": r["llguidance"],
                        "compile_p50_s": statistics.median(r["compile_s"]) if r["compile_s"] else None,
                        "mask_p50_us": masks[len(masks) // 2], "mask_mean_us": statistics.fmean(masks),
                        "mask_p99_us": masks[int(len(masks) * 0.99)], "mask_samples": len(r["mask_us"])}
        x = rows[engine]
        print(f"{engine:<11} {x['compiled']:>8} {x['refused']:>7} {x['via_llguidance']:>7} "
              f"{x['compile_p50_s'] or 0:>13.3f} {x['mask_p50_us']:>11.0f} {x['mask_mean_us']:>12.0f} "
              f"{x['mask_p99_us']:>11.0f}")
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
