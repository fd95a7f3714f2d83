"""The same programs on the in-process Engine and on RuntimeEndpoint against a real `radixlm serve`
started here: same greedy results, same select scores; the server's prefill counter proves select and
fork reuse the cached prefix over HTTP too."""

import pytest

import radixlm as rl


@rl.function
def everything(s, topic):
    s += rl.system("You answer briefly.")
    with s.user():
        s += "Tell me about " + topic
    with s.assistant():
        s += rl.gen("first", max_tokens=6, temperature=0)
    s += rl.user("Pick one.")
    with s.assistant():
        s += "I pick"
        s += rl.select("pick", choices=[" red", " green", " blue sky"])
        s += ". Code: "
        s += rl.gen("code", max_tokens=4, regex=r"[0-9]{2}", temperature=0)
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f"Branch {i}:"
        f += rl.gen("b", max_tokens=3, temperature=0)
    forks.join()


def test_same_greedy_results_on_engine_and_endpoint(backend, endpoint):
    srv, ep = endpoint
    kwargs = [{"topic": "the fox"}, {"topic": "numbers"}]
    local = everything.run_batch(kwargs, backend=backend, num_threads=2)
    remote = everything.run_batch(kwargs, backend=ep, num_threads=2)
    for a, b in zip(local, remote):
        assert a.error() is None and b.error() is None, (a.error(), b.error())
        assert a.text() == b.text()
        assert a.variables() == b.variables()
        assert a.messages() == b.messages()
        assert a.get_meta_info("pick")["scores"] == pytest.approx(b.get_meta_info("pick")["scores"], abs=1e-4)
        assert len(a["code"]) == 2 and a["code"].isdigit()
        assert len(a["b"]) == 2


def test_select_over_http_reuses_cached_context(endpoint):
    srv, ep = endpoint
    context = "The quick brown fox jumps over the lazy dog. " * 8
    n_ctx = len(ep.tokenizer.encode(context))

    @rl.function
    def prog(s):
        s += context
        s += rl.select("pick", choices=[" Hello", " world", " quick brown fox"])

    srv.post("/flush_cache")
    before = srv.wait_idle()["prefill_tokens"]
    prog.run(backend=ep)
    spent = srv.wait_idle()["prefill_tokens"] - before
    assert n_ctx <= spent < n_ctx + 3 * 8, (spent, n_ctx)
