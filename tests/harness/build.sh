#!/usr/bin/env bash
# Build the test harness's Go programs from the Go module proxy, once per machine.
#
#   tests/harness/build.sh [controlplane|controlplane-1.34|node|spire|spire-controller-manager|
#                           spiffe-csi|network-policies|e2e|trainer|all]
#
# Each Go module under tests/harness/ (controlplane: kube-apiserver + etcd of v1.36, the version
# that must work; controlplane-1.34: the same of v1.34, where MutatingAdmissionPolicy is beta behind
# its feature gate; node: kubelet + kube-scheduler of v1.36, every shared module at the control
# plane's version; spire: spire-server + spire-agent; spiffe-csi: the SPIFFE CSI driver, our
# plugin registrar and svidprobe; network-policies: kube-network-policies, patched at build time by
# copy of its module, and netprobe) is built into $SECUREML_HARNESS_CACHE/<module>-<hash of its go.mod and go.sum>/,
# default ~/.cache/secureml/harness. A build whose folder exists is skipped, so `make test` and
# .ci/run pay for it only on a new machine or when a go.mod changes. Go's own caches (GOMODCACHE,
# GOCACHE) are kept too. No prebuilt binary is downloaded: everything is compiled here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SECUREML_HARNESS_CACHE:-$HOME/.cache/secureml/harness}"
export GOFLAGS="-mod=readonly"

