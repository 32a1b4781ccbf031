# Two commands matter: `make demo` and `make test`. Both create the virtualenv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup deps demo test bench clean harness cluster-up cluster-down

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

# The system packages the suite runs: a registry (docker-registry), image builds (buildah,
# debootstrap, bubblewrap), the test node (containerd, runc, the CNI plugins, nftables, iproute2,
# busybox-static for its image) and the C compiler of the fake GPU and the node's pause. apt-get
# on Debian, only what is missing (a no-op once installed); elsewhere it says what to install and
# lets `make test` go on (those tests skip, or fail under CI=true).
DEB_PACKAGES := docker-registry buildah bubblewrap debootstrap containerd runc \
	containernetworking-plugins nftables iproute2 busybox-static gcc libc6-dev
deps:
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
harness:
	tests/harness/build.sh all >/dev/null

# A control plane and a node left running for trying secureml by hand (root: the node makes
# cgroups, mounts and a bridge), with SPIRE (k8s_psat, the k8s workload attestor, the CSI driver
# csi.spiffe.io, spire-controller-manager) and kube-network-policies; it writes .cluster/kubeconfig.
cluster-up: $(STAMP) deps harness
	$(PY) -m tests.harness.node up --dir .cluster

cluster-down:
	$(PY) -m tests.harness.node down --dir .cluster

# The gates: ruff lint, ruff format (check only) and mypy (strict, pydantic plugin; settings in
# pyproject.toml). scripts/typecheck.py gives mypy components/ and enforcement/ under the names
# setup.py installs them with (secureml.components, secureml.enforcement).
.PHONY: lint
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py

test: deps $(STAMP) $(SHIM_LIB) harness
	$(PY) -m pytest -n 2 -m "not timing" -rs  # -rs: every skip says why
	sync  # flush the parallel run's writes first: writeback stalls would show up as GPU idle time
	$(PY) -m pytest -m timing

bench: $(STAMP)
	@$(PY) -m compileall -q secureml  # as installed: the CLI's start-up is measured with bytecode
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info out deploy
