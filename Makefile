# rlvr-envs: `make demo` runs the main job on embedded defaults; `make test` installs and runs every test.
VENV ?= .venv
PY := $(VENV)/bin/python
export TMPDIR ?= /tmp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE := disabled

.PHONY: setup host demo test test-fast lint bench learn learn-lm verifiers-matrix hub-install

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install.sh scripts/prime_tools.sh
	bash scripts/install.sh $(VENV)
	touch $@

host:  ## system services the sandbox tests need (bubblewrap, dockerd); idempotent; installs and starts them as root, checks them otherwise
	@if [ -x scripts/ci_host_setup.sh ]; then RLVR_PYTHON=$(PY) bash scripts/ci_host_setup.sh; fi

demo: setup
	$(PY) -m environments.atropos_runtime.demo $(ARGS)

test: setup host
	$(PY) -m ruff check .
	$(PY) -m pytest -q -ra

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

verifiers-matrix: setup  ## prime-install every hub env into venvs for verifiers 0.1.9.post2/0.3.1/0.4.0 and vf-eval them (part of `test`)
	$(PY) -m pytest -q -s tests/packaging/test_verifiers_matrix.py

lint: setup
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

learn: setup  ## the RLEF ablation through the real stack (serve, run-api, sandbox, a GRPO trainer); ARGS=--quick for one seed
	$(PY) benchmarks/rlef_learn.py $(ARGS)

learn-lm: setup  ## a real LM (SmolLM2-135M) learns one-digit sums by GRPO through serve + run-api; 2 seeds + a shuffled control, ~45 min; ARGS=--quick
	$(PY) benchmarks/lm_learn.py $(ARGS)

bench: setup
	@for b in benchmarks/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

hub-install:  ## ENV=math [VENV=path]: prime-install one environment's hub package into VENV and check it imports
	bash scripts/install_env.sh $(or $(ENV),$(error ENV=math|math-python|code|code-repair|judge|qa is required)) $(VENV)
