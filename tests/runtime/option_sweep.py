"""Each tiny architecture's HF config with one option changed at a time, against HF (not collected by pytest; run by
hand after adding a family, ~15 minutes per core for all of them):

    .venv/bin/python tests/runtime/option_sweep.py OUT.jsonl [ARCH ...]

Options changed: every boolean field of the config, the activation, one K/V head, a short sliding window, each
multiplier / soft-cap / scale times 0.6, and linear, YaRN and partial rotary where the rope is the default.  Each
change is built as a tiny random HF model and run as a prefill, an extend on a cached prefix beside a second
request's prefill, and decode steps of both (logits_oracle.py's bound).  One JSON line per change: "ok", "refused"
(a ValueError at load: what this runtime does not run), "WRONG" (served, logits past the bound), "load-error" /
"run-error" (another exception) or "hf-fail" (HF itself does not build or run the change: nothing to compare).
It found the lm heads that HF keeps untied whatever tie_word_embeddings says (tied_head.py).
"""

import copy
import gc
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import tiny_models as tm  # noqa: E402
import torch  # noqa: E402
from logits_oracle import HF, Paged, assert_close  # noqa: E402

NOT_MODEL_OPTIONS = {"use_cache", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
                     "is_encoder_decoder", "is_decoder", "add_cross_attention", "tie_encoder_decoder", "use_bfloat16",
                     "output_router_logits", "output_scores", "return_dict_in_generate", "pruned_heads",
                     "tf_legacy_loss", "gradient_checkpointing", "use_return_dict", "chunk_size_feed_forward",
                     "output_logits", "is_composition", "do_sample", "early_stopping"}
ACTIVATIONS = ("silu", "gelu", "gelu_pytorch_tanh", "relu")


def changes(cfg) -> list:
    """[(name, {field: value})] for one tiny config."""
    d = cfg.to_dict()
    out = []
    for k, v in d.items():
        if isinstance(v, bool) and k not in NOT_MODEL_OPTIONS:
            change = {k: not v}
            if k == "use_sliding_window" and not v:   # a window the test prompts exceed
                change.update(sliding_window=5, **({"max_window_layers": 0} if "max_window_layers" in d else {}))
            out.append((f"{k}={not v}", change))
    for k in ("hidden_act", "hidden_activation", "activation_function"):
        if isinstance(d.get(k), str):
            other = next(a for a in ACTIVATIONS if a != d[k])
            out.append((f"{k}={other}", {k: other}))
    if d.get("num_key_value_heads") not in (None, 1) and d.get("num_attention_heads"):
        out.append(("num_key_value_heads=1", {"num_key_value_heads": 1}))
    if isinstance(d.get("sliding_window"), int):
        out.append(("sliding_window=5", {"sliding_window": 5}))
    for k, v in d.items():
        if isinstance(v, float) and v != 0.0 and any(s in k for s in ("multiplier", "softcap", "logit_scale",
                                                                       "scaling", "scalar", "partial_rotary")):
            out.append((f"{k}*0.6", {k: v * 0.6}))
    rope = d.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("rope_type") == "default":
        out.append(("rope=linear", {"rope_parameters": {**rope, "rope_type": "linear", "factor": 2.0}}))
        out.append(("rope=yarn", {"rope_parameters": {**rope, "rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 16}}))
        if "partial_rotary_factor" not in rope and "partial_rotary_factor" not in d:
            out.append(("partial_rotary=0.5", {"rope_parameters": {**rope, "partial_rotary_factor": 0.5}}))
    return out


class _Folders:
    def mktemp(self, name):
        return pathlib.Path(tempfile.mkdtemp(prefix=name + "-"))


def check(cfg, tok, seed: int) -> tuple:
    """(result, message) of one config: see the module docstring."""
    path = tm.save_tiny_model(_Folders(), cfg, "sweep", tok, seed)
    try:
        try:
            ids = random.Random(3).choices(range(min(cfg.vocab_size, len(tok))), k=24)
            ref = HF(path)(ids)
        except Exception as exc:
            return "hf-fail", repr(exc)[:200]
        try:
            paged = Paged(path)
        except (ValueError, NotImplementedError) as exc:
            return "refused", str(exc)[:200]
        except Exception as exc:
            return "load-error", "".join(traceback.format_exception_only(exc))[:300]
        try:
            first = paged.step([(0, ids[:15])])
            both = paged.step([(0, ids[15:20]), (1, ids[:9])])
            assert_close(torch.cat([first, both[:5]]), ref[:20], "prefill + extend")
            assert_close(both[5:], ref[:9], "second request's prefill")
            for k in range(20, 24):
                step = paged.step([(0, [ids[k]]), (1, [ids[k - 11]])])
                assert_close(step[:1], ref[k:k + 1], f"decode {k}")
                assert_close(step[1:], ref[k - 11:k - 10], f"decode {k}, second request")
            return "ok", ""
        except AssertionError as exc:
            return "WRONG", str(exc)[:200]
        except Exception as exc:
            return "run-error", "".join(traceback.format_exception_only(exc))[:300]
    finally:
        Paged._loaded.clear()
        shutil.rmtree(path, ignore_errors=True)
        gc.collect()


def main(out_path: str, archs: list) -> None:
    torch.set_num_threads(1)
    tok = tm.make_tiny_tokenizer()
    eos, pad = tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")
    with open(out_path, "a") as out:
        for arch in archs:
            base = tm._hf_config(arch, len(tok), eos, pad)
            for name, change in [("base", {})] + changes(base):
                cfg = copy.deepcopy(base)
                try:
                    for k, v in change.items():
                        setattr(cfg, k, v)
                    result, msg = check(cfg, tok, 1000 + tm._SEED_ORDER.index(arch))
                except Exception as exc:    # the config class refuses the change itself
                    result, msg = "hf-fail", repr(exc)[:200]
                print(json.dumps({"arch": arch, "change": name, "result": result, "msg": msg}), file=out, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], sys.argv[2:] or list(tm._SEED_ORDER))
