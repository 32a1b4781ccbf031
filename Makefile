# Two commands matter: `make demo` and `make test`. Both create the virtualenv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	rm -rf out/demo-run
	$(VENV)/bin/secureml run pipelines/secure_finetune.py --profile examples/profiles/team-a-dev.yaml \
		--local --dev-identity --simulate-gpu --output-dir out/demo-run
	$(VENV)/bin/secureml profile render profiles/team-a.yaml -o out/deploy

# The GPU quota shim, rebuilt whenever its C sources change (pip install builds it too).
SHIM_LIB := enforcement/libsecureml_shim.so
$(SHIM_LIB): $(wildcard enforcement/shim/*.c enforcement/shim/*.h) enforcement/shim.py
	$(PY) -m secureml.enforcement.shim build || echo "WARNING: quota shim not built (no C compiler?)"

test: $(STAMP) $(SHIM_LIB)
	$(PY) -m pytest -n 2

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info out deploy
