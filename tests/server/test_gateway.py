"""radixlm behind the SGLang model gateway: `smg launch` (smg 1.13.0, and sglang-router 0.3.2, its
earlier name) in front of two radixlm servers on the tiny model, with --policy cache_aware and with
round_robin (the gateway restarted for each, the workers kept; the first worker is the shared
`server`).  Oracles: the same greedy request sent straight to that worker (native /generate single,
batch of texts and of input_ids, SSE stream; OpenAI chat, streamed and not; /v1/completions); the
gateway's own worker list and load readings (registration, /health and load polling succeed);
radixlm's cached_tokens on a 2-prefix-group workload.  The gateways come from PyPI into venvs of
their own (`make tools`: .venv/tools/<name>, or the command on PATH); when one is missing its tests
skip, say so, and start no server."""

import json
import pathlib
import shutil
import subprocess
import time
import uuid

import pytest
import requests
from server_harness import API_KEY, MAX_TOTAL_TOKENS, ServerProcess, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
# name -> (PyPI requirement, command on PATH, what `<command> --version` prints)
GATEWAYS = {"smg": ("smg==1.13.0", "smg", "smg 1.13.0"),
            "sglang-router": ("sglang-router==0.3.2", "sglang-router", "sgl-model-gateway 0.3.2")}
POLICIES = ("cache_aware", "round_robin")
READY_TIMEOUT_S = 120
GREEDY = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def gateway_command(name: str):
    """The gateway's command: .venv/tools/<name>/bin/smg, else <name> on PATH, if it is that version."""
    pkg, on_path, version = GATEWAYS[name]
    for cand in (ROOT / ".venv" / "tools" / name / "bin" / "smg", shutil.which(on_path)):
        if cand and pathlib.Path(cand).is_file():
            out = subprocess.run([str(cand), "--version"], capture_output=True, text=True, timeout=60)
            if out.stdout.strip() == version:
                return str(cand)
    return None


