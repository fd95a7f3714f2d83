"""`Engine(tp_size=2)`: greedy tokens equal a single-process Engine (the oracle) on a batch, a prefix-cache hit,
n-gram speculative decoding (drafts verified in one pass: several sampled rows per request) and a JSON-schema
request, and logprobs equal within float32 noise; configurations tp cannot serve are refused at start, by the
Engine and by `radixlm serve`, with a message naming the flag."""

import pytest

from radixlm.runtime.engine import Engine
from radixlm.runtime.server_args import ServerArgs

PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick brown fox", "Hello, world! How are",
           '{"name": "Alice", "age"', "0123456789 0123456789 01234"]
GREEDY = {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True}
SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'


def _generate_all(path, tp_size) -> tuple:
    with Engine(model=str(path), dtype="float32", tp_size=tp_size, max_total_tokens=1024, check_ledger=True,
                num_threads=1, speculative_algorithm="ngram", log_level="warning") as engine:
        outs = engine.generate(PROMPTS, GREEDY)
        batch = [o["output_ids"] for o in outs]
        hit = engine.generate(PROMPTS[0] + " jumps over", GREEDY, return_logprob=True)
        json_text = engine.generate(PROMPTS[2], {**GREEDY, "json_schema": SCHEMA, "max_new_tokens": 16})["text"]
        logprobs = [lp for lp, _, _ in hit["meta_info"]["output_token_logprobs"]]
        verified = sum(o["meta_info"]["spec_verify_ct"] for o in outs)
        return (batch, hit["output_ids"], json_text), logprobs, (hit["meta_info"]["cached_tokens"], verified)


def test_tp2_greedy_tokens_equal_a_single_process(tiny_model):
    path = tiny_model("llama")
    (single, single_lp, _), (tp2, tp2_lp, (cached, verified)) = _generate_all(path, 1), _generate_all(path, 2)
    assert cached > 0, "the second request should reuse the first prompt's cached prefix"
    assert verified > 0, "some step should have verified a draft"
    assert tp2 == single
    assert tp2_lp == pytest.approx(single_lp, abs=1e-4)


def test_heads_that_tp_size_does_not_divide_are_refused_by_the_engine_and_the_cli(tiny_model, capsys):
    from radixlm.runtime.cli import main

    path = str(tiny_model("mistral"))   # 4 query heads, 1 KV head
    with pytest.raises(ValueError) as err:
        Engine(model=path, tp_size=2)
    assert "--tp-size 2 must divide" in str(err.value) and "KV heads (1)" in str(err.value)
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", path, "--tp-size", "2"])
    assert exc.value.code == 2 and "KV heads (1)" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--tp-size", "0"], "tp_size must be at least 1"),
    (["--tp-size", "2", "--dp-size", "2"], "does not work with --dp-size > 1"),
    (["--tp-size", "2", "--deterministic"], "does not work with --deterministic"),
    (["--tp-size", "2", "--kv-disk-dir", "/tmp/x"], "does not work with --kv-disk-dir"),
    (["--tp-size", "2", "--nnodes", "2"], "needs --dist-init-addr"),
    (["--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"], "node_rank in 0..nnodes-1"),
    (["--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "h:1"], "must be a multiple of nnodes"),
    (["--tp-size", "2", "--dist-init-addr", "nohost"], "dist_init_addr must be host:port"),
])
def test_bad_tp_options_fail_at_parse_time(argv, message, capsys):
    from radixlm.runtime.cli import build_parser, main
    from radixlm.runtime.server_args import from_cli

    with pytest.raises(SystemExit) as exc:
        main(["serve", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError) as err:
        from_cli(build_parser().parse_args(["serve", *argv]))
    assert message in str(err.value)


def test_tp_ranks_split_the_cores_unless_num_threads_is_given():
    import os

    from radixlm.runtime.server.launch import scheduler_parts

    cores = os.cpu_count() or 1
    assert scheduler_parts(ServerArgs(tp_size=2))["num_threads"] == max(1, cores // 2)
    assert scheduler_parts(ServerArgs(tp_size=4, nnodes=2, dist_init_addr="h:1"))["num_threads"] == max(1, cores // 2)
    assert scheduler_parts(ServerArgs(tp_size=2, num_threads=3))["num_threads"] == 3
