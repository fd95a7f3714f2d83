"""JSON decoding: the same schema-heavy requests with jump-forward, with grammar masks only, and free.

Three record schemas with long fixed property names, nested objects, enums and bounded strings (a
product catalog entry, a user profile, an address-book entry); each request is a chat-templated prompt
that shows its schema and asks for one record as JSON.  One engine, in one run, decodes the same
requests three ways, greedy, with the same max_new_tokens:

  jump-forward   json_schema: text the grammar forces is appended without a forward pass per token
  masks only     json_schema with the per-request `jump_forward: false`: one forward pass per token
  free           no constraint (the model's own attempt at the JSON)

It runs the three --rounds times, each round in a rotated order so a change in the machine's load
does not favour one mode; then the two constrained modes once more with --mask-batch requests in flight (32 by default)
for the share of the step time spent filling and applying the grammar masks.  The radix cache is
flushed before every comparison run, so each prefills its prompts the same way; the mask-share runs
find their prompts cached, so their steps are decode steps at that batch size.  Grammars are compiled
in the warm-up.

Per run: wall time of the whole batch, per-request latency (mean, median), output tokens, decode
forward passes per request (meta_info forward_passes minus the prompt's pass), mask time per masked
step and its share of the forward time (server_info grammar_mask_seconds / forward_seconds), and
validity (jsonschema on every output; one cut at max_new_tokens counts as invalid).  The speed-up is
the masks-only wall time over the jump-forward wall time, both summed over the rounds.

    python bench/json_decode.py [--num-requests 16] [--batch 8] [--max-new-tokens 384] [--rounds 2]
                                [--mask-batch 32] [--quick] [--out json_decode.json]
"""

import argparse
import asyncio
import json
import os
import statistics
import time

from _common import MODEL, machine_info, phase, print_table, write_json

SPEEDUP_TARGET = 1.5      # masks-only wall time / jump-forward wall time (structured-generation issue)
MASK_SHARE_TARGET = 0.05  # grammar mask fill + apply / forward time, at batch 32

# ---- the requests ----

