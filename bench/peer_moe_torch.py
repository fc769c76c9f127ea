"""Peer for bench_ops's MoE cases: every BENCH case of ops/moe/cases.c (read from that file, so the
two stay in step), done the way a plain PyTorch MoE layer does it, with BF16 weights ("torch bf16
per-expert"): the routes are sorted by expert and counted (one host sync, as in Hugging Face's MoE
blocks), then for each expert that got tokens: gather its tokens, h = x @ w1[e].T (w1 [2N, K] as
[up; gate]; relu2: [N, K], ungated), the case's activation (SiLU: silu(gate) * up; swiglu-oai:
gate clamped to 7, up to [-7, 7], gate * sigmoid(1.702 gate) * (up + 1); relu2: relu(h)^2),
y = a @ w2[e].T (w2 [K, N]), and out.index_add_ of y times the route's weight. Routes: m tokens,
topk distinct experts each, uniform over the case's EG global experts, weights in [0.1, 1); an EP
case keeps the routes to its E local experts (ids below E). All of it is in the timed region. Our
op reads 4-bit weights (W4A16 / NVFP4), the peer BF16 ones: PyTorch has no 4-bit grouped GEMM on
Hopper. Where every expert's BF16 weights would pass 40 GB, only the experts the routes touch are
allocated.

The figure is the case's own cost model (cases.c's cost(): for m <= 8 the bytes of the prepared
4-bit weights of the expected active experts plus x and out, GB/s; else two GEMMs per route,
TFLOP/s) over the peer's time, so peer figure over ours is our time over the peer's. Times:
triton.testing.do_bench median (warmup 10 ms, rep 50 ms). A case that fails prints why and the
script goes on. Prints a Markdown table; with SK_BENCH_JSON=FILE also writes {"results": rows}
that bench/results.py joins to bench_ops's rows by (op, case, gpu)."""
import re
import time

import torch
import torch.nn.functional as F
import triton.testing

from peer_common import bench_cases, run_identity, save

FIELDS = ["ep", "recipe", "wfmt", "act", "e", "eg", "k", "n", "topk", "m", "max_m", "routing", "ids64", "on_input",
          "det", "scale_mode"]
MICRO_MAX_TOKENS = 8  # SK_MOE_MICRO_MAX_TOKENS (ops/moe/plan.cuh): cost() switches metric above it
MAX_WEIGHT_BYTES = 40e9
START = time.time()




def up(a, b):
    return -(-a // b) * b


def cost(c):
    """cases.c's cost(): (the case's amount, metric), with sk_moe_prepared_sizes_of's sizes."""
    e, eg, k, n, topk, m = c["e"], c["eg"] or c["e"], c["k"], c["n"], c["topk"], c["m"]
    active = e * (1.0 - (1.0 - topk / eg) ** m)
    np_, kp, vec = up(n, 128), up(k, 128), 16 if c["wfmt"] == "NV" else 32
    rows = np_ if c["act"] == "RELU2" else 2 * np_
    per_expert = rows * kp // 2 + up(rows, 128) * up(kp // vec, 4) + k * np_ // 2 + up(k, 128) * up(np_ // vec, 4)
    if m <= MICRO_MAX_TOKENS:
        return (active * per_expert + 4.0 * m * k) / 1e9, "GB/s"
    r1 = n if c["act"] == "RELU2" else 2.0 * n
    return 2.0 * m * topk * (e / eg) * (r1 * k + n * k) / 1e12, "TFLOP/s"


def activation(act, h, n):
    if act == "RELU2":
        return F.relu(h).square()
    u, g = h[:, :n], h[:, n:]
    if act == "OAI":
        g, u = g.clamp(max=7.0), u.clamp(-7.0, 7.0)
        return g * torch.sigmoid(1.702 * g) * (u + 1.0)
    return F.silu(g) * u


def moe(x, ids, wts, w1, w2, slot, e_local, act, n):
    """The naive PyTorch MoE: a loop over the experts that got routes."""
    flat = ids.flatten()
    order = flat.argsort()
    counts = torch.bincount(flat, minlength=e_local)[:e_local].tolist()  # the host sync
    wflat = wts.flatten()
    out = torch.zeros_like(x)
    start = 0
    for e, cnt in enumerate(counts):  # local ids sort first: global ids below E are local
        if not cnt:
            continue
        r = order[start:start + cnt]
        start += cnt
        tok = r // ids.shape[1]
        a = activation(act, x[tok] @ w1[slot[e]].t(), n)
        out.index_add_(0, tok, (a @ w2[slot[e]].t()) * wflat[r, None])
    return out




def main():
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(0)
    ident = run_identity(gpu)
    rows, peer = [], "torch bf16 per-expert"
    print(f"GPU {gpu}, torch {torch.__version__}\n")
    print("| op | case | peer | us | figure |\n|---|---|---|---|---|")
    for label, toks in bench_cases("ops/moe/cases.c", "B"):
        c = {f: int(t) if re.fullmatch(r"-?\d+", t) else t for f, t in zip(FIELDS, toks)}
        op = "moe.ep_moe" if c["ep"] else "moe.fused_moe"
        if c["routing"] != 0 or c["on_input"]:
            print(f"{op} [{label}] {peer}: skipped: routing in the op / weight on input: not modelled", flush=True)
            continue
        e, eg, k, n, topk, m = c["e"], c["eg"] or c["e"], c["k"], c["n"], c["topk"], c["m"]
        amount, metric = cost(c)
        bf = dict(device="cuda", dtype=torch.bfloat16)
        try:
            ids = torch.rand(m, eg, device="cuda").topk(topk, dim=1).indices  # topk distinct, uniform
            wts = (0.1 + 0.9 * torch.rand(m, topk, device="cuda")).to(torch.bfloat16)
            x = torch.randn(m, k, **bf)
            rows1 = n if c["act"] == "RELU2" else 2 * n
            held = list(range(e))
            if e * (rows1 + n) * k * 2 > MAX_WEIGHT_BYTES:  # only the experts the routes touch
                held = sorted(i for i in set(ids.flatten().tolist()) if i < e)
            slot = {x_: i for i, x_ in enumerate(held)}
            w1 = torch.empty(len(held), rows1, k, **bf).normal_(0, 0.02)
            w2 = torch.empty(len(held), k, n, **bf).normal_(0, 0.02)
            note = "" if len(held) == e else f" ({len(held)} of {e} experts' weights held)"
            fn = lambda: moe(x, ids, wts, w1, w2, slot, e, c["act"], n)
            fn()
            torch.cuda.synchronize()
            us = triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3
            row = {"op": op, "case": label, "peer": peer, "peer_us": us, "peer_value": amount / (us * 1e-6),
                   "metric": metric, **ident}
            rows.append(row)
            print(f"| {op} | {label} | {peer}{note} | {us:.2f} | {row['peer_value']:.1f} {metric} |", flush=True)
        except Exception as ex:
            text = str(ex).strip()
            print(f"{op} [{label}] {peer}: failed: {type(ex).__name__}: {text.splitlines()[0] if text else ''}", flush=True)
        x = ids = wts = w1 = w2 = fn = None
        torch.cuda.empty_cache()
    print(f"\n{len(rows)} peer rows in {time.time() - START:.0f} s")
    save(rows)


if __name__ == "__main__":
    main()
