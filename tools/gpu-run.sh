#!/bin/bash
# gpu-run.sh: what one call on the device machine runs (binaries are built on the dev machine
# and carried: build/tests/gpu, build/bench, build/bin (bench_runtime runs sk-warm) and
# .devlibs/; build/gpu-cache is a kernel cache prebuilt for the device's arch with sk-warm, so
# the lease is not spent compiling). Logs go to $OUT.
#   SK_TESTS   test binaries to run (default: all GPU suites)
#   SK_BENCHES benchmark binaries (default: all)
#   SK_PEERS   python peer scripts under bench/ to run (default: none), e.g. "peer_gemm_torch"
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-}
export SK_BUILD=build
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/bench"
if [ -d build/gpu-cache ]; then
  chmod 700 build/gpu-cache
  export SK_GPU_TEST_CACHE=$PWD/build/gpu-cache
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== gpu tests"
sh tests/run-suites.sh ${SK_TESTS:-build/tests/gpu/test_*} 2>&1 | tee "$OUT/gpu-test.log"
echo "== benches"
SPARKINFER_CACHE_DIR=${SK_GPU_TEST_CACHE:-$HOME/.cache/sparkinfer} SK_BENCH_DIR="$OUT/bench" \
  sh bench/run-benches.sh ${SK_BENCHES:-build/bench/*} 2>&1 | tee "$OUT/bench.log"
for peer in ${SK_PEERS:-}; do
  echo "== peer $peer"
  SK_BENCH_JSON="$OUT/bench/$peer.json" PYTHONUNBUFFERED=1 timeout 240 python3 "bench/$peer.py" 2>&1 |
    grep -v Warning | tee "$OUT/$peer.log"
done
