"""Grammar exactness over a whole schema corpus, without a model: every finished random walk of a compiled
JSON-schema grammar must validate with `jsonschema`.

For each schema of a JSONSchemaBench data/ folder (or any folder of *.json schemas), in a seeded order: compile
it through radixlm's GrammarBackend as the server does (--grammar-backend, --json-indent, the SmolLM2
tokenizer), then walk the matcher --walks times: each step fills the token mask and picks an allowed token,
with probability --bias one that holds a closing `"`, `}` or `]` (or the stop token), so walks finish; the
last walks use a stronger bias.  A finished walk (the stop token accepted) is decoded and checked with the
validator class of the schema's "$schema" (Draft 2020-12 when absent; `format` as an annotation).  A schema
jsonschema itself cannot check is counted apart; a refusal (400) is recorded with its message.

One JSON line per schema goes to --out as it is done, so a run can stop anywhere and go on later
(--resume skips the paths already in --out); --shard K/N takes every N-th schema of the order, from K.
Prints each schema with an output that violates it, then totals.

    .venv/bin/python bench/schema_oracle.py --jsb-dir /tmp/jsb/data --out oracle.jsonl [--budget-s 3600]
        [--grammar-backend auto|xgrammar|llguidance] [--walks 6] [--max-steps 400] [--shard 0/2] [--resume]
"""

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

_HERE = os.path.dirname(os.path.abspath(__file__))
# bench/kernels.py would shadow Hugging Face's `kernels`, which transformers imports where it is installed
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "constrained"))
from grammar_walk import walk  # noqa: E402

CLOSING = '"}]'


def check_schema(backend, tok, closing, path: Path, walks: int, max_steps: int) -> dict:
    import jsonschema

    rec = {"path": str(path)}
    try:
        schema = json.loads(path.read_text())
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(schema)
    except Exception as exc:   # not a schema jsonschema can check: counted apart
        rec["skip"] = f"{type(exc).__name__}"
        return rec
    try:
        compiled = backend.compile(("json", json.dumps(schema)), timeout=120)
    except Exception as exc:
        rec["refused"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        return rec
    rec["engine"] = compiled.engine
    rng, finished, bad = random.Random(0), 0, []
    for w in range(walks):
        try:
            ids, done = walk(backend.matcher(compiled), len(tok), rng, max_steps,
                             prefer=lambda ok: [i for i in ok if i in closing], bias=0.5 if w < walks - 2 else 0.85)
        except AssertionError as exc:   # a live state that allows no token, or a token its own mask allowed refused
            bad.append({"walk_error": f"{exc}"})
            continue
        if not done:
            continue
        finished += 1
        text = tok.decode(ids[:-1])
        try:
            value = json.loads(text)
        except ValueError as exc:
            bad.append({"text": text[:2000], "error": f"not JSON: {exc}"})
            continue
        try:
            error = next(iter(validator.iter_errors(value)), None)
        except Exception as exc:   # validation itself raised (an unresolvable $ref): not the grammar's doing
            rec["validation_raised"] = str(exc)[:200]
            continue
        if error is not None:
            bad.append({"text": text[:2000], "error": error.message[:300],
                        "at": "/" + "/".join(map(str, error.absolute_path))})
    rec["finished"] = finished
    if bad:
        rec["bad"] = bad
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jsb-dir", required=True, help="a folder of JSON schemas (searched recursively)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--grammar-backend", default="auto", choices=["auto", "xgrammar", "llguidance"])
    ap.add_argument("--json-indent", type=int, default=2)
    ap.add_argument("--walks", type=int, default=6)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--skip", type=int, default=0,
                    help="start at this place of the order (a walk whose output file is gone: its first SKIP were walked)")
    ap.add_argument("--shard", default="0/1", help="K/N: every N-th schema of the order, from the K-th")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting new schemas after this long")
    ap.add_argument("--resume", action="store_true", help="skip the schemas already in --out")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from radixlm.constrained.backend import GrammarBackend
    from radixlm.runtime.models.loader import resolve_model_path

    k, n = map(int, args.shard.split("/"))
    files = sorted(Path(args.jsb_dir).rglob("*.json"))
    random.Random(args.seed).shuffle(files)
    files = files[args.skip:][k::n]
    done = set()
    if args.resume and os.path.exists(args.out):
        done = {json.loads(line)["path"] for line in open(args.out)}
    tok = AutoTokenizer.from_pretrained(str(resolve_model_path("smollm2-135m-instruct")))
    backend = GrammarBackend(tok, len(tok), {tok.eos_token_id}, engine=args.grammar_backend, timeout_s=20,
                             json_indent=args.json_indent)
    closing = {i for i in range(len(tok)) if any(c in tok.decode([i]) for c in CLOSING)} | {tok.eos_token_id}
    stop = None if args.budget_s is None else time.monotonic() + args.budget_s
    counts = Counter()
    try:
        with open(args.out, "a") as out:
            for path in files:
                if stop is not None and time.monotonic() > stop:
                    break
                if str(path) in done:
                    continue
                rec = check_schema(backend, tok, closing, path, args.walks, args.max_steps)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                kind = "skipped" if "skip" in rec else "refused" if "refused" in rec else rec["engine"]
                counts[kind] += 1
                counts["finished walks"] += rec.get("finished", 0)
                if "bad" in rec:
                    counts["schemas with an invalid output"] += 1
                    first = rec["bad"][0]
                    print(f"INVALID {path}: {first.get('error', first.get('walk_error'))}", flush=True)
    finally:
        backend.shutdown()
    print(json.dumps(dict(counts), indent=1))


if __name__ == "__main__":
    main()
