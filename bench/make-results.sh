#!/bin/sh
# make-results.sh: regenerate bench/RESULTS.md from the bench JSON kept under bench/data/ (the
# inputs of today's tables), bench/goals.json and bench/results-tail.md. The M = 4 gemm rows stay in
# the JSON only, and so do the T = 16 norm.mhc rows and the linears' host rows, to keep the file
# within 400 lines.
cd "$(dirname "$0")/.." || exit 1
D=bench/data/2026-12-05-h100
python3 bench/results.py --goals bench/goals.json --tail bench/results-tail.md --exclude '^gemm\.\S+ .* m=4 ' --exclude '^norm.mhc .* T=16$' --exclude '^host gemm\.\w+_linear ' \
  $D/bench_ops-run1.jsonl $D/bench_ops-gemm.jsonl $D/bench_ops-moe.jsonl $D/bench_legacy-1b7b4d3.jsonl \
  $D/bench_host-cpu.jsonl bench/data/2026-12-05-cpu/bench_host_mm.jsonl $D/peer_attention_torch.json $D/peer_moe_torch.json > bench/RESULTS.md
