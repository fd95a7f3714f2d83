"""The real `sglang` frontend (sglang 0.5.23 from PyPI) against a launched `radixlm serve`.

How it is imported without SGLang's GPU runtime: the Makefile installs `sglang==0.5.23 --no-deps`, and the
dev extras add the three packages its top-level `import sglang` still needs beyond ours (pybase64, pillow,
ipython).  `import sglang` then imports only CPU torch (ours) and never initializes a GPU; nothing of
`sglang.srt`'s server is started.

Every result is checked against the server answering the same prompt directly on POST /generate (greedy
decoding is deterministic), or against `re`, or against the sequential run of the same program.
"""

import re

import pytest
import requests

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(900)

STOP_PROBE_TOKENS = 12


@pytest.fixture(scope="module")
def sgl_server(long_tiny_server):
    return long_tiny_server, sgl.RuntimeEndpoint(long_tiny_server.url, api_key=long_tiny_server.api_key)


def direct(srv, text, **params) -> str:
    """The server's greedy continuation of text on POST /generate, the oracle for a frontend gen."""
    r = srv.post("/generate", json={"text": text, "sampling_params": {"temperature": 0, **params}})
    assert r.status_code == 200, r.text
    return r.json()["text"]


def prefix_before(state, var) -> str:
    text, value = state.text(), state[var]
    start = text.rindex(value)
    return text[:start]


@sgl.function
def roles_and_gen(s, topic, stop_at):
    s += sgl.system("You answer briefly.")
    s += sgl.user("Tell me about " + topic)
    s += sgl.assistant(sgl.gen("first", max_tokens=STOP_PROBE_TOKENS, temperature=0, stop=stop_at))
    with s.user():
        s += "Give a code."
    with s.assistant():
        s += "Code: " + sgl.gen("code", max_tokens=6, regex=r"[0-9]{2}-[a-c]", temperature=0)


def test_roles_gen_stop_and_regex(sgl_server):
    srv, ep = sgl_server
    free = roles_and_gen.run(topic="the fox", stop_at=None, backend=ep)
    full = free["first"]
    assert full == direct(srv, prefix_before(free, "first"), max_new_tokens=STOP_PROBE_TOKENS)
    assert len(full) >= 4, full
    stop = full[len(full) // 2:len(full) // 2 + 2]
    cut = roles_and_gen.run(topic="the fox", stop_at=stop, backend=ep)
    assert cut["first"] == full[:full.index(stop)]
    assert re.fullmatch(r"[0-9]{2}-[a-c]", cut["code"]), cut["code"]
    assert cut["code"] == direct(srv, prefix_before(cut, "code"), max_new_tokens=6, regex=r"[0-9]{2}-[a-c]")
    roles = [m["role"] for m in cut.messages()]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert cut.messages()[2]["content"] == cut["first"]
    assert cut.messages()[4]["content"] == "Code: " + cut["code"]


@sgl.function
def pick_one(s, choices):
    s += "Colors of the rainbow. I pick"
    s += sgl.select("pick", choices=choices)


def test_select_is_the_most_likely_single_token_choice(sgl_server, tokenizer_of_long):
    srv, ep = sgl_server
    choices = [" the", " a", " fox", " dog"]
    ctx = "Colors of the rainbow. I pick"
    ctx_ids = tokenizer_of_long.encode(ctx)
    fulls = [tokenizer_of_long.encode(ctx + c) for c in choices]
    assert all(f[:len(ctx_ids)] == ctx_ids and len(f) == len(ctx_ids) + 1 for f in fulls), \
        "the oracle needs single-token choices that do not merge with the context"
    r = srv.post("/generate", json={"input_ids": fulls, "sampling_params": {"max_new_tokens": 0},
                                    "return_logprob": True, "logprob_start_len": len(ctx_ids)})
    assert r.status_code == 200, r.text
    last = [out["meta_info"]["input_token_logprobs"][-1][0] for out in r.json()]
    state = pick_one.run(choices=choices, backend=ep)
    assert state["pick"] == choices[max(range(len(choices)), key=last.__getitem__)]
    assert state.text() == ctx + state["pick"]


@sgl.function
def fork_join(s):
    s += "A list of animals:"
    s += sgl.gen("head", max_tokens=4, temperature=0)
    forks = s.fork(3)
    for i, f in enumerate(forks):
        f += f"\nBranch {i}:"
        f += sgl.gen("b", max_tokens=5, temperature=0)
    forks.join()
    s += "\nDone:" + sgl.gen("tail", max_tokens=3, temperature=0)
    s["branches"] = [f["b"] for f in forks]


def test_fork_join(sgl_server):
    srv, ep = sgl_server
    state = fork_join.run(backend=ep)
    head = "A list of animals:" + state["head"]
    for i, value in enumerate(state["branches"]):
        assert value == direct(srv, head + f"\nBranch {i}:", max_new_tokens=5)
    assert state.text() == head + "\nDone:" + state["tail"]
    assert state["tail"] == direct(srv, head + "\nDone:", max_new_tokens=3)


def test_run_batch_equals_sequential_runs(sgl_server):
    srv, ep = sgl_server
    topics = [{"topic": t, "stop_at": None} for t in ("the sea", "numbers", "a cat", "tea")]
    batch = roles_and_gen.run_batch(topics, backend=ep, num_threads=4)
    for kwargs, state in zip(topics, batch):
        alone = roles_and_gen.run(**kwargs, backend=ep)
        assert state.text() == alone.text()
        assert state["code"] == alone["code"]


def test_streaming_pieces_add_up_to_the_text(sgl_server):
    srv, ep = sgl_server
    whole = roles_and_gen.run(topic="rivers", stop_at=None, backend=ep)
    streamed = roles_and_gen.run(topic="rivers", stop_at=None, backend=ep, stream=True)
    pieces = list(streamed.text_iter())
    assert "".join(pieces) == whole.text()
    for _ in range(3):      # results that arrive while the reader is behind are merged: retry one merge
        again = roles_and_gen.run(topic="rivers", stop_at=None, backend=ep, stream=True)
        var_pieces = list(again.text_iter("first"))
        assert "".join(var_pieces) == whole["first"]
        if len(var_pieces) > 1:
            break
    assert len(var_pieces) > 1, var_pieces


def test_concate_and_append_is_not_served(sgl_server):
    """SGLang's own server has no /concate_and_append_request either (fork().join("concate_and_append")
    exists only in its frontend); radixlm answers 404 with the route named."""
    srv, _ = sgl_server
    r = requests.post(srv.url + "/concate_and_append_request", json={"src_rids": [], "dst_rid": "x"},
                      headers=srv.headers, timeout=30)
    assert r.status_code == 404 and "concate_and_append_request" in r.text


@sgl.function
def at_least(s):
    s += sgl.user("Say something.")
    s += sgl.assistant(sgl.gen("answer", min_tokens=20, max_tokens=24, temperature=0))


def test_gen_min_tokens(sgl_server):
    srv, ep = sgl_server
    state = at_least.run(backend=ep)
    assert state.get_meta_info("answer")["completion_tokens"] >= 20
    assert state["answer"] == direct(srv, prefix_before(state, "answer"), max_new_tokens=24, min_new_tokens=20)