# The version Kubernetes reports: its build sets these with -ldflags; `go build` alone says v0.0.0,
# and an empty version makes kube-apiserver panic at start.
k8s_ldflags() {
    local gomod="$here/$1/go.mod" version
    version="$(awk '$1 == "k8s.io/kubernetes" {print $2} $1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' \
        "$gomod" | head -1)"
    if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
        echo "error: no k8s.io/kubernetes version found in $gomod" >&2
        exit 2
    fi
    local major minor
    major="$(echo "${version#v}" | cut -d. -f1)"
    minor="$(echo "${version#v}" | cut -d. -f2)"
    echo "-X k8s.io/component-base/version.gitVersion=${version} -X k8s.io/component-base/version.gitMajor=${major}" \
        "-X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean"
}

module_dir() {  # the cache folder of one module: changes whenever its go.mod, go.sum or own Go source does
    local name="$1"
    local sum
    # shellcheck disable=SC2046  # the module's own .go files (node's apiprobe), none for the others
    sum="$(cat "$here/$name/go.mod" "$here/$name/go.sum" $(find "$here/$name" -name '*.go' | LC_ALL=C sort) \
        | sha256sum | cut -c1-16)"
    echo "$cache/$name-$sum"
}

build() {
    local name="$1"; shift
    local out
    out="$(module_dir "$name")"
    if [[ -f "$out/.built" ]]; then
        echo "$out"
        return
    fi
    # One build of a folder at a time (two checkouts of the project on one machine share the
    # cache): a second waits, then finds it built. Each build writes a folder of its own, moved
    # into place whole, so a half-written bin/ is never marked built.
    mkdir -p "$out"
    exec {lock}>"$out.lock"
    flock "$lock"
    if [[ -f "$out/.built" ]]; then
        flock -u "$lock"
        echo "$out"
        return
    fi
    local start=$SECONDS
    rm -rf "$out/bin.tmp"
    mkdir -p "$out/bin.tmp"
    echo "building the $name harness (first time on this machine: several minutes) ..." >&2
    (
        cd "$here/$name"
        while [[ $# -gt 0 ]]; do
            local binary="$1" package="$2" ldflags="$3"; shift 3
            if [[ "$package" == static-in:* ]]; then  # static-in:<folder>:<package>: another module
                package="${package#static-in:}"
                (cd "${package%%:*}" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
                    -o "$out/bin.tmp/$binary" "${package#*:}")
            elif [[ "$package" == static:* ]]; then  # no cgo: a static binary for a scratch image
                CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$binary" "${package#static:}"
            else
                go build -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$binary" "$package"
            fi
        done
    ) >&2
    rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin" && touch "$out/.built"
    flock -u "$lock"
    echo "built the $name harness in $((SECONDS - start)) s: $out/bin" >&2
    echo "$out"
}

build_controlplane() {  # $1: the module folder, controlplane or controlplane-1.34
    local ldflags
    ldflags="$(k8s_ldflags "$1")"
    build "$1" \
        kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags" \
        kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags" \
        etcd go.etcd.io/etcd/server/v3 ""
}

build_node() {  # the kubelet and kube-scheduler of the control plane's version (tests/harness/node.py)
    local ldflags  # and apiprobe, the in-cluster client of the node's busybox image
    ldflags="$(k8s_ldflags node)"
    build node \
        kubelet k8s.io/kubernetes/cmd/kubelet "$ldflags" \
        kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$ldflags" \
        apiprobe static:secureml.dev/tests/harness/node/apiprobe "-s -w"
}

build_spire() {
    build spire \
        spire-server github.com/spiffe/spire/cmd/spire-server "" \
        spire-agent github.com/spiffe/spire/cmd/spire-agent ""
}

build_spire_controller_manager() {  # turns ClusterSPIFFEIDs into SPIRE entries (tests/cluster)
    build spire-controller-manager \
        spire-controller-manager github.com/spiffe/spire-controller-manager/cmd ""
}

build_spiffe_csi() {  # the node's CSI driver csi.spiffe.io, its registrar, svidprobe (tests/node)
    build spiffe-csi \
        spiffe-csi-driver github.com/spiffe/spiffe-csi/cmd/spiffe-csi-driver "" \
        registrar secureml.dev/tests/harness/spiffe-csi/registrar "" \
        svidprobe static:secureml.dev/tests/harness/spiffe-csi/svidprobe "-s -w"
}

# kube-network-policies v0.8.0 (pinned in network-policies/go.mod) is built in a scratch copy of its
# module, with its own go.mod and go.sum, and two changes made there at build time (no upstream
# source in the repository; `go build -overlay` may not replace files in GOMODCACHE): its NFQUEUE
# verdict goes through nft_compat (this kernel lacks nft_queue; network-policies/overlay/
# xt_nfqueue.go is added to its package), and its nftables table is named by
# $KUBE_NETWORK_POLICIES_TABLE (one table per node on a shared machine). The build fails if either
# edit no longer applies.
build_network_policies() {
    local module="sigs.k8s.io/kube-network-policies" version source work out
    out="$(module_dir network-policies)"
    if [[ -f "$out/.built" ]]; then
        echo "$out"
        return
    fi
    version="$(awk -v m="$module" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' \
        "$here/network-policies/go.mod" | head -1)"
    source="$(cd "$here/network-policies" && go mod download -json "$module@$version" \
        | awk -F'"' '$2 == "Dir" {print $4}')"
    if [[ ! -d "$source" ]]; then
        echo "error: go mod download $module@$version gave no folder" >&2
        exit 2
    fi
    work="$out.src"
    rm -rf "$work" && mkdir -p "$(dirname "$work")" && cp -r "$source" "$work" && chmod -R u+w "$work"
    local controller="$work/pkg/networkpolicy/controller.go" main="$work/cmd/main.go"
    local queue='	queue := &expr.Queue{Num: uint16(c.config.QueueID)}'
    if [[ "$(grep -cxF "$queue" "$controller")" != 2 ]]; then
        echo "error: $controller no longer has the two NFQUEUE verdicts the patch replaces" >&2
        exit 2
    fi
    awk -v queue="$queue" '
        $0 == queue { print "\tqueue := xtNFQueue(uint16(c.config.QueueID), c.config.FailOpen)"; skip = 3; next }
        skip > 0 { skip--; next }
        { print }' "$controller" >"$controller.new" && mv "$controller.new" "$controller"
    local field='		NetfilterBug1766Fix:        netfilterBug1766Fix,'
    if [[ "$(grep -cxF "$field" "$main")" != 1 ]]; then
        echo "error: $main no longer builds networkpolicy.Config as the patch expects" >&2
        exit 2
    fi
    awk -v field="$field" '{ print } $0 == field { print "\t\tNFTableName:                os.Getenv(\"KUBE_NETWORK_POLICIES_TABLE\")," }' \
        "$main" >"$main.new" && mv "$main.new" "$main"
    cp "$here/network-policies/overlay/xt_nfqueue.go" "$work/pkg/networkpolicy/xt_nfqueue.go"
    build network-policies \
        kube-network-policies "static-in:$work:./cmd" "-s -w" \
        netprobe static:secureml.dev/tests/harness/network-policies/netprobe "-s -w"
    rm -rf "$work"
}

build_e2e() {  # argoexec and workflow-controller (Argo's own module), the kfp-launcher and kfp-driver STAND-INs and the fake GPU's device plugin (tests/e2e)
    local out module version source scratch start=$SECONDS
    out="$(module_dir e2e)"
    if [[ -f "$out/.built" ]]; then
        echo "$out"
        return
    fi
    read -r module version < <(awk '$2 == "argoexec:" {print $3, $4}' "$here/e2e/go.mod")
    echo "building argoexec and workflow-controller $version, the KFP stand-ins and the fake device plugin (first time: many minutes) ..." >&2
    mkdir -p "$out/bin.tmp"
    (cd "$here/e2e" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
        -o "$out/bin.tmp/kfp-launcher-standin" ./kfp-launcher-standin \
        && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bin.tmp/kfp-driver-standin" ./kfp-driver-standin \
        && go build -trimpath -o "$out/bin.tmp/fake-device-plugin" ./fake-device-plugin) >&2
    # The module zip drops the symlink workflow/executor/osspecific/signal_linux.go -> signal_darwin.go
    # (argoproj/argo-workflows#9590): build from a scratch copy with that file restored.
    source="$(GOFLAGS= go mod download -json "$module@$version" | awk -F'"' '$2 == "Dir" {print $4}')"
    scratch="$(mktemp -d /var/tmp/argo-workflows-XXXXXX)"
    cp -r "$source/." "$scratch" && chmod -R u+w "$scratch"
    cp "$scratch/workflow/executor/osspecific/signal_darwin.go" "$scratch/workflow/executor/osspecific/signal_linux.go"
    (cd "$scratch" && CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/argoproj/argo-workflows/v4.version=$version" \
        -o "$out/bin.tmp/argoexec" ./cmd/argoexec \
        && CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/argoproj/argo-workflows/v4.version=$version" \
        -o "$out/bin.tmp/workflow-controller" ./cmd/workflow-controller) >&2
    rm -rf "$scratch"
    rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin" && touch "$out/.built"
    echo "built argoexec, workflow-controller, the KFP stand-ins and the fake device plugin in $((SECONDS - start)) s: $out/bin" >&2
    echo "$out"
}

build_trainer() {  # Kubeflow Trainer's controller manager and JobSet's controller (tests/harness/trainer_controllers.py)
    build trainer \
        trainer-controller-manager github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager "" \
        jobset-controller sigs.k8s.io/jobset ""
}

if ! command -v go >/dev/null 2>&1; then
    echo "error: the test harness is built with Go (1.26 or newer), and 'go' is not on PATH" >&2
    exit 2
fi
case "${1:-all}" in
    controlplane | controlplane-1.34) build_controlplane "$1" ;;
    node) build_node ;;
    spire) build_spire ;;
    spire-controller-manager) build_spire_controller_manager ;;
    spiffe-csi) build_spiffe_csi ;;
    network-policies) build_network_policies ;;
    e2e) build_e2e ;;
    trainer) build_trainer ;;
    all) build_controlplane controlplane; build_node; build_controlplane controlplane-1.34; build_spire
        build_spire_controller_manager; build_spiffe_csi; build_network_policies; build_e2e
        build_trainer ;;
    *) echo "usage: $0 [controlplane|controlplane-1.34|node|spire|spire-controller-manager|spiffe-csi|network-policies|e2e|trainer|all]" >&2
        exit 2 ;;
esac
