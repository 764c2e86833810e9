# Two commands do all the set-up on a machine with Python 3.11+ and pip:
#   make demo   runs tether's main job (tether run on a sample task)
#   make test   runs lint, types and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench self-check clean browser sysdeps postgres

# llama.cpp built for the CPU it runs on (GGML_NATIVE) crashes in its batched kernels on some virtual
# machines, this one among them (a segfault on any prompt past one token): it is built for plain AVX2,
# from source every time (--no-cache-dir), so that no wheel built natively elsewhere is reused.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install -q --no-cache-dir --no-binary llama-cpp-python \
		'llama-cpp-python[server]>=0.3.7,<0.4'
	$(BIN)/python -m pip install -q -e '.[dev,docs,local,server,kb,a2a,mcp,otel,postgres,temporal]'
	touch $(STAMP)

# BFCL's official checker and data, the oracle of tests/eval. Its package pins heavy dependencies
# (torch, vllm, every provider's SDK) that the checker does not use: installed without them, never
# a dependency of tether itself.
BFCL := $(VENV)/.bfcl-eval
$(BFCL): $(STAMP)
	$(BIN)/python -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(BFCL)

# AgentDojo's suites, tasks and checks (tether eval agentdojo, tests/eval/test_agentdojo*.py). Its package pins
# langchain and more that the suites do not use: installed without them, then what its suites import (the
# provider SDKs among them: its task suites import its pipeline, which imports them). Never a dependency of tether.
AGENTDOJO := $(VENV)/.agentdojo
$(AGENTDOJO): $(STAMP)
	$(BIN)/python -m pip install -q --no-deps agentdojo==0.1.35
	$(BIN)/python -m pip install -q pydantic email-validator deepdiff docstring-parser pyyaml click rich tenacity \
		python-dotenv openai anthropic cohere google-genai
	touch $(AGENTDOJO)

# Offline, the embedded SmolLM2-135M answers; a run that does not complete fails make
# (tests/models/test_local.py runs this very command three times in a row).
demo: $(STAMP)
	$(BIN)/tether run "What is 248 times 15?" --tools calc

self-check: $(STAMP)
	$(BIN)/tether self-check

# The browser test drives Debian's Chromium with playwright-core from npm (no browser download).
E2E := tests/e2e/node_modules/playwright-core/package.json
$(E2E): tests/e2e/package.json tests/e2e/package-lock.json
	npm ci --prefix tests/e2e --no-audit --no-fund --loglevel=error

browser:
	@test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| { echo "install Debian's chromium (apt-get install chromium) for the browser test"; exit 1; }

# The power-loss test watches the store's fsyncs with strace; the PID-namespace lease test needs unshare.
sysdeps:
	@command -v strace >/dev/null || { apt-get update -qq && apt-get install -y -qq strace >/dev/null; } \
		|| { echo "install strace (apt-get install strace) for the power-loss test"; exit 1; }

# The store contract runs against a real PostgreSQL 15 too (tests/store/postgres_server.py starts one).
postgres:
	@test -x /usr/lib/postgresql/15/bin/initdb || { apt-get update -qq && apt-get install -y -qq postgresql-15 >/dev/null; } \
		|| { echo "install Debian's postgresql-15 (apt-get install postgresql-15) for the store contract tests"; exit 1; }

# The documentation site, built offline into site/; --strict turns every warning (a broken link, a page missing
# from the navigation, a reference to a name that does not exist) into a failure.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: $(STAMP) $(BFCL) $(AGENTDOJO) $(E2E) browser sysdeps postgres docs
	$(BIN)/ruff check src tests bench docs examples
	$(BIN)/ruff format --check src tests bench docs examples
	$(BIN)/mypy
	TETHER_REQUIRE_BROWSER=1 TETHER_REQUIRE_POSTGRES=1 $(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
