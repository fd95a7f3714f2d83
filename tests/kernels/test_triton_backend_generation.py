"""--attention-backend triton (under the interpreter on CPU) generates the same greedy tokens as torch (Qwen2, and
gpt-oss: windowed and full layers with sinks, prompts past the window, 16-token chunks)."""

import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize("arch", ["qwen2", "gpt_oss"])   # gpt_oss: sinks and a window of 6 in Triton's kernels
def test_triton_backend_matches_torch_token_for_token(tiny_model, arch):
    path = str(tiny_model(arch))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..', 'runtime')!r})
        from radixlm.runtime.runner.model_runner import ModelRunner
        from scheduler_harness import collect, make_scheduler, run_until_idle, submit
        prompts = [[5, 17, 42, 99, 7], [5, 17, 42, 8], list(range(3, 40))]
        result = {{}}
        for backend in ("torch", "triton"):
            runner = ModelRunner({path!r}, dtype="float32", max_total_tokens=512, num_rows=8,
                                 attention_backend=backend)
            assert runner.model.attn_backend.name == backend
            sched = make_scheduler(runner, chunked_prefill_size=16)
            for i, p in enumerate(prompts):
                submit(sched, f"r{{i}}", p, 6, params={{"ignore_eos": True}})
            run_until_idle(sched)
            out = collect(sched)
            result[backend] = [out[f"r{{i}}"]["tokens"] for i in range(len(prompts))]
        print(json.dumps(result))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["torch"] == result["triton"]
    assert all(len(t) == 6 for t in result["torch"])


def test_triton_backend_refused_on_cpu_without_interpreter(tiny_model):
    if os.environ.get("TRITON_INTERPRET"):
        pytest.skip("the interpreter is on in this process")
    from radixlm.runtime.runner.model_runner import ModelRunner
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        ModelRunner(str(tiny_model("qwen2")), dtype="float32", max_total_tokens=64, num_rows=2,
                    attention_backend="triton")
