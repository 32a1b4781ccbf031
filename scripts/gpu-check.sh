#!/usr/bin/env bash
# The quota shim on a real GPU (issue 35): what the fake driver cannot tell. With the shim and the
# test programs built beforehand (--build-only, here), it needs on the GPU machine only bash, awk,
# coreutils and the NVIDIA driver: no compiler, no package index, no Python. It measures
#
#   scrub       the shim's scrub on free against the device's own cuMemsetD8 (target >= 80%)
#   quota       8 processes allocating at random under one quota: the counters' peak and a fill after
#   overhead    ns per alloc+free pair and per launch, with and without the shim (5 rotations, medians)
#   firewall    imports of handles nobody in the step exported: refused (CUDA_ERROR_NOT_PERMITTED, 800)
#   nvml        NVML preflight (memory, retired pages, remapped rows) and an Xid event subscription
#   cudart      NVIDIA's CUDA runtime, dynamic and static, filling memory under the shim: held at the quota
#
# and writes one JSON file. About a minute; every step is bounded (under 5 minutes in all).
#
#   scripts/gpu-check.sh --build-only [--dir DIR]     build into DIR (default build/gpu-check), then copy
#                                                     the repository (or DIR and this script) to the GPU machine
#   scripts/gpu-check.sh [--dir DIR] [--out FILE]     measure on GPU 0 (default out: gpu-check.json)
#   scripts/gpu-check.sh --fake [--dir DIR] [--out FILE]
#                                                     the same over the fake driver, CPU only (a dry run: the
#                                                     figures mean nothing, the checks do; tests/shim runs it)
#
# The CUDA runtimes come from CUDART_LIBS (folders holding libcudart.so.N and libcudart_static.a),
# else from the nvidia wheels of `${PYTHON:-python3}`; without them the cudart step is skipped.
# Where /etc/secureml/podinfo/limits exists the shim reads it instead of this script's limits: the
# script refuses to run there.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=$REPO/build/gpu-check
OUT=gpu-check.json
FAKE=0
BUILD_ONLY=0
while [ $# -gt 0 ]; do
    case $1 in
    --fake) FAKE=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --dir) DIR=$2; shift ;;
    --out) OUT=$2; shift ;;
    *) echo "usage: $0 [--fake] [--build-only] [--dir DIR] [--out FILE]" >&2; exit 2 ;;
    esac
    shift
done
SHIM_SRC=$REPO/enforcement/shim
MiB=1048576

log() { echo "gpu-check: $*" >&2; }

