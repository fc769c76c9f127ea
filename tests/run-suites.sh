#!/bin/sh
# run-suites.sh BIN...: run Criterion suites one after another, print each synthesis line and a
# closing "N passed, N failed" line. Exit 1 if any suite failed or crashed. SK_SUITE_TIMEOUT=S
# stops a suite after S seconds (counted as failed: a lent GPU's minutes are not spent on a hang).
total_pass=0; total_fail=0; bad=""
for bin in "$@"; do
  echo "== $(basename "$bin")"
  out=$(${SK_SUITE_TIMEOUT:+timeout "$SK_SUITE_TIMEOUT"} "$bin" --jobs 2 2>&1); rc=$?
  [ $rc -eq 124 ] && out="$out
$(basename "$bin"): stopped after SK_SUITE_TIMEOUT=${SK_SUITE_TIMEOUT} s"
  printf '%s\n' "$out" | grep -v '^\[RUN \]\|^\[PASS\]' | tail -n 60
  line=$(printf '%s\n' "$out" | grep 'Synthesis:' | tail -n 1)
  tested=$(printf '%s' "$line" | sed -n 's/.*Tested: \([0-9]*\).*/\1/p')
  passing=$(printf '%s' "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
  [ -n "$tested" ] || { tested=1; passing=0; }
  total_pass=$((total_pass + passing)); total_fail=$((total_fail + tested - passing))
  if [ $rc -ne 0 ] || [ "$tested" != "$passing" ]; then bad="$bad $(basename "$bin")"; fi
done
echo
[ -n "$bad" ] && echo "failed suites:$bad"
echo "$total_pass passed, $total_fail failed"
[ -z "$bad" ]
