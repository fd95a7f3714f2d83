"""The frontend language against one in-process Engine on a tiny random llama (2048-token context).

Oracles: HF transformers on the same folder (select scores, greedy gen), the chat template rendered by the
tokenizer (roles), the engine's own prefill counter (fork computes the shared prefix once).
"""

import pytest
import torch

import radixlm as rl
from radixlm.frontend_lang.choice_scoring import choice_tokens


def hf_logprobs(model, ids: list, start: int) -> list:
    """log P(ids[p] | ids[:p]) for p in [start, len(ids)), from the model's logits."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]          # [S, V]
    logp = torch.log_softmax(logits.double(), dim=-1)
    return [logp[p - 1, ids[p]].item() for p in range(start, len(ids))]


def hf_greedy(model, ids: list, n: int) -> list:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return out[0, len(ids):].tolist()


# ---- gen, roles, variables ----

@rl.function
def qa(s, question):
    s += "Q: " + question + "\nA:"
    s += rl.gen("answer", max_tokens=8, temperature=0)


def test_gen_matches_hf_greedy(backend, hf_model):
    state = qa.run(question="hello world", backend=backend)
    tok = backend.tokenizer
    prompt = "Q: hello world\nA:"
    ref = hf_greedy(hf_model, tok.encode(prompt), 8)
    meta = state.get_meta_info("answer")
    assert meta["completion_tokens"] == len(ref) or meta["finish_reason"]["type"] == "stop"
    assert state["answer"] == tok.decode(ref[:meta["completion_tokens"]], skip_special_tokens=True)
    assert state.text() == prompt + state["answer"]


@rl.function
def chat(s, question):
    s += rl.system("You are terse.")
    with s.user():
        s += question
    s += rl.assistant(rl.gen("reply", max_tokens=4, temperature=0))


def test_roles_render_with_chat_template(backend):
    state = chat.run(question="Say hi", backend=backend)
    msgs = state.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"] == "You are terse." and msgs[1]["content"] == "Say hi"
    assert msgs[2]["content"] == state["reply"]
    expected = backend.tokenizer.apply_chat_template(msgs, tokenize=False)
    assert state.text() == expected


def test_gen_constraints_and_stop(backend):
    @rl.function
    def prog(s):
        s += "Number: "
        s += rl.gen("num", max_tokens=6, regex=r"[0-9]{3}", temperature=0)
        s += "\nText: "
        s += rl.gen("cut", max_tokens=16, temperature=0, stop=["\n", "o"])

    state = prog.run(backend=backend)
    assert len(state["num"]) == 3 and state["num"].isdigit()
    assert "\n" not in state["cut"] and "o" not in state["cut"]


# ---- select ----

SELECT_TABLE = [
    # context, choices: a prefix of another, leading spaces or not, a context ending mid-word
    ("The capital of France is", [" Paris", " Par", " Paris is big"]),
    ("The capital of France is ", ["Paris", "London", "Rome"]),
    ("The quick brown fox jumps over the la", ["zy dog.", "zy", "mp"]),
    ("Hello, wor", ["ld!", "ld", "k"]),
    ("def add(a, b):\n    return", [" a + b", "a + b", " a"]),
]


@pytest.mark.parametrize("method", ["token_length_normalized", "greedy_token",
                                    "unconditional_likelihood_normalized"])
@pytest.mark.parametrize("context,choices", SELECT_TABLE)
def test_select_scores_equal_model_logprobs(backend, hf_model, context, choices, method):
    @rl.function
    def prog(s):
        s += context
        s += rl.select("pick", choices=choices, choices_method=method)

    state = prog.run(backend=backend)
    meta = state.get_meta_info("pick")
    boundary, fulls = choice_tokens(backend.tokenizer, context, choices)
    tok = backend.tokenizer
    anchor = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    scores, refs = [], []
    for i, full in enumerate(fulls):
        ref = hf_logprobs(hf_model, full, boundary)
        refs.append(ref)
        assert meta["input_token_logprobs"][i] == pytest.approx(ref, abs=2e-4)
        if method == "token_length_normalized":
            scores.append(sum(ref) / len(ref))
        elif method == "greedy_token":
            scores.append(ref[0])
        else:
            unc = hf_logprobs(hf_model, [anchor] + full[boundary:], 1)
            scores.append(sum(c - u for c, u in zip(ref, unc)) / len(ref))
    assert meta["scores"] == pytest.approx(scores, abs=2e-4)
    if method == "greedy_token":  # lexicographic, 1e-4 ties, a strict prefix loses a tie
        best = 0
        for i in range(1, len(refs)):
            a, b = refs[i], refs[best]
            diff = next((x - y for x, y in zip(a, b) if abs(x - y) > 1e-4), len(a) - len(b))
            best = i if diff > 0 else best
    else:
        best = max(range(len(choices)), key=scores.__getitem__)
    assert state["pick"] == choices[best]
    assert state.text() == context + state["pick"]


def test_select_boundary_handles_merges(backend):
    tok = backend.tokenizer
    ctx = "The quick brown fox jumps over the la"
    boundary, fulls = choice_tokens(tok, ctx, ["zy dog."])
    ctx_ids = tok.encode(ctx)
    assert fulls[0][:boundary] == ctx_ids[:boundary]
    assert tok.decode(fulls[0]) == ctx + "zy dog."


def test_select_length_bias(backend, hf_model):
    """A short choice against a long one: the sum favours short text, the per-token mean does not."""
    context = "Hello, world! How are you today? I am fine, thank"
    short, long = " you.", " xq zv jk qp wz"
    outs = {}
    for method in ["token_length_normalized", "greedy_token"]:
        @rl.function
        def prog(s):
            s += context
            s += rl.select("pick", choices=[long, short], choices_method=method)
        outs[method] = prog.run(backend=backend)
    meta = outs["token_length_normalized"].get_meta_info("pick")
    # the normalized score is the mean, not the sum, and the winner is the argmax of the mean
    for lp, score, total in zip(meta["input_token_logprobs"], meta["scores"], meta["sum_logprobs"]):
        assert score == pytest.approx(total / len(lp))
    assert outs["token_length_normalized"]["pick"] == [long, short][max(range(2), key=meta["scores"].__getitem__)]


def test_select_tie_breaks_to_first(backend):
    @rl.function
    def prog(s):
        s += "Pick one:"
        s += rl.select("pick", choices=[" same", " same"])
    assert prog.run(backend=backend)["pick"] == " same"
    state = prog.run(backend=backend)
    assert state.get_meta_info("pick")["index"] == 0


# ---- fork, run_batch ----

@rl.function
def branches(s, context, width):  # not `n`: run(n=...) is a sampling argument, as in SGLang
    s += context
    forks = s.fork(width)
    for i, f in enumerate(forks):
        f += f" Option {i}:"
        f += rl.gen("ans", max_tokens=4, temperature=0)
    forks.join()


def test_fork_results_and_join(backend, hf_model):
    state = branches.run(context="The quick brown fox", width=3, backend=backend)
    answers = state["ans"]
    assert isinstance(answers, list) and len(answers) == 3
    tok = backend.tokenizer
    for i, a in enumerate(answers):
        ids = tok.encode(f"The quick brown fox Option {i}:")
        ref = hf_greedy(hf_model, ids, 4)
        assert tok.decode(ref, skip_special_tokens=True).startswith(a)


def test_fork4_computes_long_context_once(engine, backend):
    tok = backend.tokenizer
    base = "The quick brown fox jumps over the lazy dog. Hello, world! 0123456789 "
    context = base * 60
    while len(tok.encode(context)) < 1000:
        context += base
    n_ctx = len(tok.encode(context))
    engine.flush_cache()
    before = engine.get_server_info()["prefill_tokens"]
    state = branches.run(context=context, width=4, backend=backend)
    after = engine.get_server_info()["prefill_tokens"]
    branch_tokens = 4 * (len(tok.encode(" Option 0:")) + 4)
    assert len(state["ans"]) == 4
    assert after - before < n_ctx + branch_tokens + 40, (after - before, n_ctx)
    assert after - before >= n_ctx


def test_run_batch_matches_run(backend):
    questions = ["hello", "quick brown", "0123"]
    states = qa.run_batch([{"question": q} for q in questions], backend=backend, num_threads=3)
    singles = [qa.run(question=q, backend=backend)["answer"] for q in questions]
    assert [s["answer"] for s in states] == singles


def test_errors_surface_on_read(backend):
    @rl.function
    def bad(s):
        s += "x"
        s += rl.select("pick", choices=[""])
    with pytest.raises(ValueError):
        bad.run(backend=backend)


def test_default_backend_accepts_engine(engine):
    rl.set_default_backend(engine)
    try:
        assert qa.run(question="hi")["answer"] == qa.run(question="hi", backend=rl.EngineBackend(engine))["answer"]
    finally:
        rl.set_default_backend(None)
