"""Peer for bench_ops's attention cases: every BENCH case of ops/attention/cases.c (read from that
file, so the two stay in step), timed through PyTorch on the same GPU and shapes.

Peers: torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION) ("SDPA
flash") and under sdpa_kernel(CUDNN_ATTENTION) ("SDPA cuDNN"), and for prefill / extend cases
torch.compile(flex_attention) with a causal block mask ("FlexAttention"). The peers get the easier
layout: each request's K/V contiguous, [B, H, S, D] (no page table). GQA through enable_gqa=True;
where a backend refuses it, K/V heads are expanded outside the timed region and the peer's name
says "KV expanded". Where a peer cannot do what the case asks, it runs the nearest problem and its
name says so: "bf16 KV" for the FP8-KV cases (no FP8 KV in SDPA), "no sinks" for attention sinks,
"window as KV slice" for a decode sliding window (the query's last window_left + 1 keys).

The figure is the case's own cost model (cases.c's cost(): bytes for decode, GB/s; causal FLOPs
otherwise, TFLOP/s) over the peer's time, so peer figure over ours is our time over the peer's
(for an FP8 case that is the FP8 byte count). Times: triton.testing.do_bench median (warmup 10 ms,
rep 50 ms). A peer that fails prints why and the script goes on. Prints a Markdown table; with
SK_BENCH_JSON=FILE also writes {"results": rows} that bench/results.py joins to bench_ops's rows
by (op, case, gpu)."""
import time
import warnings

import torch
import torch.nn.functional as F
import triton.testing

from peer_common import bench_cases, run_identity, save
from torch.nn.attention import SDPBackend, sdpa_kernel

FIELDS = ["paged", "batch", "hq", "hkv", "dqk", "dvo", "fp16", "fp8", "page_size", "combined", "extra_pages",
          "scale_mode", "sinks", "window_left", "window_right", "q_len", "kv_len", "pattern"]
PATTERNS = {"PAT_EQUAL": 0, "PAT_SPREAD": 1, "PAT_ONE_LONG": 2}
FLEX_BUDGET_S = 75  # no FlexAttention compile starts after this many seconds of the script
START = time.time()
warnings.filterwarnings("ignore")
flex = None  # torch.compile(flex_attention), made on first use




def kv_len_of(c, b):  # cases.c's kv_len_of (C integer division)
    if c["pattern"] == 1:
        return c["kv_len"] // c["batch"] + (c["kv_len"] - c["kv_len"] // c["batch"]) * b // max(c["batch"] - 1, 1)
    if c["pattern"] == 2:
        return c["kv_len"] if b == c["batch"] // 2 else 1 + (b * 37) % 64
    return c["kv_len"]


def q_len_of(c, b):
    kv = kv_len_of(c, b)
    return min(c["q_len"], kv) if c["paged"] else kv


def cost(c):
    """cases.c's cost(): (the case's amount, metric) - bytes for decode, causal FLOPs otherwise."""
    nbytes = flops = 0.0
    for b in range(c["batch"]):
        kv, ql, wl = float(kv_len_of(c, b)), float(q_len_of(c, b)), c["window_left"]
        seen = sum(min(kv - ql + i + 1, wl + 1) if wl >= 0 else kv - ql + i + 1 for i in range(int(ql)))
        keys = min(kv, wl + ql) if wl >= 0 else kv
        nbytes += keys * c["hkv"] * (c["dqk"] + c["dvo"]) * (1 if c["fp8"] else 2) + ql * c["hq"] * (c["dqk"] + c["dvo"]) * 2
        flops += 2.0 * seen * c["hq"] * (c["dqk"] + c["dvo"])
    return (nbytes / 1e9, "GB/s") if c["q_len"] == 1 else (flops / 1e12, "TFLOP/s")


def timed(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median") * 1e3


def sdpa_us(backend, q, k, v, causal):
    """Microseconds of SDPA on `backend`, and whether K/V had to be expanded (no GQA there)."""
    with sdpa_kernel(backend):
        try:
            return timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)), False
        except RuntimeError:
            g = q.shape[1] // k.shape[1]
            ke, ve = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            return timed(lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)), True


