# Two commands matter: `make demo` and `make test`. Both create the virtualenv on first use.
# `make help` lists every target.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help setup deps demo test test-fast bench clean harness cluster-up cluster-down lint fmt

help: ## every target, one line each
	@awk -F':.*## ' '/^[a-z][a-z-]*:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m compileall -q secureml  # an editable install writes no bytecode; start-up would compile
	touch $@

setup: $(STAMP) ## the virtualenv with secureml installed editable, and the dev tools

# The GPU quota shim, rebuilt whenever its C sources change (pip install builds it too).
SHIM_LIB := enforcement/libsecureml_shim.so
$(SHIM_LIB): $(wildcard enforcement/shim/*.c enforcement/shim/*.h) enforcement/shim_control.py
	$(PY) -m secureml.enforcement.shim_control build || echo "WARNING: quota shim not built (no C compiler?)"

demo: $(STAMP) $(SHIM_LIB) ## validate profiles, compile, render a bundle, run the pipeline locally
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

# The system packages the suite runs: a registry (docker-registry), image builds (buildah,
# debootstrap, bubblewrap), the test node (containerd, runc, the CNI plugins, nftables, iproute2,
# busybox-static for its image), the C compiler of the fake GPU and the node's pause, clang-format
# (make lint) and promtool (prometheus: the rendered alert rules read by Prometheus). apt-get
# on Debian, only what is missing (a no-op once installed); elsewhere it says what to install and
# lets `make test` go on (those tests skip, or fail under CI=true).
DEB_PACKAGES := docker-registry buildah bubblewrap debootstrap containerd runc \
	containernetworking-plugins nftables iproute2 busybox-static gcc libc6-dev clang-format prometheus
deps: ## the system packages the suite needs (apt-get on Debian)
	@missing=""; for package in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${db:Status-Abbrev}' $$package 2>/dev/null | grep -q '^ii' \
			|| missing="$$missing $$package"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "make deps: warning: not Debian (no apt-get): install the equivalents of" $$missing \
			"yourself; until then the tests that need them skip (and fail under CI=true)" >&2; \
		exit 0; \
	fi; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	echo "make deps: apt-get install" $$missing; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null

# The test control plane (kube-apiserver + etcd), the test node (kubelet + kube-scheduler), SPIRE,
# spire-controller-manager, the SPIFFE CSI driver and kube-network-policies, compiled from the Go
# module proxy once per machine into ~/.cache/secureml/harness (a no-op when cached); see
# docs/testing.md.
harness: ## build the Go test harness (control plane, node, SPIRE, CSI, NetworkPolicy) once
	tests/harness/build.sh all >/dev/null

# A control plane and a node left running for trying secureml by hand (root: the node makes
# cgroups, mounts and a bridge), with SPIRE (k8s_psat, the k8s workload attestor, the CSI driver
# csi.spiffe.io, spire-controller-manager) and kube-network-policies; it writes .cluster/kubeconfig.
# Then tests/e2e/up.py adds what tests/e2e runs: the fake GPU's device plugins, the images of a step
# pod in the node's registry (with the quay.io/ghcr.io mirror), the tenant team-a and its store.
# Kubeflow Trainer v2.3.0 and JobSet v0.12.0 run against it too (tests/harness/trainer_controllers.py).
cluster-up: $(STAMP) deps harness ## start a control plane and a node to try secureml by hand
	$(PY) -m tests.harness.node up --dir .cluster
	$(PY) -m tests.e2e.up --dir .cluster

cluster-down: ## stop them
	$(PY) -m tests.e2e.up down --dir .cluster
	$(PY) -m tests.harness.node down --dir .cluster

# The gates: ruff lint, ruff format (check only) and mypy (strict, pydantic plugin; settings in
# pyproject.toml). scripts/typecheck.py gives mypy components/ and enforcement/ under the names
# setup.py installs them with (secureml.components, secureml.enforcement).
# The C sources (the quota shim, its fakes, the fuzz target, the test programs) are in
# clang-format's style (.clang-format; Debian's clang-format, which `make deps` installs).
C_SOURCES := $(wildcard enforcement/shim/*.[ch] enforcement/shim/fake/*.[ch] enforcement/shim/fuzz/*.c tests/shim/*.c)
# vulture reads the tests too: what only a test uses is not dead.
DEAD_CODE_PATHS := secureml enforcement components tests benchmarks scripts pipelines examples
lint: $(STAMP) ## ruff, ruff format --check, mypy --strict, vulture, clang-format (the CI gate)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py
	$(VENV)/bin/vulture $(DEAD_CODE_PATHS) scripts/vulture_allowlist.py --min-confidence 60
	clang-format --dry-run --Werror $(C_SOURCES)

fmt: $(STAMP) ## format and autofix what lint would refuse
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	clang-format -i $(C_SOURCES)

test: deps $(STAMP) $(SHIM_LIB) harness ## the whole suite, as CI runs it
	$(PY) -m pytest -n 2 -m "not timing" -rs  # -rs: every skip says why
	sync  # flush the parallel run's writes first: writeback stalls would show up as GPU idle time
	$(PY) -m pytest -m timing

# Everything but the tests of the Go harness (control plane, node, SPIRE) and the wall-clock ones.
test-fast: $(STAMP) $(SHIM_LIB) ## the suite without the Go harness: minutes, no Go needed
	$(PY) -m pytest -n 2 -m "not timing and not cluster and not spire and not node" -rs

bench: $(STAMP) ## the benchmarks: ratios against a baseline measured in the same run
	@$(PY) -m compileall -q secureml  # as installed: the CLI's start-up is measured with bytecode
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean: ## remove the virtualenv and build outputs
	rm -rf $(VENV) build *.egg-info out deploy
