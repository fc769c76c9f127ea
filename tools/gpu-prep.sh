#!/bin/bash
# gpu-prep.sh [BASE_BUILD]: build here what one device call needs, into .devrun/ (git-ignored; carry
# it): the GPU suites, benchmarks, tools and helpers (stripped), the shared libraries the device
# lacks (../shared/tools/device-libs), and a kernel cache prebuilt for sm_90a with sk-warm from the
# model manifests, direct.json and the harness's GPU and bench cases, so the device's minutes are not
# spent compiling. BASE_BUILD (a build directory of an older commit, with bench/ and bin/ and a
# gpu-cache/ prebuilt the same way) is copied to .devrun/old for side-by-side benchmarks. The whole
# is packed into .devrun.tar.xz (about 7 MB against ~60 MB unpacked; carry limit 64 MiB): carry that
# file; gpu-run.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${SK_BUILD:-build}
make -j2 gpu-bins
rm -rf .devrun
mkdir -p .devrun/new/bin .devrun/new/bench .devrun/new/tests/gpu .devrun/new/tests/helpers .devrun/libs
cp $B/bin/sk-warm $B/bin/sk-cache .devrun/new/bin/
cp $B/bench/* .devrun/new/bench/
cp $B/tests/gpu/test_* .devrun/new/tests/gpu/
cp $B/tests/helpers/* .devrun/new/tests/helpers/
[ -f $B/lib/libskref_mhc.so ] && mkdir -p .devrun/new/lib && cp $B/lib/libskref_mhc.so .devrun/new/lib/
strip .devrun/new/bin/* .devrun/new/bench/* .devrun/new/tests/gpu/* .devrun/new/tests/helpers/*
../shared/tools/device-libs .devrun/libs .devrun/new/bin/* .devrun/new/bench/* .devrun/new/tests/gpu/*
$B/tests/helpers/sk_case_manifest $B/case-manifest.json sm_90a
manifests=""
for m in tools/manifests/models/*.json tools/manifests/direct.json $B/case-manifest.json; do
  case $m in *coverage.json) continue ;; esac
  manifests="$manifests --manifest $m"
done
$B/bin/sk-warm $manifests --arch sm_90a --cache-dir $B/gpu-cache -j 2 --quiet
cp -r $B/gpu-cache .devrun/new/cache
if [ $# -ge 1 ]; then
  mkdir -p .devrun/old/bin .devrun/old/bench
  cp "$1"/bench/* .devrun/old/bench/
  cp "$1"/bin/sk-warm "$1"/bin/sk-cache .devrun/old/bin/
  strip .devrun/old/bench/* .devrun/old/bin/*
  ../shared/tools/device-libs .devrun/libs .devrun/old/bench/* .devrun/old/bin/*
  cp -r "$1"/gpu-cache .devrun/old/cache
fi
tar cJf .devrun.tar.xz .devrun
du -sh .devrun .devrun.tar.xz