PRODUCT = {
    "type": "object",
    "properties": {
        "product_identifier": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
        "product_display_name": {"type": "string", "minLength": 3, "maxLength": 40},
        "product_category_classification": {"enum": ["consumer_electronics", "home_and_kitchen_appliances",
                                                     "outdoor_and_sporting_goods", "office_supplies_and_stationery"]},
        "manufacturer_information": {
            "type": "object",
            "properties": {
                "manufacturer_company_name": {"type": "string", "minLength": 2, "maxLength": 30},
                "country_of_manufacture": {"enum": ["united_states_of_america", "peoples_republic_of_china",
                                                    "federal_republic_of_germany", "japan", "south_korea"]},
            },
            "required": ["manufacturer_company_name", "country_of_manufacture"],
            "additionalProperties": False,
        },
        "pricing_and_availability": {
            "type": "object",
            "properties": {
                "list_price_in_us_cents": {"type": "integer", "minimum": 0, "maximum": 10000000},
                "currently_available_for_purchase": {"type": "boolean"},
                "estimated_shipping_time_category": {"enum": ["same_day_delivery",
                                                              "standard_three_to_five_business_days",
                                                              "extended_international_shipping"]},
            },
            "required": ["list_price_in_us_cents", "currently_available_for_purchase",
                         "estimated_shipping_time_category"],
            "additionalProperties": False,
        },
        "package_dimensions": {
            "type": "object",
            "properties": {
                "package_length_in_centimeters": {"type": "integer", "minimum": 1, "maximum": 500},
                "package_width_in_centimeters": {"type": "integer", "minimum": 1, "maximum": 500},
                "package_height_in_centimeters": {"type": "integer", "minimum": 1, "maximum": 500},
            },
            "required": ["package_length_in_centimeters", "package_width_in_centimeters",
                         "package_height_in_centimeters"],
            "additionalProperties": False,
        },
        "warranty_coverage_duration_in_months": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["product_identifier", "product_display_name", "product_category_classification",
                 "manufacturer_information", "pricing_and_availability", "package_dimensions",
                 "warranty_coverage_duration_in_months"],
    "additionalProperties": False,
}

USER_PROFILE = {
    "type": "object",
    "properties": {
        "user_account_identifier": {"type": "string", "pattern": "^usr_[0-9]{6}$"},
        "full_legal_name": {
            "type": "object",
            "properties": {
                "first_given_name": {"type": "string", "minLength": 1, "maxLength": 20},
                "family_surname": {"type": "string", "minLength": 1, "maxLength": 20},
            },
            "required": ["first_given_name", "family_surname"],
            "additionalProperties": False,
        },
        "date_of_birth": {"type": "string", "pattern": "^(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])$"},
        "preferred_communication_language": {"enum": ["english_united_states", "english_united_kingdom",
                                                      "spanish_latin_america", "french_canada", "german"]},
        "account_membership_tier": {"enum": ["basic_free_membership", "premium_monthly_subscription",
                                             "enterprise_annual_contract"]},
        "notification_preferences": {
            "type": "object",
            "properties": {
                "receive_marketing_emails": {"type": "boolean"},
                "receive_security_alerts_by_text_message": {"type": "boolean"},
                "weekly_activity_digest_enabled": {"type": "boolean"},
            },
            "required": ["receive_marketing_emails", "receive_security_alerts_by_text_message",
                         "weekly_activity_digest_enabled"],
            "additionalProperties": False,
        },
        "account_verification_status": {"enum": ["email_address_verified", "identity_document_verified",
                                                 "verification_pending_review"]},
    },
    "required": ["user_account_identifier", "full_legal_name", "date_of_birth", "preferred_communication_language",
                 "account_membership_tier", "notification_preferences", "account_verification_status"],
    "additionalProperties": False,
}

ADDRESS_BOOK_ENTRY = {
    "type": "object",
    "properties": {
        "contact_display_name": {"type": "string", "minLength": 2, "maxLength": 40},
        "relationship_to_account_owner": {"enum": ["immediate_family_member", "personal_friend",
                                                   "professional_colleague", "service_provider"]},
        "primary_postal_address": {
            "type": "object",
            "properties": {
                "street_address_line_one": {"type": "string", "minLength": 3, "maxLength": 40},
                "city_or_locality_name": {"type": "string", "minLength": 2, "maxLength": 24},
                "state_or_province_code": {"type": "string", "pattern": "^[A-Z]{2}$"},
                "postal_code": {"type": "string", "pattern": "^[0-9]{5}$"},
                "country_iso_alpha2_code": {"enum": ["US", "CA", "GB", "DE", "FR"]},
            },
            "required": ["street_address_line_one", "city_or_locality_name", "state_or_province_code",
                         "postal_code", "country_iso_alpha2_code"],
            "additionalProperties": False,
        },
        "primary_telephone_number": {"type": "string", "pattern": "^\\+1-[0-9]{3}-[0-9]{3}-[0-9]{4}$"},
        "electronic_mail_address": {"type": "string", "pattern": "^[a-z]{2,12}\\.[a-z]{2,12}@example\\.com$"},
        "preferred_contact_time_window": {"enum": ["weekday_business_hours", "weekday_evenings_after_six",
                                                   "weekends_only"]},
    },
    "required": ["contact_display_name", "relationship_to_account_owner", "primary_postal_address",
                 "primary_telephone_number", "electronic_mail_address", "preferred_contact_time_window"],
    "additionalProperties": False,
}

KINDS = [  # (what the prompt calls it, schema, the things a record describes)
    ("product catalog", PRODUCT, [
        "a pair of noise-cancelling wireless headphones", "a stainless steel electric kettle",
        "a two-person camping tent", "a pack of recycled printer paper", "a 27-inch computer monitor",
        "a cast iron frying pan", "a carbon fibre road bicycle helmet", "a box of gel ink pens"]),
    ("user profile", USER_PROFILE, [
        "a retired teacher who lives in Ohio", "a graduate student from Madrid", "a software engineer in Toronto",
        "a nurse working night shifts in London", "a small bakery owner in Berlin", "a high school student in Texas",
        "a freelance photographer in Mexico City", "a pilot based in Seattle"]),
    ("address book", ADDRESS_BOOK_ENTRY, [
        "the account owner's sister in Boston", "a dentist in Chicago", "a former colleague in Denver",
        "a childhood friend in Miami", "the plumber the owner calls in emergencies", "a cousin in Vancouver",
        "a neighbour in Portland", "the owner's manager in New York"]),
]


def build_requests(tokenizer, num: int) -> list:
    """num requests, cycling over the three kinds: {"kind", "schema", "input_ids"} each."""
    out = []
    for i in range(num):
        title, schema, things = KINDS[i % len(KINDS)]
        thing = things[(i // len(KINDS)) % len(things)]
        if i >= len(KINDS) * len(things):
            thing += f" (record {i // (len(KINDS) * len(things)) + 1})"
        text = (f"Here is the JSON schema of a {title} record:\n{json.dumps(schema)}\n\n"
                f"Write the {title} record of {thing} as one JSON object that follows the schema. "
                f"Reply with the JSON only.")
        chat = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
        out.append({"kind": title, "schema": schema, "input_ids": tokenizer.encode(chat, add_special_tokens=False)})
    return out


MODES = {  # name -> per-request sampling params added to the common ones
    "jump-forward": lambda schema: {"json_schema": json.dumps(schema)},
    "masks only": lambda schema: {"json_schema": json.dumps(schema), "jump_forward": False},
    "free": lambda schema: {},
}


# ---- running ----

async def _run_all(engine, requests, params, concurrency, progress_s, label):
    """Every request through async_generate with at most `concurrency` in flight; returns
    (outputs in request order, latencies in seconds)."""
    gate = asyncio.Semaphore(concurrency)
    outs, lats = [None] * len(requests), [0.0] * len(requests)
    done, last_print = 0, time.perf_counter()

    async def one(i, req):
        nonlocal done, last_print
        async with gate:
            start = time.perf_counter()
            outs[i] = await engine.async_generate(input_ids=req["input_ids"], sampling_params=params[i])
            lats[i] = time.perf_counter() - start
        done += 1
        if time.perf_counter() - last_print >= progress_s and done < len(requests):
            last_print = time.perf_counter()
            print(f"    {label}: {done}/{len(requests)} finished", flush=True)

    await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
    return outs, lats


def run_mode(engine, requests, mode, max_new_tokens, concurrency, progress_s, round_no=None,
             cached_prompts=False) -> dict:
    """One run; the radix cache is flushed first, then (cached_prompts) filled with the prompts."""
    params = [{"max_new_tokens": max_new_tokens, "temperature": 0, **MODES[mode](r["schema"])} for r in requests]
    label = f"{mode}, {len(requests)} requests, {concurrency} in flight" + (f", round {round_no}" if round_no else "")
    engine.flush_cache()
    if cached_prompts:
        with phase(f"cache the {len(requests)} prompts"):
            engine.generate(input_ids=[r["input_ids"] for r in requests], sampling_params={"max_new_tokens": 0})
    before = engine.get_server_info()
    record = {"mode": mode, "round": round_no, "batch": concurrency, "requests": len(requests),
              "prompts_cached": cached_prompts}
    with phase(label, record):
        outs, lats = asyncio.run(_run_all(engine, requests, params, concurrency, progress_s, mode))
    after = engine.get_server_info()
    delta = {k: after[k] - before[k] for k in ("steps", "forward_seconds", "grammar_mask_seconds",
                                               "grammar_mask_steps", "jump_forward_tokens", "prefill_tokens")}
    metas = [o["meta_info"] for o in outs]
    valid = [is_valid(o["text"], m["finish_reason"], r["schema"]) for o, m, r in zip(outs, metas, requests)]
    record.update({
        "wall_s": record.pop("seconds"),
        "latency_mean_s": statistics.mean(lats),
        "latency_median_s": statistics.median(lats),
        "output_tokens": sum(m["completion_tokens"] for m in metas),
        "decode_passes_per_req": statistics.mean(max(0, m["forward_passes"] - 1) for m in metas),
        "tokens_per_pass": sum(m["completion_tokens"] for m in metas) / max(1, sum(m["forward_passes"] for m in metas)),
        "steps": delta["steps"],
        "forward_s": delta["forward_seconds"],
        "mask_s": delta["grammar_mask_seconds"],
        "masked_steps": delta["grammar_mask_steps"],
        "mask_ms_per_step": 1e3 * delta["grammar_mask_seconds"] / delta["grammar_mask_steps"]
        if delta["grammar_mask_steps"] else None,
        "mask_share": delta["grammar_mask_seconds"] / delta["forward_seconds"] if delta["forward_seconds"] else None,
        "jump_forward_tokens": delta["jump_forward_tokens"],
        "stopped": sum(m["finish_reason"]["type"] == "stop" for m in metas),
        "valid": sum(valid),
        "valid_rate": sum(valid) / len(valid),
        "latencies_s": lats,
        "forward_passes": [m["forward_passes"] for m in metas],
        "completion_tokens": [m["completion_tokens"] for m in metas],
        "sample_text": outs[0]["text"][:600],
    })
    print(f"    {record['output_tokens']} tokens, {record['decode_passes_per_req']:.1f} decode passes per request, "
          f"{record['valid']}/{len(requests)} valid, {record['stopped']} stopped, "
          f"mask {record['mask_s']:.2f} s of {record['forward_s']:.1f} s forward", flush=True)
    return record


def is_valid(text: str, finish_reason: dict, schema: dict) -> bool:
    """The whole text parses as JSON and validates (a code fence or a cut output does not)."""
    import jsonschema

    if finish_reason.get("type") != "stop":
        return False
    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8, help="requests in flight in the comparison runs")
    ap.add_argument("--mask-batch", type=int, default=32,
                    help="requests (all in flight) of the mask-share runs; 0 skips them")
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=2, help="comparison rounds, each in a rotated mode order")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-total-tokens", type=int, default=None, help="KV cache size (default: what the runs need)")
    ap.add_argument("--progress-s", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 3 requests, 64 new tokens, one round; mask-share runs: 32 requests, 16 new tokens")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if min(args.num_requests, args.batch, args.rounds, args.max_new_tokens) < 1 or args.mask_batch < 0:
        ap.error("--num-requests, --batch, --rounds and --max-new-tokens must be >= 1, --mask-batch >= 0")
    mask_tokens = args.max_new_tokens
    if args.quick:
        args.num_requests, args.batch, args.rounds = min(args.num_requests, 3), min(args.batch, 3), 1
        args.max_new_tokens, mask_tokens = min(args.max_new_tokens, 64), min(args.max_new_tokens, 16)

    from transformers import AutoTokenizer

    from radixlm import Engine
    from radixlm.runtime.models.loader import resolve_model_path

    machine = machine_info()
    print(f"machine: {machine.get('cpu')}, {machine['cores']} cores, load {machine.get('loadavg_1_5_15')}")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path(MODEL)))
    requests = build_requests(tokenizer, max(args.num_requests, args.mask_batch))
    lens = [len(r["input_ids"]) for r in requests]
    print(f"{args.num_requests} requests ({args.batch} in flight), prompts {min(lens)}..{max(lens)} tokens, "
          f"{args.max_new_tokens} new tokens at most, {args.rounds} round(s); mask-share runs: {args.mask_batch} "
          f"requests, {mask_tokens} new tokens")
    in_flight = max(args.batch, args.mask_batch)
    kv = args.max_total_tokens or max(8192, int(1.2 * in_flight * (max(lens) + max(args.max_new_tokens, mask_tokens))))

    runs, mask_runs = [], []
    result = {"bench": "json_decode", "config": {**vars(args), "mask_max_new_tokens": mask_tokens},
              "machine": machine, "runs": runs, "mask_runs": mask_runs}
    with phase(f"radixlm {args.dtype}: start engine"):
        engine = Engine(model=MODEL, dtype=args.dtype, max_total_tokens=kv, max_running_requests=in_flight,
                        log_level="warning")
    try:
        with phase("warm-up (compiles the three grammars)"):
            warm = requests[:len(KINDS)]
            engine.generate(input_ids=[r["input_ids"] for r in warm],
                            sampling_params=[{"max_new_tokens": 8, "temperature": 0, "json_schema": json.dumps(r["schema"])}
                                             for r in warm])
        names = list(MODES)
        for r in range(args.rounds):
            for mode in names[r % len(names):] + names[:r % len(names)]:
                runs.append(run_mode(engine, requests[:args.num_requests], mode, args.max_new_tokens, args.batch,
                                     args.progress_s, r + 1))
                summarize(result)
                write_json(args.out, result)
        if args.mask_batch:
            for mode in ("jump-forward", "masks only"):
                mask_runs.append(run_mode(engine, requests[:args.mask_batch], mode, mask_tokens, args.mask_batch,
                                          args.progress_s, cached_prompts=True))
                summarize(result)
                write_json(args.out, result)
    finally:
        engine.shutdown()

    print()
    print_table(runs + mask_runs, [
        ("mode", "mode", "{}"), ("round", "round", "{}"), ("batch", "batch", "{}"), ("wall_s", "wall s", "{:.1f}"),
        ("latency_mean_s", "mean lat s", "{:.2f}"), ("latency_median_s", "median lat s", "{:.2f}"),
        ("output_tokens", "out tokens", "{}"), ("decode_passes_per_req", "decode passes/req", "{:.1f}"),
        ("tokens_per_pass", "tok/pass", "{:.2f}"), ("mask_ms_per_step", "mask ms/step", "{:.2f}"),
        ("mask_share", "mask share", "{:.1%}"), ("valid_rate", "valid", "{:.0%}")])
    s = result["summary"]
    print(f"jump-forward vs masks only, end to end: {s['speedup']:.2f}x (target >= {SPEEDUP_TARGET}x: "
          f"{'met' if s['speedup'] >= SPEEDUP_TARGET else 'MISSED'}; per round "
          f"{', '.join(f'{x:.2f}x' for x in s['round_speedups'])}); median latency {s['latency_speedup']:.2f}x; "
          f"decode passes per request {s['passes_ratio']:.2f}x fewer")
    if "mask_share_batch" in s:
        print(f"mask fill + apply at batch {args.mask_batch}: {s['mask_share_batch']:.1%} of the forward time "
              f"(worst of the two constrained modes; target < {MASK_SHARE_TARGET:.0%}: "
              f"{'met' if s['mask_share_batch'] < MASK_SHARE_TARGET else 'MISSED'})")
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, result)


