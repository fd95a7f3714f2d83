"""Tool-calling agent loop over the OpenAI API: N agents x T turns under one long shared system prompt,
each turn one forced tool call (tool_choice required, parallel_tool_calls false) streamed through the
`openai` SDK, then the tool's result, against launched servers, in one run:

    radix     radixlm as it is: the assistant turns go back as the SDK returned them, so their calls
              re-encode to the generated tokens and the radix tree matches the whole previous turn
    off       the same loop against a server with --disable-radix-cache
    template  the radix server again (cache flushed first), but the call ids in the history are
              changed, so the generated-turn store cannot match and the chat template renders them

Reports per mode and turn: prompt tokens, cached tokens, prompt tokens computed (prompt - cached),
requests whose cached_tokens cover the agent's previous prompt + output (all but its last token), the
hit rate from turn 2, mean TTFT, and wall time / throughput; then the speedups.  Every call's
arguments are validated against the tool's schema (jsonschema).

With --chat-template tests/data/reasoning/qwen3.jinja (a thinking template: the server's reasoning parser
follows it) and --max-thinking-tokens N, every turn thinks first (the budget forces `</think>`), the
forced call follows the thinking, and the assistant turn goes back with its reasoning_content.

    python bench/tool_loop.py [--model smollm2-135m-instruct] [--agents 8] [--turns 4]
                              [--system-tokens 1500] [--modes radix,off,template] [--out f.json]
                              [--chat-template FILE --max-thinking-tokens 24]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import MODEL, machine_info, phase, print_table, write_json  # noqa: E402
from serving_launch import LaunchedServer  # noqa: E402

TARGET_HIT, TARGET_SPEEDUP = 0.95, 5.0      # issue 11
KEYS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
TOOLS = [
    {"type": "function", "function": {"name": "lookup", "description": "Look a record up by its key", "parameters": {
        "type": "object", "properties": {"key": {"enum": KEYS}}, "required": ["key"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "description": "Add two small integers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                         "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TASKS = ["Look up the record alpha, then add its fields.", "Find beta and sum the numbers you get.",
         "Check gamma, then add 2 and 3.", "Get delta and total it up.", "Look up omega and sum it."]


def system_text(words: int) -> str:
    rules = ["Call exactly one tool per turn.", "Never invent tool results.", "Prefer the lookup tool first.",
             "Keep arguments small.", "Report numbers exactly.", "Stop when the task is done."]
    lines = [f"Rule {i}: {rules[i % len(rules)]} (policy section {i // 6 + 1})" for i in range(max(1, words // 9))]
    return "You are a careful tool-using agent.\n" + "\n".join(lines)


def calibrated_system(client, model: str, tokens: int) -> tuple:
    """A system prompt of about `tokens` tokens (counted by the server's own tokenizer)."""
    words = tokens
    for _ in range(3):
        text = system_text(words)
        got = client.completions.create(model=model, prompt=text, max_tokens=0).usage.prompt_tokens
        if abs(got - tokens) <= tokens * 0.03:
            break
        words = int(words * tokens / got)
    return text, got


def stream_turn(client, model: str, messages: list, max_tokens: int, seed: int, thinking: int = 0) -> dict:
    """One streamed request: the assistant message rebuilt from the deltas, usage and TTFT."""
    start = time.perf_counter()
    ttft, content, reasoning, calls, usage, finish = None, "", "", [], None, None
    stream = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=max_tokens, temperature=0, seed=seed, stream=True, stream_options={"include_usage": True},
        extra_body={"max_thinking_tokens": thinking} if thinking else None)
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            if ttft is None:
                ttft = time.perf_counter() - start
            content += ch.delta.content or ""
            reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            for tc in ch.delta.tool_calls or []:
                if tc.index == len(calls):
                    calls.append({"id": tc.id, "type": "function",
                                  "function": {"name": tc.function.name, "arguments": ""}})
                calls[tc.index]["function"]["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    message = {"role": "assistant", "content": content or None, "tool_calls": calls or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    return {"message": message, "reasoning_chars": len(reasoning),
            "prompt": usage.prompt_tokens, "cached": usage.prompt_tokens_details.cached_tokens,
            "output": usage.completion_tokens, "ttft": ttft, "seconds": time.perf_counter() - start,
            "finish": finish}


def tool_result(call: dict) -> str:
    args = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "add":
        return json.dumps({"sum": args["a"] + args["b"]})
    return json.dumps({"key": args["key"], "fields": [3, 4], "note": "record found"})


def run_agent(client, model: str, system: str, agent: int, turns: int, max_tokens: int, rename_ids: bool,
              thinking: int = 0) -> list:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": TASKS[agent % len(TASKS)]}]
    rows, previous = [], None
    for turn in range(turns):
        r = stream_turn(client, model, messages, max_tokens, seed=agent * 100 + turn, thinking=thinking)
        calls = r["message"]["tool_calls"] or []
        valid = r["finish"] == "tool_calls" and len(calls) == 1
        if valid:
            try:
                jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), SCHEMAS[calls[0]["function"]["name"]])
            except (ValueError, jsonschema.ValidationError):
                valid = False
        r.update(agent=agent, turn=turn + 1, valid=valid,
                 covers=None if previous is None else r["cached"] >= previous["prompt"] + previous["output"] - 1)
        rows.append(r)
        previous = r
        message = r.pop("message")
        if not valid:
            break
        call_id = calls[0]["id"]
        if rename_ids:      # the history as a client that rewrites ids would send it: the store cannot match
            call_id = "call_" + uuid.uuid4().hex[:24]
            message = {**message, "tool_calls": [{**calls[0], "id": call_id}]}
        messages += [message, {"role": "tool", "tool_call_id": call_id, "content": tool_result(calls[0])}]
    return rows


