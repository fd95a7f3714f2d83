"""`radixlm serve`: help shows every ServerArgs option with its meaning and default; options with a
fixed set of values are checked at parse time; the automatic KV budget works with any page size;
bench results record lscpu. Oracles: the dataclass's own fields and comments, the components' lists."""

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from radixlm.runtime.cli import build_parser
from radixlm.runtime.scheduler.kv_manager import KVManager
from radixlm.runtime.server_args import CHOICES, ServerArgs, field_help

ROOT = Path(__file__).resolve().parents[2]


def _help() -> str:
    # whitespace dropped: argparse wraps lines, also at hyphens
    return "".join(build_parser()._subparsers._group_actions[0].choices["serve"].format_help().split())


def test_help_shows_every_option_with_meaning_and_default():
    text, meaning = _help(), field_help()
    for f in fields(ServerArgs):
        assert f.name in meaning, f"ServerArgs.{f.name} has no comment saying what it means"
        flag = "--" + f.name.replace("_", "-")
        assert flag in text
        default = "off" if f.type in (bool, "bool") else ("unset" if f.default is None else f.default)
        assert "".join(f"{meaning[f.name]} (default: {default})".split()) in text


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_enum_options_are_checked_at_parse_time(name, capsys):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", flag, "no-such-value"])
    err = capsys.readouterr().err
    assert "invalid choice" in err and all(repr(c) in err for c in CHOICES[name])
    ns = build_parser().parse_args(["serve", flag, CHOICES[name][-1]])
    assert getattr(ns, name) == CHOICES[name][-1]
    with pytest.raises(ValueError, match=name):
        ServerArgs(**{name: "no-such-value"})


def test_choices_match_the_components_lists():
    from radixlm.kernels.dispatch import BACKENDS
    from radixlm.runtime.openai.tool_calls import FORMATS
    from radixlm.runtime.runner.model_runner import resolve_dtype
    from radixlm.runtime.scheduler.policy import POLICIES

    assert CHOICES["attention_backend"] == BACKENDS and CHOICES["schedule_policy"] == POLICIES
    assert set(CHOICES["tool_call_parser"]) == set(FORMATS)
    from radixlm.runtime.openai.reasoning import FORMATS as REASONING
    assert set(CHOICES["reasoning_parser"]) == set(REASONING)
    for dtype in CHOICES["dtype"]:
        resolve_dtype(dtype, "cpu")  # every listed dtype is understood


@pytest.mark.parametrize("num_slots,page_size", [(6054, 16), (6054, 1), (100, 7), (256, 256)])
def test_kv_budget_of_any_size_with_pages(num_slots, page_size):
    kv = KVManager(num_slots, 4, page_size)
    assert kv.allocator.total == num_slots // page_size * page_size
    assert kv.allocator.available() == kv.allocator.total


def test_bench_results_record_lscpu(tmp_path):
    out = tmp_path / "r.json"
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import _common; _common.write_json({str(out)!r}, {{'x': 1}})"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
    result = json.loads(out.read_text())
    assert result["x"] == 1
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    assert result["lscpu"]["model_name"] == model
    cpuinfo_flags = set(next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split())
    assert set(result["lscpu"]["flags"]) == cpuinfo_flags


def test_page_size_16_with_an_odd_automatic_budget_serves():
    from scheduler_harness import FakeRunner, collect, make_scheduler, oracle_generate, run_until_idle, submit

    sched = make_scheduler(FakeRunner(num_slots=6054), page_size=16)  # 6054 = the reported budget
    prompts = {f"r{i}": [3 + i, 4, 5, 6] * (5 + i) for i in range(4)}
    for rid, prompt in prompts.items():
        submit(sched, rid, prompt, max_new_tokens=12)
    run_until_idle(sched)  # check_ledger proves every slot after each step
    got = collect(sched)
    assert {rid: got[rid]["tokens"] for rid in prompts} == {rid: oracle_generate(p, 12) for rid, p in prompts.items()}


@pytest.mark.parametrize("argv,kwargs,message", [
    (["--dp-size", "0"], {"dp_size": 0}, "dp_size must be at least 1"),
    (["--dp-size", "-2"], {"dp_size": -2}, "dp_size must be at least 1"),
    (["--dp-size", "2", "--dp-balance-abs-threshold", "-1"], {"dp_size": 2, "dp_balance_abs_threshold": -1},
     "dp_balance_abs_threshold"),
])
def test_bad_dp_options_fail_at_start_with_a_clear_message(argv, kwargs, message, capsys):
    from radixlm.runtime.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", *argv])                  # refused while parsing: nothing is started
    assert exc.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(ValueError) as err:
        ServerArgs.from_kwargs(**kwargs)
    assert message in str(err.value)


def test_dp_replicas_split_the_cores_unless_num_threads_is_given():
    import os

    from radixlm.runtime.server.launch import scheduler_parts

    cores = os.cpu_count() or 1
    assert scheduler_parts(ServerArgs())["num_threads"] is None           # one replica: all cores
    assert scheduler_parts(ServerArgs(dp_size=2))["num_threads"] == max(1, cores // 2)
    assert scheduler_parts(ServerArgs(dp_size=2, num_threads=3))["num_threads"] == 3   # per replica


def test_chat_template_option_reads_a_file(tmp_path):
    from radixlm.runtime.openai.prompts import load_chat_template

    path = tmp_path / "t.jinja"
    path.write_text("{{ messages[0].content }}")
    assert load_chat_template(str(ServerArgs(chat_template=str(path)).chat_template)) == path.read_text()
    with pytest.raises(ValueError, match="is not a file"):
        ServerArgs(chat_template=str(tmp_path / "missing.jinja"))
