#!/bin/sh
# run-benches.sh BIN...: run each benchmark; with SK_BENCH_DIR set, each writes DIR/NAME.json.
status=0
for bin in "$@"; do
  name=$(basename "$bin")
  echo "== $name"
  if [ -n "${SK_BENCH_DIR:-}" ]; then
    SK_BENCH_JSON="$SK_BENCH_DIR/$name.json" "$bin" || status=1
  else
    "$bin" || status=1
  fi
done
exit $status
