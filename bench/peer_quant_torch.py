"""Peer for the quantizers' bench cases (ops/quantization/cases.c): the same row quantizers written
in PyTorch and compiled with torch.compile, timed on the same GPU and shapes (BF16 input, row-major
scales: the peer gets the easier layout). Prints a Markdown table; with SK_BENCH_JSON=FILE also
writes JSON lines that bench/results.py joins to bench_ops's rows by (op, case, gpu)."""
import datetime
import json
import os

import torch
import triton.testing

torch.manual_seed(0)


def nvfp4_quant(x, gs):
    # block scale = e4m3(gs * amax16 / 6); values = e2m1(x * gs / scale) (RNE, saturating)
    m, k = x.shape
    xb = x.float().view(m, k // 16, 16)
    amax = xb.abs().amax(-1, keepdim=True)
    sf = torch.clamp(gs * (amax / 6.0), max=448.0).to(torch.float8_e4m3fn)
    eff = torch.where(sf.float() == 0, torch.zeros_like(amax), 1.0 / (sf.float() / gs))
    v = torch.clamp(xb * eff, -6.0, 6.0)
    # E2M1 grid rounding (nearest, ties to even code) via a lookup on the magnitude
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=x.device)
    mag = v.abs().unsqueeze(-1)
    code = (mag - grid).abs().argmin(-1).to(torch.uint8) | ((v < 0).to(torch.uint8) << 3)
    code = code.view(m, k // 2, 2)
    packed = code[..., 0] | (code[..., 1] << 4)
    return packed, sf.view(m, k // 16)


def mxfp8_quant(x):
    m, k = x.shape
    xb = x.float().view(m, k // 32, 32)
    amax = xb.abs().amax(-1, keepdim=True)
    e = torch.ceil(torch.log2(torch.clamp(amax / 448.0, min=2.0**-127)))
    scale = torch.exp2(e)
    v = (xb / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    return v.view(m, k), (e + 127).to(torch.uint8).view(m, k // 32)


nv = torch.compile(nvfp4_quant)
mx = torch.compile(mxfp8_quant)
rows = []
gpu = torch.cuda.get_device_name()
date = datetime.date.today().isoformat()
print("| peer | M | K | us | GB/s |\n|---|---|---|---|---|")
for name, fn in (("torch.compile nvfp4", lambda x: nv(x, 100.0)), ("torch.compile mxfp8", mx)):
    op = "quantization.nvfp4" if "nvfp4" in name else "quantization.mxfp8"
    for k in (2048, 4096, 7168):
        for m in (1, 16, 128, 4096, 16384):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            fn(x)
            torch.cuda.synchronize()
            ms = triton.testing.do_bench(lambda: fn(x), warmup=25, rep=100, return_mode="median")
            out_bytes = m * k // 2 + m * k // 16 if "nvfp4" in name else m * k + m * k // 32
            gbs = (m * k * 2 + out_bytes) / (ms * 1e-3) / 1e9
            print(f"| {name} | {m} | {k} | {ms * 1e3:.2f} | {gbs:.0f} |", flush=True)
            case = f"bf16 m={m} k={k} swizzled" + (" gs=given" if "nvfp4" in name else "") + " data=0"
            rows.append({"op": op, "case": case, "peer": "torch.compile", "peer_us": ms * 1e3, "peer_value": gbs,
                         "metric": "GB/s", "gpu": gpu, "date": date})
if os.environ.get("SK_BENCH_JSON"):
    with open(os.environ["SK_BENCH_JSON"], "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