def flex_us(q, k, v, shift, window_left):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    global flex
    if flex is None:
        flex = torch.compile(flex_attention, dynamic=False)

    def mask(b, h, qi, ki):
        keep = qi + shift >= ki
        return keep & (qi + shift - ki <= window_left) if window_left >= 0 else keep
    bm = create_block_mask(mask, None, None, q.shape[2], k.shape[2], device="cuda")
    return timed(lambda: flex(q, k, v, block_mask=bm, enable_gqa=True))


def why(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"




def main():
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(0)
    ident = run_identity(gpu)
    rows = []
    print(f"GPU {gpu}, torch {torch.__version__}\n")
    print("| op | case | peer | us | figure |\n|---|---|---|---|---|")
    for label, toks in bench_cases("ops/attention/cases.c", "BENCH"):
        c = {f: PATTERNS[t] if t in PATTERNS else int(t) for f, t in zip(FIELDS, toks)}
        op = "attention.paged" if c["paged"] else "attention.varlen"
        amount, metric = cost(c)

        def add(peer, us):
            row = {"op": op, "case": label, "peer": peer, "peer_us": us, "peer_value": amount / (us * 1e-6),
                   "metric": metric, **ident}
            rows.append(row)
            print(f"| {op} | {label} | {peer} | {us:.2f} | {row['peer_value']:.1f} {metric} |", flush=True)

        def skip(peer, reason):
            print(f"{op} [{label}] {peer}: skipped: {reason}", flush=True)

        if not c["paged"] and c["window_right"] != 0:
            skip("all peers", "not causal (window_right != 0): not modelled")
            continue
        lens = {(q_len_of(c, b), kv_len_of(c, b)) for b in range(c["batch"])}
        if len(lens) != 1:
            skip("all peers", "requests of different lengths (the peers take one [B, H, S, D] batch)")
            continue
        ql, kv = lens.pop()
        decode = c["q_len"] == 1
        notes = []
        if c["fp8"]:
            notes.append("bf16 KV")
        if c["sinks"]:
            notes.append("no sinks")
        keys = kv
        if c["window_left"] >= 0 and decode:
            keys = min(kv, c["window_left"] + 1)
            notes.append("window as KV slice")
        dt = torch.float16 if c["fp16"] else torch.bfloat16
        try:
            q = torch.randn(c["batch"], c["hq"], ql, c["dqk"], device="cuda", dtype=dt)
            k = torch.randn(c["batch"], c["hkv"], kv, c["dqk"], device="cuda", dtype=dt)
            v = torch.randn(c["batch"], c["hkv"], kv, c["dvo"], device="cuda", dtype=dt)
        except Exception as e:
            skip("all peers", why(e))
            continue
        ks, vs = k[:, :, kv - keys:], v[:, :, kv - keys:]
        sdpa_ok = decode or (ql == kv and (c["window_left"] < 0 or c["window_left"] >= kv))
        for base, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
            if not sdpa_ok:
                skip(base, "extend or windowed prefill: SDPA's is_causal is top-left aligned, no window")
                continue
            try:
                us, expanded = sdpa_us(backend, q, ks, vs, causal=not decode)
                n = notes + (["KV expanded"] if expanded else [])
                add(base + (f" ({', '.join(n)})" if n else ""), us)
            except Exception as e:
                skip(base, why(e))
        if not decode:
            if time.time() - START > FLEX_BUDGET_S:
                skip("FlexAttention", f"past the {FLEX_BUDGET_S} s budget for compiles")
            else:
                try:
                    n = [x for x in notes if x == "no sinks" or x == "bf16 KV"]
                    add("FlexAttention" + (f" ({', '.join(n)})" if n else ""), flex_us(q, k, v, kv - ql, c["window_left"]))
                except Exception as e:
                    skip("FlexAttention", why(e))
        del q, k, v, ks, vs
        torch.cuda.empty_cache()
    print(f"\n{len(rows)} peer rows in {time.time() - START:.0f} s")
    save(rows)


if __name__ == "__main__":
    main()
