"""Issue 36's acceptance measurement: real-world JSON Schemas through the OpenAI chat endpoint, checked
with `jsonschema`.

Starts `radixlm serve` on SmolLM2-135M-Instruct (or uses --base-url) and, for each schema of a
JSONSchemaBench sample, sends one chat request, temperature 0 (--temperature), seed 0, max_tokens 384 (--max-tokens), with
response_format {"type": "json_schema", "json_schema": {"name": ..., "schema": ...}} and a short user
prompt asking for one JSON instance (the schema's title and description, where it has them; the schema
itself is not in the prompt; with --prompt schema it is, cut at 3,000 characters).  --concurrency requests are in flight at once (the server batches them).

Per schema: HTTP status; for a 400 its message and whether it names a keyword (quoted) and a JSON
pointer; finish_reason; whether the content parses as JSON and validates with the validator class of
the schema's "$schema" (Draft 2020-12 when absent).  A schema jsonschema itself cannot check (it fails
check_schema, or validation raises, e.g. an unresolvable $ref) is counted apart.  `format` is an
annotation by default, so it is not part of "valid"; outputs that a FormatChecker rejects are counted
beside it.

Totals: stop answers that violate their schema (must be 0), refusals and how many name a keyword and a
pointer, valid within --max-tokens as a share of all schemas, length finishes.

Schema sets:
  dev       tests/data/jsonschemabench-dev (100 schemas, 10 per subset), the set used in development
  held-out  --jsb-dir DIR: the data/ folder of a JSONSchemaBench checkout (data/<subset>/*.json, e.g.
            from the repository guidance-ai/jsonschemabench); --held-out N (50) schemas drawn with a
            fixed seed, evenly across the subsets, leaving out every file of the dev set
--limit N takes N schemas spread evenly across the subsets (the first of each subset, then the second,
...; files sorted by name), for a bounded run.

    .venv/bin/python bench/schema_bench.py [--set dev|held-out] [--jsb-dir DIR] [--held-out 50]
        [--grammar-backend xgrammar|llguidance|auto] [--prompt short|schema] [--limit N] [--concurrency 16] [--max-tokens 384]
        [--dtype float32|bfloat16] [--base-url URL] [--out FILE]
"""

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MODEL, lscpu_info, machine_info, phase, print_table, write_json  # noqa: E402

DEV_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "jsonschemabench-dev"
POINTER = re.compile(r"(?:^|\s|\()(?:#?/[^\s,;)]*|#)(?=$|[\s,;)])")
SCHEMA_PROMPT_CHARS = 3000
KEYWORD = re.compile(r"keyword\s+'[^']+'|'[A-Za-z$][A-Za-z0-9$]*'")


# ---------------------------------------------------------------- the schema sets

def dev_set() -> list:
    """[(subset, name, path, source_path)] of the dev set, in manifest order."""
    manifest = json.loads((DEV_DIR / "manifest.json").read_text())
    return [(f["subset"], f["file"], DEV_DIR / "schemas" / f["file"], f["source_path"]) for f in manifest["files"]]


def held_out_set(jsb_dir: str, n: int, seed: int = 36, exclude: tuple = (), exclude_paths: frozenset = frozenset()) -> list:
    """n schemas from a JSONSchemaBench data/ folder, evenly across its subsets (seeded), none of the dev set
    nor of the samples named in `exclude` ((seed, n) pairs: samples already used, in the order they were
    drawn; each is drawn again as it was, leaving out the ones before it), nor `exclude_paths`."""
    dev = {src for _, _, _, src in dev_set()} | set(exclude_paths)
    for i, (old_seed, old_n) in enumerate(exclude):
        dev |= {src for _, _, _, src in held_out_set(jsb_dir, old_n, old_seed, tuple(exclude[:i]))}
    root = Path(jsb_dir)
    subsets = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not subsets:
        raise SystemExit(f"--jsb-dir {jsb_dir}: no subset folders (expected data/<subset>/*.json)")
    rng = random.Random(seed)
    pools = {}
    for s in subsets:
        files = sorted(p.name for p in (root / s).glob("*.json") if f"data/{s}/{p.name}" not in dev)
        rng.shuffle(files)
        pools[s] = files
    picked = []
    while len(picked) < n and any(pools.values()):
        for s in subsets:
            if pools[s] and len(picked) < n:
                name = pools[s].pop()
                picked.append((s, f"{s}__{name}", root / s / name, f"data/{s}/{name}"))
    return picked


