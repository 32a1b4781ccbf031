#!/usr/bin/env bash
# Build the test harness's Go programs from the Go module proxy, once per machine.
#
#   tests/harness/build.sh [controlplane|controlplane-1.34|node|spire|spire-controller-manager|e2e|all]
#
# Each Go module under tests/harness/ (controlplane: kube-apiserver + etcd of v1.36, the version
# that must work; controlplane-1.34: the same of v1.34, where MutatingAdmissionPolicy is beta behind
# its feature gate; node: kubelet + kube-scheduler of v1.36, every shared module at the control
# plane's version; spire: spire-server + spire-agent) is built into $SECUREML_HARNESS_CACHE/<module>-<hash of its go.mod and go.sum>/,
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
    local start=$SECONDS
    mkdir -p "$out/bin.tmp"
    echo "building the $name harness (first time on this machine: several minutes) ..." >&2
    (
        cd "$here/$name"
        while [[ $# -gt 0 ]]; do
            local binary="$1" package="$2" ldflags="$3"; shift 3
            if [[ "$package" == static:* ]]; then  # no cgo: a static binary for a scratch image
                CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$binary" "${package#static:}"
            else
                go build -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$binary" "$package"
            fi
        done
    ) >&2
    rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin" && touch "$out/.built"
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

build_e2e() {  # argoexec (Argo's own module), the kfp-launcher STAND-IN and the fake GPU's device plugin (tests/e2e)
    local out module version source scratch start=$SECONDS
    out="$(module_dir e2e)"
    if [[ -f "$out/.built" ]]; then
        echo "$out"
        return
    fi
    read -r module version < <(awk '$2 == "argoexec:" {print $3, $4}' "$here/e2e/go.mod")
    echo "building argoexec $version, the kfp-launcher stand-in and the fake device plugin (first time: many minutes) ..." >&2
    mkdir -p "$out/bin.tmp"
    (cd "$here/e2e" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
        -o "$out/bin.tmp/kfp-launcher-standin" ./kfp-launcher-standin \
        && go build -trimpath -o "$out/bin.tmp/fake-device-plugin" ./fake-device-plugin) >&2
    # The module zip drops the symlink workflow/executor/osspecific/signal_linux.go -> signal_darwin.go
    # (argoproj/argo-workflows#9590): build from a scratch copy with that file restored.
    source="$(GOFLAGS= go mod download -json "$module@$version" | awk -F'"' '$2 == "Dir" {print $4}')"
    scratch="$(mktemp -d /var/tmp/argo-workflows-XXXXXX)"
    cp -r "$source/." "$scratch" && chmod -R u+w "$scratch"
    cp "$scratch/workflow/executor/osspecific/signal_darwin.go" "$scratch/workflow/executor/osspecific/signal_linux.go"
    (cd "$scratch" && CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X github.com/argoproj/argo-workflows/v4.version=$version" \
        -o "$out/bin.tmp/argoexec" ./cmd/argoexec) >&2
    rm -rf "$scratch"
    rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin" && touch "$out/.built"
    echo "built argoexec, the kfp-launcher stand-in and the fake device plugin in $((SECONDS - start)) s: $out/bin" >&2
    echo "$out"
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
    e2e) build_e2e ;;
    all) build_controlplane controlplane; build_node; build_controlplane controlplane-1.34; build_spire; build_spire_controller_manager; build_e2e ;;
    *) echo "usage: $0 [controlplane|controlplane-1.34|node|spire|spire-controller-manager|e2e|all]" >&2; exit 2 ;;
esac