def summarize(result) -> None:
    """Ratios and target verdicts from what has run so far."""
    s = result["summary"] = {"speedup_target": SPEEDUP_TARGET, "mask_share_target": MASK_SHARE_TARGET}
    result["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    rounds = {}   # round -> {mode: run}; only rounds in which both constrained modes ran count
    for r in result["runs"]:
        rounds.setdefault(r["round"], {})[r["mode"]] = r
    pairs = [(m["jump-forward"], m["masks only"]) for m in rounds.values() if "jump-forward" in m and "masks only" in m]
    if pairs:
        s["speedup"] = sum(b["wall_s"] for _, b in pairs) / sum(a["wall_s"] for a, _ in pairs)
        s["round_speedups"] = [b["wall_s"] / a["wall_s"] for a, b in pairs]
        s["latency_speedup"] = (statistics.median(x for _, b in pairs for x in b["latencies_s"])
                                / statistics.median(x for a, _ in pairs for x in a["latencies_s"]))
        s["passes_ratio"] = (statistics.mean(b["decode_passes_per_req"] for _, b in pairs)
                             / max(statistics.mean(a["decode_passes_per_req"] for a, _ in pairs), 1e-9))
        s["meets_speedup_target"] = s["speedup"] >= SPEEDUP_TARGET
    shares = [r["mask_share"] for r in result["mask_runs"] if r["mask_share"] is not None]
    if shares:
        s["mask_share_batch"] = max(shares)
        s["meets_mask_share_target"] = s["mask_share_batch"] < MASK_SHARE_TARGET


if __name__ == "__main__":
    main()
