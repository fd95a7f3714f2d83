"""Workloads of bench/serving.py: deterministic lists of sessions built from a seed.

A Session is one conversation: an optional system prompt and one or more turns.  Single-turn
workloads (random, shared-prefix, json, the long prompts of long-prompt-stall) have one turn per
session; multi-turn sessions resend their growing history (earlier questions and the server's real
answers) with every turn.  Rendering for the two API shapes:
- chat (openai-chat): messages [system?, user, assistant, ..., user];
- text (radixlm-native, openai-completions): "SYSTEM\n\nUser: ...\nAssistant: ...\nUser: ...\nAssistant:",
  or the bare user text for raw sessions (random, long-prompt-stall).

Prompt lengths are counted with the model's tokenizer when one is available (TokenCounter(tokenizer)),
else estimated (about one token per common English word plus punctuation).
"""

import math
import random
from dataclasses import dataclass, field
from typing import Optional

WORKLOADS = ("random", "shared-prefix", "multi-turn", "json", "long-prompt-stall")

_WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be "
    "or has had but not they one their all there been its also who more first new after two other "
    "time some into only would over most such can when these than about may many then them during "
    "year years city world state people work made between under because while three could where "
    "water small large early later known found public family house music film water river school "
    "system number group part life line place power court league island church party album song "
    "north south east west king queen station road bridge market field garden forest mountain "
    "light sound color story history science report record season team player game series "
    "model engine signal value table paper letter window summer winter morning evening travel "
    "simple careful quick quiet bright strong gentle open clear green blue yellow silver golden "
    "ancient modern local central national private general special common human natural final "
    "build write read carry follow answer explain describe compare measure count change remember "
    "question problem reason method result example detail moment memory energy balance pattern"
).split()

_ASSISTANT_INTRO = (
    "You are a helpful, careful assistant for a public library. Answer the user's question in one or "
    "two short sentences, using the reference notes below when they help. Reference notes:"
)

# json workload: a few schemas, rotated over the requests
JSON_SCHEMAS = [
    ("person", {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
        "hobbies": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "age", "city"]}),
    ("product", {"type": "object", "properties": {
        "title": {"type": "string"}, "price": {"type": "number"}, "in_stock": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["title", "price", "in_stock"]}),
    ("event", {"type": "object", "properties": {
        "event": {"type": "string"}, "year": {"type": "integer"},
        "place": {"type": "string"}, "summary": {"type": "string"}},
        "required": ["event", "year", "place"]}),
]


class TokenCounter:
    """Counts tokens with a HF tokenizer, or estimates them without one."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer

    @property
    def exact(self) -> bool:
        return self.tokenizer is not None

    def count(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text, add_special_tokens=False))
        return max(1, round(len(text.split()) * 1.05))

    def text(self, rng: random.Random, n_tokens: int, lead: str = "") -> str:
        """Text of about n_tokens tokens (exactly, give or take a merge at the seam, with a tokenizer):
        `lead` followed by random sentences of common words."""
        n_tokens = max(1, int(n_tokens))
        words, budget = [], n_tokens + 8
        while len(words) < budget * 1.3 + 8:
            k = rng.randint(6, 14)
            chunk = [rng.choice(_WORDS) for _ in range(k)]
            chunk[0] = chunk[0].capitalize()
            chunk[-1] += "."
            words.extend(chunk)
        body = (lead + " " if lead else "") + " ".join(words)
        if self.tokenizer is not None:
            ids = self.tokenizer.encode(body, add_special_tokens=False)[:n_tokens]
            return self.tokenizer.decode(ids)
        return " ".join(body.split()[:max(1, round(n_tokens / 1.05))])


@dataclass
class Turn:
    user: str
    output_len: int
    json_schema: Optional[dict] = None
    schema_name: Optional[str] = None


@dataclass
class Session:
    sid: int
    turns: list
    system: Optional[str] = None
    raw: bool = False                 # text backends send the user text bare, with no "User:" frame
    role: str = "main"                # long-prompt-stall: "victim" or "long"
    history: list = field(default_factory=list)   # (user, assistant) pairs filled while running

    def reset(self) -> None:
        self.history = []


def render_text(session: Session, turn: Turn) -> str:
    if session.raw and not session.history and session.system is None:
        return turn.user
    parts = [session.system + "\n\n"] if session.system else []
    for user, assistant in session.history:
        parts.append(f"User: {user}\nAssistant: {assistant}\n")
    parts.append(f"User: {turn.user}\nAssistant:")
    return "".join(parts)


def render_messages(session: Session, turn: Turn) -> list:
    msgs = [{"role": "system", "content": session.system}] if session.system else []
    for user, assistant in session.history:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    msgs.append({"role": "user", "content": turn.user})
    return msgs


def _lengths(rng, n, mean, range_ratio):
    lo = max(1, int(mean * range_ratio))
    return [rng.randint(lo, max(lo, int(mean))) for _ in range(n)]


def build_random(tc, rng, n, input_len, output_len, range_ratio):
    ins, outs = _lengths(rng, n, input_len, range_ratio), _lengths(rng, n, output_len, range_ratio)
    return [Session(i, [Turn(tc.text(rng, ins[i], lead=f"Request {i}:"), outs[i])], raw=True)
            for i in range(n)]


def build_shared_prefix(tc, rng, n, system_len, question_len, output_len, num_prefixes=1):
    systems = []
    for p in range(num_prefixes):
        intro = _ASSISTANT_INTRO + (f" (collection {p})" if num_prefixes > 1 else "")
        systems.append(tc.text(rng, system_len, lead=intro))
    sessions = []
    for i in range(n):
        q = tc.text(rng, question_len, lead=f"Question {i}: what does the text say about")
        sessions.append(Session(i, [Turn(q.rstrip(".") + "?", output_len)], system=systems[i % num_prefixes]))
    return sessions


def build_multi_turn(tc, rng, n_requests, turns, input_len, output_len, system_len=0):
    n_conv = max(1, math.ceil(n_requests / turns))
    sessions, left = [], n_requests
    for c in range(n_conv):
        k = min(turns, left)
        left -= k
        system = tc.text(rng, system_len, lead=f"Conversation {c}.") if system_len else None
        ts = [Turn(tc.text(rng, input_len, lead=f"Turn {t} of conversation {c}:"), output_len)
              for t in range(k)]
        sessions.append(Session(c, ts, system=system))
    return sessions


def build_json(tc, rng, n, output_len):
    sessions = []
    for i in range(n):
        name, schema = JSON_SCHEMAS[i % len(JSON_SCHEMAS)]
        hint = tc.text(rng, 12)
        user = (f"Invent a {name} (number {i}) and describe it as one JSON object with the fields "
                f"{', '.join(schema['properties'])}. Theme: {hint}")
        sessions.append(Session(i, [Turn(user, output_len, json_schema=schema, schema_name=name)]))
    return sessions


def build_stall(tc, rng, victim_output_len, num_long, long_len):
    victim = Session(0, [Turn(tc.text(rng, 48, lead="Write a very long story about a lighthouse."),
                              victim_output_len)], raw=True, role="victim")
    longs = [Session(1 + j, [Turn(tc.text(rng, long_len, lead=f"Document {j}:"), 1)], raw=True, role="long")
             for j in range(num_long)]
    return victim, longs


def json_valid(text: str, schema: Optional[dict]) -> bool:
    """The output parses as a JSON object holding the schema's required keys."""
    import json
    try:
        obj = json.loads(text)
    except (ValueError, TypeError):
        return False
    if not isinstance(obj, dict):
        return False
    return all(k in obj for k in (schema or {}).get("required", []))
