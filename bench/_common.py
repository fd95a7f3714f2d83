"""Small helpers shared by the CPU benchmarks: random prompts, a wall-clock phase timer, the
machine description that goes with every result, a table printer, a JSON writer, and config-only model folders
(random weights made at load, `load_format="dummy"`) with a real tokenizer."""

import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

MODEL = "smollm2-135m-instruct"


def random_prompts(num, min_len, max_len, vocab_size, seed, low=100):
    """num lists of random token ids, lengths uniform in [min_len, max_len]; ids avoid the first
    `low` ids, where the special tokens of the default model live."""
    rng = random.Random(seed)
    return [[rng.randrange(low, vocab_size) for _ in range(rng.randint(min_len, max_len))] for _ in range(num)]


@contextmanager
def phase(name, record=None):
    """Prints a line when a phase starts and ends; record["seconds"] gets its wall time."""
    print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
    start = time.perf_counter()
    yield
    seconds = time.perf_counter() - start
    if record is not None:
        record["seconds"] = seconds
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {seconds:.1f} s", flush=True)


def lscpu_info() -> dict:
    """`lscpu`'s model name and flags (the ISA a result was measured on); {} where lscpu is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return {"model_name": fields.get("Model name", "unknown"), "flags": fields.get("Flags", "").split()}


def machine_info() -> dict:
    """CPU model, the flags that decide the bf16 path, cores, load and versions."""
    info = {"python": sys.version.split()[0], "platform": platform.platform(), "cores": os.cpu_count()}
    info["lscpu"] = lscpu_info()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        info["cpu"] = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                            if line.startswith("model name")), "unknown")
        flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                          if line.startswith("flags")), []))
        info["bf16_flags"] = sorted(f for f in flags if f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f"))
    except OSError:
        pass
    try:  # the code measured: commit, "-dirty" when the working tree has changes
        info["git"] = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                     cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if hasattr(os, "getloadavg"):
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    try:
        import torch
        import transformers
        info["torch"], info["transformers"] = torch.__version__, transformers.__version__
    except ImportError:
        pass
    return info


def print_table(rows, columns):
    """rows: list of dicts; columns: list of (key, header, format)."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append([("" if row.get(key) is None else fmt.format(row[key])) for key, _, fmt in columns])
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for n, r in enumerate(cells):
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def write_json(path, payload) -> None:
    if not path:
        return
    if isinstance(payload, dict):  # every result names the CPU it was measured on
        payload = {**payload, "lscpu": lscpu_info()}
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    print(f"wrote {path}")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json", "vocab.json", "merges.txt")


def write_config_folder(config: dict, tokenizer_dir, out_dir) -> Path:
    """A config-only model folder: `config` with tokenizer_dir's vocabulary, special ids and tokenizer files."""
    src, out = Path(tokenizer_dir), Path(out_dir)
    base = json.loads((src / "config.json").read_text())
    keep = {k: base[k] for k in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id") if k in base}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({**config, **keep}, indent=2))
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return out
