#!/bin/bash
# gpu-run.sh: what one call on the device machine runs (binaries are built on the dev machine
# and carried with build/ and .devlibs/). Logs go to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-}
export SK_BUILD=build
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== gpu tests"
sh tests/run-suites.sh build/tests/gpu/test_* 2>&1 | tee "$OUT/gpu-test.log"
echo "== benches"
mkdir -p "$OUT/bench"
SK_BENCH_DIR="$OUT/bench" sh bench/run-benches.sh ${SK_BENCHES:-build/bench/*} 2>&1 | tee "$OUT/bench.log"
if [ "${SK_PEERS:-1}" = 1 ]; then
  echo "== peers (PyTorch torch.compile)"
  SK_BENCH_JSON="$OUT/bench/peer_quant_torch.json" PYTHONUNBUFFERED=1 timeout 240 python3 bench/peer_quant_torch.py 2>&1 | grep -v Warning | tee "$OUT/peer.log"
fi
