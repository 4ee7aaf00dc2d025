#!/bin/sh
# The GPU run in one prepared script (for the `device` machine, or any CUDA machine):
#   sh tools/gpu_check.sh [BUILD_DIR]       results under $OUT (default ./gpu-results)
# 1. builds BUILD_DIR (default build-gpu) with -Dcuda=enabled unless it is already built;
# 2. checks the CUDA library (libllmhost_kernels_cuda.so, loaded on demand) loads and
#    `llmhost backends` lists the device through it, then runs the CUDA suites (every CUDA
#    kernel against its CPU twin; generation on the GPU against the CPU on every fixture; the
#    library's load state), which must report no skipped test on a GPU machine;
# 3. benchmarks a random-weight checkpoint of Llama-3.2-1B's shape (tools/bench/synth_model.py):
#    decode tok/s at batch 1 and 32 with and without CUDA graphs, and prefill tok/s, each next
#    to the HBM-bandwidth bound that `llmhost bench` prints for the device.
# Every step's output is kept; the exit status is that of the first failed step.
set -u
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
status=0
step() { # name, command...
    name=$1
    shift
    echo "== $name: $*" | tee -a "$OUT/steps.log"
    start=$(date +%s)
    "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    echo "   rc=$rc in $(($(date +%s) - start)) s" | tee -a "$OUT/steps.log"
    tail -5 "$OUT/$name.txt"
    [ $rc -ne 0 ] && [ $status -eq 0 ] && status=$rc
    return $rc
}

step nvidia_smi nvidia-smi
if [ ! -f "$B/build.ninja" ]; then
    step setup meson setup "$B" -Dcuda=enabled -Dbuildtype=release || exit $status
fi
step build ninja -C "$B" || exit $status

# the CUDA half is its own library, loaded on demand (kernels/cuda_load.c): it must be there
# and load, and `backends` must list the device through it
L="$B/host/llmhost"
step cuda_library sh -c "test -f '$B/kernels/libllmhost_kernels_cuda.so' && '$L' backends | tee /dev/stderr | grep -q '^  cuda:0'"

# the CUDA suites; a skip here means the GPU was not usable, which is a failure of this run
step cuda_tests meson test -C "$B" --suite cuda --no-rebuild --print-errorlogs
if grep -q "SKIPPED" "$B/meson-logs/testlog.txt" 2>/dev/null; then
    echo "   CUDA tests were skipped on a GPU machine: see $OUT/cuda_tests.txt" | tee -a "$OUT/steps.log"
    [ $status -eq 0 ] && status=1
fi
cp "$B/meson-logs/testlog.txt" "$OUT/cuda_testlog.txt" 2>/dev/null

M=${TMPDIR:-/tmp}/llmhost-synth-llama-3.2-1b
[ -f "$M/model.safetensors" ] || step synth python3 tools/bench/synth_model.py "$M" --shape llama-3.2-1b
step bench_decode "$L" bench "$M" --device cuda --context 512 --batch 1,32 -n 128 --json
step bench_decode_nographs "$L" bench "$M" --device cuda --context 512 --batch 1,32 -n 128 \
    --set cuda_graphs=false --json
step bench_prefill "$L" bench "$M" --device cuda --context 2048 --batch 1,8 -n 1 --json
exit $status
