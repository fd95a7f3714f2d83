"""SGLang's benchmark client, `python -m sglang.bench_serving --backend sglang` (sglang 0.5.23), against the
shared server on a ShareGPT-format dataset file written here, streamed (its default): its warm-up and every
request must finish, its token counts be the tokenizer's, and its texts what the server answers directly
(greedy).  See bench_serving_cli.py for its one import that is answered without torchvision."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from server_harness import API_KEY

pytest.importorskip("sglang")
pytest.importorskip("datasets")

pytestmark = pytest.mark.timeout(600)

CLI = pathlib.Path(__file__).with_name("bench_serving_cli.py")
OUTPUT_LEN = 6
QUESTIONS = ["Tell me about the sea.", "What is a prime number?", "Name three colors of the rainbow.",
             "How do birds fly?", "Why is the sky blue?", "Write a line about autumn."]


def sharegpt_file(folder) -> pathlib.Path:
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": q},
                                             {"from": "gpt", "value": "An answer of several words."}]}
            for i, q in enumerate(QUESTIONS)]
    path = folder / "sharegpt.json"
    path.write_text(json.dumps(rows))
    return path


def run_bench(server, model, folder) -> dict:
    out = folder / "result.jsonl"
    cmd = [sys.executable, str(CLI), "--backend", "sglang", "--base-url", server.url, "--model", str(model),
           "--tokenizer", str(model), "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_file(folder)),
           "--num-prompts", str(len(QUESTIONS)), "--sharegpt-output-len", str(OUTPUT_LEN),
           "--output-file", str(out), "--output-details", "--disable-tqdm"]
    env = {**os.environ, "OPENAI_API_KEY": API_KEY, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 1, lines
    return json.loads(lines[0])


def greedy(server, prompt) -> str:
    r = server.post("/generate", json={"text": prompt, "sampling_params": {
        "temperature": 0, "max_new_tokens": OUTPUT_LEN, "ignore_eos": True}})
    assert r.status_code == 200, r.text
    return r.json()["text"]


def test_bench_serving_completes_every_request(server, tiny_llama, tokenizer, tmp_path):
    result = run_bench(server, tiny_llama, tmp_path)
    assert result["backend"] == "sglang" and result["completed"] == len(QUESTIONS)
    assert result["total_input_tokens"] == sum(len(tokenizer.encode(q)) for q in QUESTIONS)
    assert result["total_output_tokens"] == OUTPUT_LEN * len(QUESTIONS)
    assert result["output_lens"] == [OUTPUT_LEN] * len(QUESTIONS)
    assert not any(result["errors"]), result["errors"]
    assert result["server_info"] and result["server_info"]["model_path"] == str(tiny_llama)
    # bench_serving shuffles the rows; each text is what the server answers that prompt directly
    prompts = {q: greedy(server, q) for q in QUESTIONS}
    assert sorted(result["generated_texts"]) == sorted(prompts.values())