def used_paths(files: list) -> frozenset:
    """The data/<subset>/<file> paths named by --exclude-run files."""
    paths = set()
    for f in files:
        data = json.loads(Path(f).read_text())
        paths |= {r["source_path"] for r in data["records"]} if isinstance(data, dict) else set(data)
    return frozenset(paths)


def same_as(jsb_dir: str, run_file: str) -> list:
    """The schemas of an earlier run (its --out file), in that run's order."""
    root = Path(jsb_dir)
    items = []
    for r in json.loads(Path(run_file).read_text())["records"]:
        subset, name = r["source_path"].split("/")[-2:]
        items.append((subset, f"{subset}__{name}", root / subset / name, r["source_path"]))
    return items


def spread(items: list, limit: int) -> list:
    """The first `limit` of items taken round-robin across subsets (each subset's files sorted by name)."""
    by_subset = OrderedDict()
    for it in sorted(items, key=lambda it: (it[0], it[1])):
        by_subset.setdefault(it[0], []).append(it)
    out, i = [], 0
    while len(out) < limit and any(i < len(v) for v in by_subset.values()):
        for v in by_subset.values():
            if i < len(v) and len(out) < limit:
                out.append(v[i])
        i += 1
    return out


# ---------------------------------------------------------------- one request

def prompt_for(schema, style: str = "short") -> str:
    """short: the title and description only; schema: the schema's JSON (up to SCHEMA_PROMPT_CHARS) too."""
    if style == "schema":
        text = json.dumps(schema, separators=(",", ":"))
        if len(text) > SCHEMA_PROMPT_CHARS:
            text = text[:SCHEMA_PROMPT_CHARS] + " ...(cut)"
        return f"Write one example JSON instance of this JSON schema. Answer with the JSON only.\nSchema: {text}"
    parts = []
    if isinstance(schema, dict):
        for key in ("title", "description"):
            if isinstance(schema.get(key), str) and schema[key].strip():
                parts.append(" ".join(schema[key].split())[:300])
    what = f" ({'; '.join(parts)})" if parts else ""
    return f"Write one example JSON instance of the JSON schema{what}. Answer with the JSON only."


def schema_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name.rsplit(".json", 1)[0])[:64]


def post(url: str, body: dict, headers: dict, timeout: float):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, {"error": {"message": text}}


def validate(schema, instance) -> dict:
    """{"valid": bool | None, "error": str, "format_ok": bool | None}; valid None: jsonschema cannot check."""
    import jsonschema
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        err = jsonschema.exceptions.best_match(cls(schema).iter_errors(instance))
        out = {"valid": err is None, "error": "" if err is None else
               f"{err.message[:300]} (at instance {err.json_path}, schema {'/'.join(map(str, err.schema_path))})"}
        try:
            fmt = cls(schema, format_checker=cls.FORMAT_CHECKER)
            out["format_ok"] = fmt.is_valid(instance)
        except Exception:
            out["format_ok"] = None
        return out
    except Exception as exc:   # SchemaError, unresolvable $ref, a regex Python cannot compile, ...
        return {"valid": None, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "format_ok": None}