class Gateway:
    """`<gateway> launch` on a free port in front of the workers; its log in log_dir."""

    def __init__(self, command, name, policy, workers, log_dir):
        self.name, self.policy, self.workers = name, policy, workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = pathlib.Path(log_dir) / f"{name}-{policy}-{self.port}.log"
        cmd = [command, "launch", "--host", "127.0.0.1", "--port", str(self.port), "--policy", policy,
               "--worker-urls", *[w.url for w in workers], "--api-key", API_KEY,
               "--prometheus-port", str(free_port()), "--health-check-interval-secs", "1",
               "--worker-startup-check-interval", "1", "--shutdown-grace-period-secs", "1",
               "--disable-retries", "--log-level", "debug"]
        if name == "smg":
            cmd += ["--load-monitor-interval", "1", "--worker-warmup-secs", "0"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self.model = workers[0].get("/v1/models").json()["data"][0]["id"]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path, **kw):
        return requests.get(self.url + path, headers=AUTH, timeout=kw.pop("timeout", 60), **kw)

    def post(self, path, json=None, **kw):
        return requests.post(self.url + path, json=json, headers=AUTH, timeout=kw.pop("timeout", 120), **kw)

    def workers_listed(self) -> list:
        r = self.get("/workers", timeout=5)
        return r.json().get("workers", []) if r.status_code == 200 else []

    def wait_ready(self) -> "Gateway":
        """Until both workers are registered and healthy in the gateway's own list."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        want = {w.url for w in self.workers}
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited with {self.proc.returncode}:\n{self.log()[-4000:]}"
            try:
                listed = self.workers_listed()
                if {w["url"] for w in listed if w.get("is_healthy")} >= want:
                    return self
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"{self.name} did not register {want} in {READY_TIMEOUT_S} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# ---- fixtures ----

@pytest.fixture(scope="module")
def second_worker(tiny_llama, tmp_path_factory):
    srv = ServerProcess(tiny_llama, tmp_path_factory.mktemp("gateway-logs"), "--check-ledger").wait_ready()
    yield srv
    crashed = srv.proc.poll()
    code = srv.stop()
    assert crashed is None and code == 0, srv.log()[-4000:]


@pytest.fixture(scope="module", params=[(g, p) for g in GATEWAYS for p in POLICIES],
                ids=lambda gp: f"{gp[0]}-{gp[1]}")
def gateway(request, tmp_path_factory):
    name, policy = request.param
    command = gateway_command(name)
    if command is None:               # before the workers are asked for: a skip starts no server
        pytest.skip(f"{GATEWAYS[name][0]} not found in .venv/tools/{name} nor as `{GATEWAYS[name][1]}` on PATH: "
                    f"run `make tools`")
    workers = [request.getfixturevalue("server"), request.getfixturevalue("second_worker")]
    gw = Gateway(command, name, policy, workers, tmp_path_factory.mktemp(f"{name}-{policy}"))
    gw.wait_ready()
    yield gw
    alive = gw.proc.poll() is None
    gw.stop()
    assert alive, f"{name} died during the tests:\n{gw.log()[-4000:]}"


def _ok(r) -> dict:
    assert r.status_code == 200, f"{r.status_code}: {r.text[:2000]}"
    return r.json()


def _sse(r) -> list:
    """The JSON payloads of an SSE answer, [DONE] checked and dropped."""
    assert r.status_code == 200, f"{r.status_code}: {r.text[:2000]}"
    assert r.headers["content-type"].startswith("text/event-stream"), r.headers
    # SSE is UTF-8 by definition; sglang-router's content type names no charset (requests would read latin-1)
    lines = [ln for ln in (b.decode("utf-8") for b in r.iter_lines()) if ln and not ln.startswith(":")]
    assert lines and lines[-1] == "data: [DONE]", lines[-3:]
    assert all(ln.startswith("data: ") for ln in lines), lines
    return [json.loads(ln[6:]) for ln in lines[:-1]]


def _native(out) -> list:
    """What greedy decoding decides, of one /generate result or a batch of them."""
    outs = out if isinstance(out, list) else [out]
    return [(o["text"], o["output_ids"], o["meta_info"]["finish_reason"]) for o in outs]


# ---- what the gateways read on a worker ----

def test_worker_routes_the_gateways_read(server):
    """smg identifies the engine by /v1/models owned_by (else /version means vLLM) and polls
    /v1/loads?include=core,disagg,queues,memory; sglang-router polls /get_load."""
    assert server.get("/v1/models").json()["data"][0]["owned_by"] == "sglang"
    body = server.get("/v1/loads", params={"include": "core,disagg,queues,memory"}).json()
    (load,) = body["loads"]
    assert load["max_total_num_tokens"] == MAX_TOTAL_TOKENS and load["num_total_tokens"] >= 0
    bad = server.get("/v1/loads", params={"include": "core,bogus"})
    assert bad.status_code == 400 and "bogus" in bad.json()["error"]["message"]


def test_workers_registered_healthy_and_load_polled(gateway):
    time.sleep(2)                     # two health-check (and smg load-monitor) intervals of 1 s
    listed = {w["url"]: w for w in gateway.workers_listed()}
    assert set(listed) == {w.url for w in gateway.workers}, listed
    assert all(w["is_healthy"] for w in listed.values()), listed
    loads = _ok(gateway.get("/get_loads"))
    if gateway.name == "smg":
        assert {w["runtime_type"] for w in listed.values()} == {"sglang"}, listed
        # the load monitor's last reading of each worker's /v1/loads
        assert all(w["engine_load"]["loads"][0]["max_total_num_tokens"] == MAX_TOTAL_TOKENS
                   for w in listed.values()), listed
        per_worker = {x["worker"]: x["max_total_num_tokens"] for x in loads["loads"]}
        assert per_worker == {w.url: MAX_TOTAL_TOKENS for w in gateway.workers}, loads
    else:                             # sglang-router: /get_load of each worker, -1 when it failed
        per_worker = {x["worker"]: x["load"] for x in loads["workers"]}
        assert set(per_worker) == {w.url for w in gateway.workers} and min(per_worker.values()) >= 0, loads


# ---- native /generate ----

def test_native_generate_single_and_batch_match_direct(gateway):
    server = gateway.workers[0]
    bodies = [{"text": "The quick brown fox", "sampling_params": GREEDY},
              {"input_ids": [[5, 6, 7, 8, 9], [40, 41, 42]], "sampling_params": GREEDY}]
    for body in bodies:
        want = _native(_ok(server.post("/generate", json=body)))
        got = _native(_ok(gateway.post("/generate", json=body)))
        assert got == want, body
        assert all(len(ids) == GREEDY["max_new_tokens"] for _, ids, _ in got)


def test_native_batch_of_texts_matches_direct(gateway):
    server = gateway.workers[0]
    body = {"text": ["Hello, world!", "def add(a, b):"], "sampling_params": GREEDY}
    r = gateway.post("/generate", json=body)
    if r.status_code == 422 and "expected a string" in r.text:
        pytest.xfail(f"{gateway.name} --policy {gateway.policy} reads /generate's text as one string and refuses "
                     f"a list itself (the body never reaches a worker): {r.text[:200]}")
    assert _native(_ok(r)) == _native(_ok(server.post("/generate", json=body)))


def test_native_stream_matches_direct(gateway):
    server = gateway.workers[0]
    body = {"text": "Hello, world! How are", "sampling_params": GREEDY, "stream": True}
    want = _sse(server.post("/generate", json=body, stream=True))
    got = _sse(gateway.post("/generate", json=body, stream=True))
    assert _native(got[-1]) == _native(want[-1])
    assert len(got[-1]["output_ids"]) == GREEDY["max_new_tokens"]


# ---- OpenAI ----

def test_openai_chat_matches_direct(gateway):
    server, model = gateway.workers[0], gateway.model
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
            "temperature": 0, "ignore_eos": True}
    want = _ok(server.post("/v1/chat/completions", json=body))
    got = _ok(gateway.post("/v1/chat/completions", json=body))
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
    assert got["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"] == "length"
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"] == 8

    stream = {**body, "stream": True}
    chunks = _sse(gateway.post("/v1/chat/completions", json=stream, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == want["choices"][0]["message"]["content"]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] \
        == ["length"]


def test_openai_completions_match_direct(gateway):
    server, model = gateway.workers[0], gateway.model
    body = {"model": model, "prompt": "The quick brown", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    want, got = _ok(server.post("/v1/completions", json=body)), _ok(gateway.post("/v1/completions", json=body))
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"] == 8


# ---- shared prefixes ----

def _hit(meta: dict) -> bool:
    """Most of the prompt came from the cache (the shared prefix is ~50 tokens, each question ~4)."""
    return 2 * meta["cached_tokens"] > meta["prompt_tokens"]


def test_prefix_groups_hit_the_cache(gateway, record_property):
    """Two prefix groups (a fresh nonce each, so no earlier test cached them), three requests each, one
    group after the other.  Oracle, for any routing: a group's first request misses, and each later one
    hits exactly when an earlier request of its group reached the same worker, so the group's hits are
    3 - (how many workers hold its prefix), which a direct probe of each worker tells afterwards.
    cache_aware must send each group's later requests to the worker that holds its prefix (one holder,
    two hits); round_robin alternates, so both workers hold each group's prefix and one later request hits."""
    nonce = uuid.uuid4().hex[:8]
    groups = [f"{nonce} {topic} " + "The quick brown fox jumps over the lazy dog. " * 4
              for topic in ("alpha", "omega")]
    metas = [[_ok(gateway.post("/generate", json={"text": prefix + f"question {i}?",
                                                  "sampling_params": {**GREEDY, "max_new_tokens": 2}}))["meta_info"]
              for i in range(3)] for prefix in groups]
    later = [m for group in metas for m in group[1:]]
    hit_rate = sum(m["cached_tokens"] for m in later) / sum(m["prompt_tokens"] for m in later)
    record_property("hit_rate_of_later_requests", round(hit_rate, 3))
    print(f"\n{gateway.name} {gateway.policy}: cached/prompt tokens of each group's later requests "
          f"{[[(m['cached_tokens'], m['prompt_tokens']) for m in g[1:]] for g in metas]}, hit rate {hit_rate:.2f}")
    for prefix, group in zip(groups, metas):
        # a probe inserts into the worker it asks only, so probing one worker leaves the other's answer alone
        holders = [w.url for w in gateway.workers
                   if _hit(_ok(w.post("/generate", json={"text": prefix + "probe?", "sampling_params":
                                                        {**GREEDY, "max_new_tokens": 1}}))["meta_info"])]
        assert not _hit(group[0]), group
        assert sum(_hit(m) for m in group[1:]) == 3 - len(holders), (holders, group)
        assert len(holders) == (1 if gateway.policy == "cache_aware" else 2), (holders, group)
