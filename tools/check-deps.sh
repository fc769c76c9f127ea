#!/bin/sh
# check-deps.sh PKG...: verify the CUDA toolkit (>= 12.9, via CUDA_HOME) and the Debian packages
# the build needs; install missing packages with apt-get when running as root.
set -eu
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda.h" ] || [ ! -f "$cuda_home/include/nvrtc.h" ]; then
  echo "sparkinfer: CUDA toolkit not found at CUDA_HOME=$cuda_home (need include/cuda.h and nvrtc.h)." >&2
  echo "  Install CUDA >= 12.9 or set CUDA_HOME=/path/to/cuda." >&2
  exit 1
fi
ver=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$cuda_home/include/cuda.h")
if [ -z "$ver" ] || [ "$ver" -lt 12090 ]; then
  echo "sparkinfer: CUDA at $cuda_home is version ${ver:-unknown}; need >= 12.9 (12090)." >&2
  exit 1
fi
for lib in libnvrtc.so libnvJitLink.so; do
  if [ ! -e "$cuda_home/lib64/$lib" ]; then
    echo "sparkinfer: $cuda_home/lib64/$lib missing; the toolkit install is incomplete." >&2
    exit 1
  fi
done
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "sparkinfer: installing$missing" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
  else
    echo "sparkinfer: missing Debian packages:$missing" >&2
    echo "  Install them (sudo apt-get install$missing) or run 'make deps' as root." >&2
    exit 1
  fi
fi
echo "sparkinfer: dependencies ok (CUDA $ver at $cuda_home)" >&2