def run_one(item, url: str, headers: dict, max_tokens: int, timeout: float, prompt: str = "short",
            temperature=0.0) -> dict:
    subset, name, path, source = item
    rec = {"subset": subset, "schema": name, "source_path": source}
    try:
        schema = json.loads(Path(path).read_text())
    except ValueError as exc:
        rec.update(status=None, outcome="bad_schema_file", error=str(exc)[:200])
        return rec
    body = {"model": MODEL, "max_tokens": max_tokens, "seed": 0,
            **({} if temperature is None else {"temperature": temperature}),
            "messages": [{"role": "user", "content": prompt_for(schema, prompt)}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": schema_name(name), "schema": schema}}}
    t0 = time.perf_counter()
    try:
        status, resp = post(url + "/v1/chat/completions", body, headers, timeout)
    except Exception as exc:   # timeout, connection reset
        rec.update(status=None, outcome="transport_error", error=f"{type(exc).__name__}: {exc}"[:300],
                   seconds=round(time.perf_counter() - t0, 2))
        return rec
    rec["status"], rec["seconds"] = status, round(time.perf_counter() - t0, 2)
    if status != 200:
        msg = str((resp.get("error") or {}).get("message", resp))
        rec.update(outcome="refused" if status == 400 else "error", message=msg[:600],
                   names_keyword=bool(KEYWORD.search(msg)), names_pointer=bool(POINTER.search(msg)))
        return rec
    choice = resp["choices"][0]
    content = choice["message"].get("content") or ""
    rec.update(finish_reason=choice.get("finish_reason"), completion_tokens=resp.get("usage", {}).get(
        "completion_tokens"), content=content[:2000])
    try:
        instance = json.loads(content)
        rec["parses"] = True
    except ValueError:
        rec.update(parses=False, valid=False, outcome=rec["finish_reason"] or "unknown")
        return rec
    rec.update(validate(schema, instance))
    rec["outcome"] = rec["finish_reason"] or "unknown"
    return rec


# ---------------------------------------------------------------- totals

def totals(records: list) -> dict:
    n = len(records)
    ok = [r for r in records if r.get("status") == 200]
    stop = [r for r in ok if r.get("finish_reason") == "stop"]
    refused = [r for r in records if r.get("status") == 400]
    checkable_stop = [r for r in stop if r.get("valid") is not None]
    return {
        "schemas": n,
        "http_200": len(ok),
        "refused_400": len(refused),
        "refused_naming_keyword_and_pointer": sum(r["names_keyword"] and r["names_pointer"] for r in refused),
        "other_errors": sum(1 for r in records if r.get("status") not in (200, 400)),
        "stop": len(stop),
        "stop_invalid": sum(1 for r in checkable_stop if not r["valid"]),
        "stop_unparsable": sum(1 for r in stop if not r.get("parses")),
        "stop_unchecked": sum(1 for r in stop if r.get("parses") and r.get("valid") is None),
        "length": sum(1 for r in ok if r.get("finish_reason") == "length"),
        "valid": sum(1 for r in ok if r.get("valid") is True),
        "valid_share": round(sum(1 for r in ok if r.get("valid") is True) / n, 3) if n else None,
        "valid_format_failed": sum(1 for r in ok if r.get("valid") is True and r.get("format_ok") is False),
        "unchecked_schemas": sum(1 for r in ok if r.get("parses") and r.get("valid") is None),
    }


def print_report(label: str, records: list, tot: dict) -> None:
    by_subset = OrderedDict()
    for r in records:
        by_subset.setdefault(r["subset"], []).append(r)
    rows = [{"subset": s, **totals(v)} for s, v in sorted(by_subset.items())] + [{"subset": "all", **tot}]
    print(f"\n{label}")
    print_table(rows, [("subset", "subset", "{}"), ("schemas", "n", "{}"), ("refused_400", "400", "{}"),
                       ("refused_naming_keyword_and_pointer", "400 kw+ptr", "{}"), ("stop", "stop", "{}"),
                       ("stop_invalid", "stop invalid", "{}"), ("stop_unparsable", "stop unparsable", "{}"),
                       ("stop_unchecked", "unchecked", "{}"), ("length", "length", "{}"),
                       ("valid", "valid", "{}"), ("valid_share", "valid share", "{:.0%}"),
                       ("other_errors", "other", "{}")])
    bad = [r for r in records if r.get("finish_reason") == "stop" and (r.get("valid") is False)]
    for r in bad:
        print(f"  STOP BUT INVALID {r['schema']}: {r.get('error') or 'does not parse'}\n    content: {r['content'][:300]}")
    for r in records:
        if r.get("status") == 400 and not (r["names_keyword"] and r["names_pointer"]):
            print(f"  400 without keyword/pointer {r['schema']}: {r['message'][:300]}")
        elif r.get("status") not in (200, 400):
            print(f"  {r.get('status')} {r['schema']}: {r.get('message') or r.get('error')}"[:400])


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=["dev", "held-out"], default="dev")
    ap.add_argument("--jsb-dir", help="JSONSchemaBench data/ folder (data/<subset>/*.json) for --set held-out")
    ap.add_argument("--held-out", type=int, default=50, help="held-out sample size")
    ap.add_argument("--seed", type=int, default=36, help="seed of the held-out sample")
    ap.add_argument("--exclude-sample", action="append", default=[], metavar="SEED:N",
                    help="leave out the schemas of an earlier held-out sample (one used in development)")
    ap.add_argument("--exclude-run", action="append", default=[], metavar="FILE",
                    help="leave out the schemas of an earlier run: its --out JSON, or a JSON list of data/<subset>/<file> paths")
    ap.add_argument("--same-as", metavar="FILE", help="the schemas of an earlier run's --out file, in its order "
                    "(an A/B on one sample; with --set held-out and --jsb-dir)")
    ap.add_argument("--grammar-backend", default="xgrammar", choices=["xgrammar", "llguidance", "auto"])
    ap.add_argument("--limit", type=int, help="at most N schemas, spread evenly across the subsets")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--temperature", default="0", help="a number, or 'default' to send none (the API's 1.0); "
                                                       "requests carry seed 0 either way")
    ap.add_argument("--prompt", choices=["short", "schema"], default="short",
                    help="short: title/description only; schema: the schema's JSON in the prompt too (cut at "
                         f"{SCHEMA_PROMPT_CHARS} characters)")
    ap.add_argument("--dtype", help="float32, or bfloat16 (default: bfloat16 where lscpu shows avx512_bf16 or amx_bf16)")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--base-url", help="use this running server instead of starting one (--grammar-backend and "
                                       "--dtype are then the server's)")
    ap.add_argument("--server-args", default="", help="more `radixlm serve` options")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per request")
    ap.add_argument("--out", help="write the per-schema records and totals as JSON")
    args = ap.parse_args()

    if args.set == "held-out":
        if not args.jsb_dir:
            raise SystemExit("--set held-out needs --jsb-dir (JSONSchemaBench's data/ folder)")
        exclude = [tuple(int(x) for x in e.split(":")) for e in args.exclude_sample]
        items = (same_as(args.jsb_dir, args.same_as) if args.same_as else
                 held_out_set(args.jsb_dir, args.held_out, args.seed, tuple(exclude), used_paths(args.exclude_run)))
    else:
        items = dev_set()
    if args.limit:
        items = spread(items, args.limit)
    flags = set(lscpu_info().get("flags", []))
    dtype = args.dtype or ("bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32")

    server = None
    if args.base_url:
        url = args.base_url.rstrip("/")
    else:
        from serving_launch import LaunchedServer
        spec = (f"--model {args.model} --dtype {dtype} --grammar-backend {args.grammar_backend} "
                f"--max-running-requests {max(args.concurrency, 1)} {args.server_args}")
        server = LaunchedServer(spec, Path(tempfile.mkdtemp(prefix="schema_bench-")), 0)
        url = server.url
        print(f"server log: {server.log_path}", flush=True)
    headers = {}
    result = {"bench": "schema_bench", "set": args.set, "grammar_backend": args.grammar_backend, "dtype": dtype,
              "model": args.model, "max_tokens": args.max_tokens, "prompt": args.prompt, "temperature": args.temperature, "concurrency": args.concurrency,
              "limit": args.limit, "seed": args.seed if args.set == "held-out" else None,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_info(),
              "command": " ".join([os.path.basename(sys.executable), *sys.argv])}
    try:
        if server:
            with phase("server start"):
                server.wait_ready(600, headers)
        timing = {}
        with phase(f"{len(items)} schemas, {args.concurrency} at a time", timing):
            done = [0]

            def one(it):
                rec = run_one(it, url, headers, args.max_tokens, args.timeout, args.prompt,
                              None if args.temperature == "default" else float(args.temperature))
                done[0] += 1
                print(f"[{time.strftime('%H:%M:%S')}] {done[0]}/{len(items)} {rec['schema']}: {rec.get('status')} "
                      f"{rec.get('finish_reason') or ''} valid={rec.get('valid')}", flush=True)
                return rec
            with ThreadPoolExecutor(max(args.concurrency, 1)) as pool:
                records = list(pool.map(one, items))
        result["seconds"] = round(timing["seconds"], 1)
    finally:
        if server:
            server.stop()
    tot = totals(records)
    result["totals"], result["records"] = tot, records
    print_report(f"schema_bench: {args.set}, {len(items)} schemas, --grammar-backend {args.grammar_backend}, "
                 f"{dtype}, max_tokens {args.max_tokens}, prompt {args.prompt}", records, tot)
    print(f"\nstop answers violating their schema: {tot['stop_invalid']} (+{tot['stop_unparsable']} unparsable); "
          f"refusals: {tot['refused_400']} ({tot['refused_naming_keyword_and_pointer']} name keyword and pointer); "
          f"valid within {args.max_tokens} tokens: {tot['valid']}/{tot['schemas']} = {tot['valid_share']:.0%}; "
          f"length finishes: {tot['length']}; unchecked by jsonschema: {tot['unchecked_schemas']}")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
