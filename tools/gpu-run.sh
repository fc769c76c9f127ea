#!/bin/bash
# gpu-run.sh: what one call on the device machine runs, over .devrun/ (built here by
# tools/gpu-prep.sh and carried as .devrun.tar.xz, unpacked here: stripped binaries, the
# libraries the device lacks, kernel caches prebuilt for sm_90a). Logs and bench JSON end up in $OUT/results.tar.gz (and $OUT/gpu-test.log).
#   SK_TESTS       GPU suites to run (default: every .devrun/new/tests/gpu/test_*); each is stopped
#                  after SK_SUITE_TIMEOUT seconds (default here 300)
#   SK_BENCHES     benchmarks of this build (default: every .devrun/new/bench/*; "none" skips them)
#   SK_OLD_BENCHES benchmarks of the older build in .devrun/old, run first for a side-by-side
#                  comparison (default: all of them, when .devrun/old exists; "none" skips them)
#   SK_BENCH_TIMEOUT seconds each benchmark may run (default 300; bench_ops over every op needs
#                  more: its host-side fills of the large attention and MoE cases take minutes)
#   SK_PEERS       python peer scripts under bench/ to run after the tests, before the benches
#                  (default: none), e.g. "peer_gemm_torch"
set -uo pipefail
if [ -f .devrun.tar.xz ]; then rm -rf .devrun && tar xJf .devrun.tar.xz || exit 1; fi
export LD_LIBRARY_PATH=$PWD/.devrun/libs:${LD_LIBRARY_PATH:-}
FINAL=${OUT:-/tmp/out}
OUT=$(mktemp -d)  # everything is packed into $FINAL/results.tar.gz at the end (the device returns few files)
mkdir -p "$OUT/bench" "$FINAL"
trap 'tar czf "$FINAL/results.tar.gz" -C "$OUT" . && cp "$OUT/gpu-test.log" "$FINAL/" 2>/dev/null' EXIT
chmod 700 .devrun/new/cache .devrun/old/cache 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== gpu tests $(date +%T)"
SK_BUILD=.devrun/new SK_GPU_TEST_CACHE=$PWD/.devrun/new/cache SK_SUITE_TIMEOUT=${SK_SUITE_TIMEOUT:-300} \
  sh tests/run-suites.sh ${SK_TESTS:-.devrun/new/tests/gpu/test_*} 2>&1 | tee "$OUT/gpu-test.log"
# Peers first: they are the comparison a new op's figures need; the side-by-side runs follow.
for peer in ${SK_PEERS:-}; do
  echo "== peer $peer $(date +%T)"
  SK_BENCH_JSON="$OUT/bench/$peer.json" PYTHONUNBUFFERED=1 timeout 240 python3 "bench/$peer.py" 2>&1 |
    grep -v Warning | tee "$OUT/$peer.log"
done
# bench BUILD PREFIX BIN: one benchmark of .devrun/BUILD with its cache; log and JSON named PREFIX + name.
bench() {
  local name
  name=$(basename "$3")
  echo "== $2$name $(date +%T)"
  SK_BUILD=.devrun/$1 SPARKINFER_CACHE_DIR=$PWD/.devrun/$1/cache SK_BENCH_JSON="$OUT/bench/$2$name.json" \
    timeout "${SK_BENCH_TIMEOUT:-300}" "$3" 2>&1 | tee "$OUT/$2$name.log"
}
if [ -d .devrun/old ] && [ "${SK_OLD_BENCHES:-}" != none ]; then
  echo "== benches of the older build"
  for bin in ${SK_OLD_BENCHES:-.devrun/old/bench/*}; do bench old old- "$bin"; done
fi
echo "== benches"
if [ "${SK_BENCHES:-}" != none ]; then
  for bin in ${SK_BENCHES:-.devrun/new/bench/*}; do bench new "" "$bin"; done
fi
