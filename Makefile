# Two commands matter: `make demo` and `make test`. Both create the virtualenv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test bench clean harness cluster-up cluster-down

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q secureml  # an editable install writes no bytecode; start-up would compile
	touch $@

setup: $(STAMP)

# The GPU quota shim, rebuilt whenever its C sources change (pip install builds it too).
SHIM_LIB := enforcement/libsecureml_shim.so
$(SHIM_LIB): $(wildcard enforcement/shim/*.c enforcement/shim/*.h) enforcement/shim_control.py
	$(PY) -m secureml.enforcement.shim_control build || echo "WARNING: quota shim not built (no C compiler?)"

demo: $(STAMP) $(SHIM_LIB)
	@echo "== 1. the platform team's tenant profiles"
	$(VENV)/bin/secureml profile validate profiles/*.yaml examples/profiles/*.yaml
	@echo "== 2. compile the reference pipeline for team-a (images not signed yet: the dev profile)"
	@mkdir -p out
	$(VENV)/bin/secureml compile pipelines/secure_finetune.py --profile examples/profiles/team-a-dev.yaml \
		-o out/secure_finetune.yaml --report out/secure_finetune.report.json
	@echo "== 3. a careless pipeline: every violation at once (this step expects the refusal)"
	! $(VENV)/bin/secureml compile examples/rule_breaker.py --profile examples/profiles/team-a-dev.yaml -o out/rule_breaker.yaml
	@echo "== 4. the cluster objects that enforce team-a's rules at admission"
	$(VENV)/bin/secureml profile render profiles/team-a.yaml -o out/deploy
	@echo "== 5. run the pipeline locally under the launcher (dev identity, simulated GPU)"
	rm -rf out/demo-run
	$(VENV)/bin/secureml run pipelines/secure_finetune.py --profile examples/profiles/team-a-dev.yaml \
		--local --dev-identity --simulate-gpu --output-dir out/demo-run

# The test control plane (kube-apiserver + etcd) and SPIRE, compiled from the Go module proxy once per
# machine into ~/.cache/secureml/harness (a no-op when cached); see docs/testing.md.
harness:
	tests/harness/build.sh all >/dev/null

# A control plane left running for trying secureml by hand; it writes .cluster/kubeconfig.
cluster-up: $(STAMP) harness
	$(PY) -m tests.harness.controlplane up --dir .cluster

cluster-down:
	$(PY) -m tests.harness.controlplane down --dir .cluster

# The gates: ruff lint, ruff format (check only) and mypy (strict, pydantic plugin; settings in
# pyproject.toml). scripts/typecheck.py gives mypy components/ and enforcement/ under the names
# setup.py installs them with (secureml.components, secureml.enforcement).
# The C sources (the quota shim, its fakes, the fuzz target, the test programs) in clang-format's
# style (.clang-format; Debian's clang-format 14). Not part of `lint`: setup does not install
# clang-format (`apt-get install clang-format`); tests/shim/test_shim_format.py checks it where present.
C_SOURCES := $(wildcard enforcement/shim/*.[ch] enforcement/shim/fake/*.[ch] enforcement/shim/fuzz/*.c tests/shim/*.c)
.PHONY: fmt-c fmt-c-check
fmt-c:
	clang-format -i $(C_SOURCES)
fmt-c-check:
	clang-format --dry-run --Werror $(C_SOURCES)

.PHONY: lint
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py

test: $(STAMP) $(SHIM_LIB) harness
	$(PY) -m pytest -n 2 -m "not timing" -rs  # -rs: every skip says why
	sync  # flush the parallel run's writes first: writeback stalls would show up as GPU idle time
	$(PY) -m pytest -m timing

bench: $(STAMP)
	@$(PY) -m compileall -q secureml  # as installed: the CLI's start-up is measured with bytecode
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info out deploy