# ------------------------------------------------------------------------------------ build ----
build() {
    local cc=${CC:-cc}
    command -v "$cc" >/dev/null || { log "no C compiler: build with --build-only where there is one"; exit 3; }
    mkdir -p "$DIR/fake" "$DIR/cudart"
    local base=(-std=c11 -O2 -pthread -Wall -Wextra -I"$SHIM_SRC")
    log "building into $DIR"
    "$cc" "${base[@]}" -fPIC -shared -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -o "$DIR/fake/libcuda.so.1" \
        "$SHIM_SRC/fake/fake_cuda.c" "$SHIM_SRC/fake/fake_common.c"
    "$cc" "${base[@]}" -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-Bsymbolic -o "$DIR/fake/libnvidia-ml.so.1" \
        "$SHIM_SRC/fake/fake_nvml.c" "$SHIM_SRC/fake/fake_nvml_events.c" "$SHIM_SRC/fake/fake_common.c"
    # The shim: every C source of enforcement/shim (shim_control.SOURCES), as the package builds it.
    "$cc" "${base[@]}" -fPIC -shared -fvisibility=hidden -Wl,-soname,libsecureml_shim.so \
        -o "$DIR/libsecureml_shim.so" "$SHIM_SRC"/*.c -ldl
    # Linked against the fake's libcuda.so.1 for its symbols; at run time the loader finds the real one.
    "$cc" "${base[@]}" -o "$DIR/shim_driver" "$REPO/tests/shim/shim_driver.c" -L"$DIR/fake" -l:libcuda.so.1 -ldl
    "$cc" "${base[@]}" -o "$DIR/gpu_check" "$REPO/scripts/gpu-check/gpu_check.c" -L"$DIR/fake" -l:libcuda.so.1 -ldl
    local folders=${CUDART_LIBS:-}
    if [ -z "$folders" ]; then
        folders=$("${PYTHON:-python3}" -c 'import nvidia, pathlib
print(":".join(str(p / "lib") for r in nvidia.__path__ for p in pathlib.Path(r).iterdir() if (p / "lib").is_dir()))' \
            2>/dev/null || true)
    fi
    local folder lib major
    IFS=: read -ra list <<<"$folders"
    for folder in "${list[@]}"; do
        for lib in "$folder"/libcudart.so.[0-9]*; do
            [ -f "$lib" ] || continue
            major=${lib##*.so.}
            major=${major%%.*}
            cp -L "$lib" "$DIR/cudart/libcudart.so.$major"
            "$cc" -std=c11 -O2 -o "$DIR/cudart_probe_dynamic$major" "$REPO/tests/shim/cudart_probe.c" \
                -L"$DIR/cudart" -l:"libcudart.so.$major" -Wl,-rpath,'$ORIGIN/cudart'
            if [ -f "$folder/libcudart_static.a" ]; then
                "$cc" -std=c11 -O2 -o "$DIR/cudart_probe_static$major" "$REPO/tests/shim/cudart_probe.c" \
                    "$folder/libcudart_static.a" -ldl -lpthread -lrt
            fi
            log "CUDA $major runtime: $lib"
        done
    done
    touch "$DIR/.built"
}

if [ "$BUILD_ONLY" = 1 ] || [ ! -f "$DIR/.built" ]; then build; fi
[ "$BUILD_ONLY" = 1 ] && exit 0

# ------------------------------------------------------------------------------------ run ------
if [ -e /etc/secureml/podinfo/limits ]; then
    log "/etc/secureml/podinfo/limits exists: the shim would read it, not this script's limits"
    exit 4
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ "$FAKE" = 1 ]; then
    mkdir -p "$WORK/gpu"
    # A dry run: 4 GiB of sparse fake memory, a driver call of 200 ns, an Xid to subscribe to.
    cat >"$WORK/gpu/fakegpu.conf" <<CONF
driver version=590.48.01 cuda=13000 call_ns=200
launch kernel_us=0
device name="Fake GPU" memory=4G xid=79
CONF
    export SECUREML_FAKE_GPU_CONFIG=$WORK/gpu/fakegpu.conf
    export LD_LIBRARY_PATH=$DIR/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    SCRUB_MIB=64 PAIRS=20000 STRESS=1000
else
    SCRUB_MIB=1024 PAIRS=20000 STRESS=2000
fi

T=60 # seconds any one program may take
run() { timeout "$T" "$@"; }
# A step: limits in its own folder, the shim preloaded, counters written there.
step=0
shim_env() { # MEMORY SCRUB FIREWALL -> sets STEP_DIR, prints env assignments
    step=$((step + 1))
    STEP_DIR=$WORK/step$step
    mkdir -p "$STEP_DIR"
    printf 'version=1\nmemory=%s\nscrub_on_free=%s\nfirewall=%s\n' "$1" "$2" "$3" >"$STEP_DIR/limits"
    chmod 444 "$STEP_DIR/limits"
}
under_shim() { # run a command in the current step
    LD_PRELOAD=$DIR/libsecureml_shim.so SECUREML_SHIM_LIMITS_FILE=$STEP_DIR/limits \
        SECUREML_SHIM_COUNTERS_FILE=$STEP_DIR/counters run "$@"
}
counter() { sed -n "s/^$1=//p" "$STEP_DIR/counters" | head -1; }
field() { # JSON FIELD: a number or literal from a flat JSON object
    sed -n "s/.*\"$2\": *\"\{0,1\}\([^,\"}]*\)\"\{0,1\}.*/\1/p" <<<"$1"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
START=$(date +%s)

log "device"
DEVICE=$(run "$DIR/gpu_check" device)
TOTAL=$(field "$DEVICE" total)
QUOTA=$((TOTAL / 4 < 2048 * MiB ? TOTAL / 4 : 2048 * MiB))
QUOTA=$((QUOTA / (64 * MiB) * 64 * MiB))
[ "$FAKE" = 1 ] && QUOTA=$((256 * MiB))

log "nvml preflight and Xid subscription"
NVML=$(run "$DIR/gpu_check" nvml 200)

log "scrub against cuMemsetD8 ($SCRUB_MIB MiB)"
MEMSET=$(run "$DIR/gpu_check" memset "$SCRUB_MIB" 3)
shim_env $((4 * SCRUB_MIB * MiB)) 1 0
FREE_SCRUB=$(under_shim "$DIR/gpu_check" free "$SCRUB_MIB" 3)
shim_env $((4 * SCRUB_MIB * MiB)) 0 0
FREE_PLAIN=$(under_shim "$DIR/gpu_check" free "$SCRUB_MIB" 3)
SCRUB=$(awk -v b="$((SCRUB_MIB * MiB))" -v m="$(field "$MEMSET" seconds)" -v s="$(field "$FREE_SCRUB" seconds)" \
    -v p="$(field "$FREE_PLAIN" seconds)" 'BEGIN {
        d = s - p; if (d <= 0) d = 1e-9
        printf "{\"bytes\": %d, \"memset_s\": %.6f, \"free_scrub_s\": %.6f, \"free_plain_s\": %.6f, ", b, m, s, p
        printf "\"memset_gb_per_s\": %.3f, \"scrub_gb_per_s\": %.3f, \"ratio\": %.3f, \"target\": 0.8}", b / m / 1e9, b / d / 1e9, m / d }')

log "per-call overhead (5 rotations)"
a_drv="" a_shim="" l_drv="" l_shim=""
shim_env $((1024 * MiB)) 0 0
for _ in 1 2 3 4 5; do
    a_drv+=" $(field "$(run "$DIR/gpu_check" alloc $PAIRS)" ns)"
    a_shim+=" $(field "$(under_shim "$DIR/gpu_check" alloc $PAIRS)" ns)"
    l_drv+=" $(field "$(run "$DIR/gpu_check" launch $PAIRS)" ns)"
    l_shim+=" $(field "$(under_shim "$DIR/gpu_check" launch $PAIRS)" ns)"
done
REAL_KERNEL=$(field "$(run "$DIR/gpu_check" launch 1000)" real_kernel)
OVERHEAD=$(awk -v ad="$(median <<<"$a_drv")" -v as="$(median <<<"$a_shim")" -v ld="$(median <<<"$l_drv")" \
    -v ls="$(median <<<"$l_shim")" -v k="$REAL_KERNEL" 'BEGIN {
        printf "{\"alloc_free_driver_ns\": %.1f, \"alloc_free_shim_ns\": %.1f, \"alloc_free_added_ns\": %.1f, ", ad, as, as - ad
        printf "\"alloc_free_ratio\": %.3f, \"launch_driver_ns\": %.1f, \"launch_shim_ns\": %.1f, ", as / ad, ld, ls
        printf "\"launch_added_ns\": %.1f, \"launch_ratio\": %.3f, \"real_kernel\": %s, ", ls - ld, ls / ld, k
        printf "\"targets\": {\"alloc_free_added_ns\": 50, \"launch_added_ns\": 10}}" }')

log "quota under 8 processes ($((QUOTA / MiB)) MiB)"
shim_env "$QUOTA" 0 0
pids=()
for seed in 1 2 3 4 5 6 7 8; do
    under_shim "$DIR/shim_driver" stress $STRESS $seed $((QUOTA / 8)) >"$STEP_DIR/stress$seed" &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
FILL=$(field "$(under_shim "$DIR/shim_driver" fill $((QUOTA / 16)))" total)
QUOTA_JSON=$(printf '{"quota": %s, "processes": 8, "failed": %s, "peak": %s, "refused": %s, "fill_after": %s, "held": %s}' \
    "$QUOTA" "$failed" "$(counter peak)" "$(counter refused)" "$FILL" \
    "$([ "$failed" = 0 ] && [ "$(counter peak)" -le "$QUOTA" ] && [ "$FILL" = "$QUOTA" ] && echo true || echo false)")

log "CUDA firewall"
FW_DRIVER=$(run "$DIR/gpu_check" firewall)
shim_env $((256 * MiB)) 0 1
FW_SHIM=$(under_shim "$DIR/gpu_check" firewall)
FIREWALL=$(printf '{"driver": %s, "shim": %s, "refused": %s, "all_refused": %s}' "$FW_DRIVER" "$FW_SHIM" \
    "$(counter firewall_refused)" "$([ "$(grep -o ': 800' <<<"$FW_SHIM" | wc -l)" = 3 ] && echo true || echo false)")

log "CUDA runtime under the shim"
CUDART=""
for probe in "$DIR"/cudart_probe_*; do
    [ -x "$probe" ] || continue
    shim_env "$QUOTA" 0 0
    got=$(under_shim "$probe" fill $((64 * MiB)) || echo '{"total": 0, "rc": -1}')
    held=$(awk -v t="$(field "$got" total)" -v q="$QUOTA" -v rc="$(field "$got" rc)" \
        'BEGIN { print (rc == 2 && t > 0 && t <= q) ? "true" : "false" }')
    CUDART+="${CUDART:+, }\"${probe##*/}\": {\"result\": $got, \"quota\": $QUOTA, \"held\": $held}"
done

ELAPSED=$(($(date +%s) - START))
mkdir -p "$(dirname "$OUT")"
cat >"$OUT" <<JSON
{"version": 1, "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "fake": $([ "$FAKE" = 1 ] && echo true || echo false),
 "host": "$(uname -n)", "seconds": $ELAPSED,
 "device": $DEVICE,
 "nvml": $NVML,
 "scrub": $SCRUB,
 "overhead": $OVERHEAD,
 "quota": $QUOTA_JSON,
 "firewall": $FIREWALL,
 "cudart": {$CUDART}}
JSON
log "wrote $OUT in ${ELAPSED}s"
cat "$OUT"
