"""Peer for bench_gemm: cuBLASLt through PyTorch on the same GPU and shapes. BF16 (torch.matmul)
and FP8 per-tensor (torch._scaled_mm, E4M3; M padded to 16 where the API needs it). Prints a
Markdown table; with SK_BENCH_JSON=FILE also writes JSON."""
import json
import os

import torch
import triton.testing

rows = []
print("| peer | M | N | K | us | GB/s | TFLOP/s |\n|---|---|---|---|---|---|---|")
shapes = [(8192, 8192), (28672, 4096), (8192, 28672)]
for n, k in shapes:
    w16 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    w8 = w16.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    for m in (1, 4, 16, 2048, 4096, 8192):
        if m > 16 and (n, k) != (8192, 8192):
            continue
        x16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        mp = max(m, 16)
        x8 = torch.randn(mp, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        for name, fn, wbytes in (
            ("cuBLASLt bf16", lambda: torch.matmul(x16, w16.t()), 2),
            ("cuBLASLt fp8 per-tensor", lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 1),
        ):
            ms = triton.testing.do_bench(fn, warmup=20, rep=100, return_mode="median")
            us = ms * 1e3
            by = n * k * wbytes + m * k * wbytes + m * n * 2
            row = {"peer": name, "m": m, "n": n, "k": k, "us": us, "gbs": by / (us * 1e-6) / 1e9,
                   "tflops": 2.0 * m * n * k / (us * 1e-6) / 1e12}
            rows.append(row)
            print(f"| {name} | {m} | {n} | {k} | {us:.2f} | {row['gbs']:.0f} | {row['tflops']:.1f} |", flush=True)
if os.environ.get("SK_BENCH_JSON"):
    json.dump({"results": rows}, open(os.environ["SK_BENCH_JSON"], "w"), indent=1)