def run_mode(url: str, model: str, system: str, args, rename_ids: bool) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=1800)
    start = time.perf_counter()
    with ThreadPoolExecutor(args.agents) as pool:
        per_agent = list(pool.map(lambda a: run_agent(client, model, system, a, args.turns, args.max_tokens,
                                                      rename_ids, args.max_thinking_tokens), range(args.agents)))
    wall = time.perf_counter() - start
    rows = [r for agent in per_agent for r in agent]
    turns = []
    for t in range(1, args.turns + 1):
        at = [r for r in rows if r["turn"] == t]
        if not at:
            continue
        prompt, cached = sum(r["prompt"] for r in at), sum(r["cached"] for r in at)
        covers = [r["covers"] for r in at if r["covers"] is not None]
        turns.append({"turn": t, "requests": len(at), "prompt": prompt, "cached": cached, "computed": prompt - cached,
                      "hit": cached / prompt if prompt else 0.0, "covered": f"{sum(covers)}/{len(covers)}" if covers else "",
                      "ttft_ms": 1000 * statistics.mean(r["ttft"] for r in at),
                      "output": sum(r["output"] for r in at), "valid": sum(r["valid"] for r in at)})
    later = [r for r in rows if r["turn"] >= 2]
    later_prompt = sum(r["prompt"] for r in later)
    return {"wall_s": wall, "turns": turns, "requests": len(rows), "valid": sum(r["valid"] for r in rows),
            "computed": sum(r["prompt"] - r["cached"] for r in rows), "prompt": sum(r["prompt"] for r in rows),
            "hit_from_turn2": sum(r["cached"] for r in later) / later_prompt if later_prompt else 0.0,
            "covered_from_turn2": sum(bool(r["covers"]) for r in later), "later_requests": len(later),
            "output_tokens": sum(r["output"] for r in rows),
            "thinking_turns": sum(r["reasoning_chars"] > 0 for r in rows),
            "req_per_s": len(rows) / wall, "output_tok_per_s": sum(r["output"] for r in rows) / wall,
            "ttft_ms_mean": 1000 * statistics.mean(r["ttft"] for r in rows)}


def post(url: str, path: str) -> None:
    import urllib.request
    req = urllib.request.Request(url + path, data=b"{}", headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-tokens", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=96, help="per turn (a call is about 25 tokens)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--server-args", default="", help="more `radixlm serve` options for every server")
    ap.add_argument("--modes", default="radix,off,template")
    ap.add_argument("--launch-timeout", type=float, default=600)
    ap.add_argument("--chat-template", default=None, help="a chat template file for every server (a thinking one)")
    ap.add_argument("--max-thinking-tokens", type=int, default=0, help="thinking budget per turn (0: none sent)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    modes = args.modes.split(",")
    base = f"--model {args.model} --dtype {args.dtype} {args.server_args}".strip()
    if args.chat_template:
        base += f" --chat-template {os.path.abspath(args.chat_template)}"
    log_dir = Path(tempfile.mkdtemp(prefix="tool_loop-"))
    results, system, sys_tokens = {}, None, None
    plan = [("radix", base, False), ("template", base, True), ("off", base + " --disable-radix-cache", False)]
    servers = {}
    try:
        for mode, spec, rename in plan:
            if mode not in modes:
                continue
            if spec not in servers:
                for other in servers.values():      # one server at a time: the 2 cores are the measurement
                    other.stop()
                servers = {spec: LaunchedServer(spec, log_dir, len(results))}
                with phase(f"start {spec}"):
                    servers[spec].wait_ready(args.launch_timeout, {})
            server = servers[spec]
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)
            model = client.models.list().data[0].id
            if system is None:
                system, sys_tokens = calibrated_system(client, model, args.system_tokens)
            post(server.url, "/flush_cache")
            with phase(f"{mode}: {args.agents} agents x {args.turns} turns"):
                results[mode] = run_mode(server.url, model, system, args, rename)
    finally:
        for server in servers.values():
            server.stop()

    columns = [("turn", "turn", "{}"), ("requests", "reqs", "{}"), ("prompt", "prompt tok", "{:,}"),
               ("cached", "cached", "{:,}"), ("computed", "computed", "{:,}"), ("hit", "hit", "{:.1%}"),
               ("covered", "covers prev", "{}"), ("ttft_ms", "TTFT ms", "{:,.0f}"), ("valid", "valid calls", "{}")]
    for mode, r in results.items():
        print(f"\n{mode}: {r['wall_s']:.1f} s, {r['req_per_s']:.2f} req/s, {r['output_tok_per_s']:.1f} output tok/s, "
              f"hit from turn 2 {r['hit_from_turn2']:.1%}, {r['computed']:,} of {r['prompt']:,} prompt tokens "
              f"computed, {r['valid']}/{r['requests']} valid calls, {r['thinking_turns']} turns with reasoning")
        print_table(r["turns"], columns)
    summary = {}
    if "radix" in results:
        for other in ("off", "template"):
            if other in results:
                summary[f"speedup_vs_{other}"] = results[other]["wall_s"] / results["radix"]["wall_s"]
        r = results["radix"]
        summary["met"] = {"hit_from_turn2": r["hit_from_turn2"] >= TARGET_HIT,
                          "every_request_covers_previous": r["covered_from_turn2"] == r["later_requests"],
                          "speedup_vs_off": summary.get("speedup_vs_off", 0) >= TARGET_SPEEDUP}
    print("\n" + json.dumps(summary))
    if args.out:
        write_json(args.out, {"machine": machine_info(), "args": vars(args), "system_tokens": sys_tokens,
                              "results": results, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
