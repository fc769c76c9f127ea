"""Peer for bench_mhc: norm.mhc's three entry points written in PyTorch and compiled with
torch.compile, timed on the same GPU and sizes (H 2048/4096/7168, T 1/8/16/128/4096, bf16 norm
weight, 20 Sinkhorn rounds) with the same byte count (every input read once, every output written
once). The math is ops/norm/norm.mhc.md's; fp32 throughout, like the kernels. Prints a Markdown
table; with SK_BENCH_JSON=FILE also writes JSON. SK_BENCH_H / SK_BENCH_T filter rows."""
import ctypes
import json
import os

import torch

torch.manual_seed(0)
ITERS, RMS_EPS, HC_EPS, NORM_EPS = 20, 1e-6, 1e-6, 1e-6


def keep(var, v):
    s = os.environ.get(var, "")
    return not s or str(v) in s.split(",")


def mix_back(x, residual, post, comb):
    # out[t][j][h] = post[t][j] * x[t][h] + sum_i comb[t][i][j] * residual[t][i][h]
    out = post.unsqueeze(-1) * x.float().unsqueeze(1) + torch.einsum("tij,tih->tjh", comb, residual.float())
    return out.to(torch.bfloat16)


def pre_half(r, mix_raw, sum_sq, k, hc_scale, hc_base, weight):
    # r: the bf16 streams [T,4,H]; mix_raw: projection before the RMS [T,24]; sum_sq: sum of r^2
    inv_rms = torch.rsqrt(sum_sq / k + RMS_EPS)
    mix = mix_raw * inv_rms.unsqueeze(-1)
    pre = torch.sigmoid(mix[:, 0:4] * hc_scale[0] + hc_base[0:4]) + HC_EPS
    post = 2.0 * torch.sigmoid(mix[:, 4:8] * hc_scale[1] + hc_base[4:8])
    logits = (mix[:, 8:24] * hc_scale[2] + hc_base[8:24]).view(-1, 4, 4)
    c = torch.softmax(logits, dim=-1) + HC_EPS
    c = c / (c.sum(1, keepdim=True) + HC_EPS)
    for _ in range(ITERS - 1):
        c = c / (c.sum(2, keepdim=True) + HC_EPS)
        c = c / (c.sum(1, keepdim=True) + HC_EPS)
    y_raw = (pre.unsqueeze(-1) * r.float()).sum(1)
    norm_scale = torch.rsqrt(y_raw.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    y = (y_raw.to(torch.bfloat16).float() * norm_scale * weight.float()).to(torch.bfloat16)
    return post, c, y


def run_post(x, residual, post, comb):
    return mix_back(x, residual, post, comb)


def run_pre(x, fn_pre, hc_scale, hc_base, weight):
    t, h = x.shape
    xf = x.float()
    residual_out = x.unsqueeze(1).expand(t, 4, h).contiguous()
    mix_raw = xf @ fn_pre.t()
    post, comb, y = pre_half(residual_out, mix_raw, 4.0 * xf.pow(2).sum(-1), 4 * h, hc_scale, hc_base, weight)
    return residual_out, post, comb, y


def run_post_pre(x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, weight):
    t, h = x.shape
    residual_out = mix_back(x, residual, prev_post, prev_comb)
    rf = residual_out.float().view(t, 4 * h)
    mix_raw = rf @ fn.t()
    post, comb, y = pre_half(residual_out, mix_raw, rf.pow(2).sum(-1), 4 * h, hc_scale, hc_base, weight)
    return residual_out, post, comb, y


class RefConfig(ctypes.Structure):  # skref_mhc_config (ops/norm/ref_mhc.h)
    _fields_ = [("hidden", ctypes.c_int), ("rms_eps", ctypes.c_float), ("hc_eps", ctypes.c_float),
                ("sinkhorn_iters", ctypes.c_int), ("hc_scale", ctypes.c_void_p), ("hc_base", ctypes.c_void_p),
                ("norm_kind", ctypes.c_int), ("norm_weight", ctypes.c_void_p), ("norm_eps", ctypes.c_float)]


def check_against_reference(lib_path):
    """The peer must compute norm.mhc's function: compare it (fp32, CPU) with the library's double
    reference (ops/norm/ref_mhc.c, built as build/lib/libskref_mhc.so) on fresh random inputs."""
    ref = ctypes.CDLL(lib_path)
    t, h = 5, 512
    x = torch.randn(t, h, dtype=torch.bfloat16)
    residual = torch.randn(t, 4, h, dtype=torch.bfloat16)
    weight = torch.randn(h, dtype=torch.bfloat16)
    fn = torch.randn(24, 4 * h) * 0.02
    fn_pre = fn.view(24, 4, h).sum(1).contiguous()
    prev_post = torch.rand(t, 4) + 0.5
    prev_comb = torch.rand(t, 4, 4)
    hc_scale = torch.rand(3) + 0.5
    hc_base = torch.randn(24) * 0.1
    cfg = RefConfig(h, RMS_EPS, HC_EPS, ITERS, hc_scale.data_ptr(), hc_base.data_ptr(), 1,
                    weight.view(torch.int16).data_ptr(), NORM_EPS)
    ptr = lambda a: ctypes.c_void_p(a.data_ptr())
    post_r, comb_r, y_r = torch.zeros(t, 4, dtype=torch.float64), torch.zeros(t, 16, dtype=torch.float64), torch.zeros(
        t, h, dtype=torch.float64)
    res_r = torch.zeros(t, 4, h, dtype=torch.int16)
    worst = {}

    def compare(name, got_res, got_post, got_comb, got_y):
        res_ulp = (got_res.view(torch.int16).int() - res_r.int()).abs().max().item()
        post_err = ((got_post.double() - post_r).abs() / (post_r.abs() + 1e-6)).max().item()
        comb_err = ((got_comb.double().view(t, 16) - comb_r).abs() / (comb_r.abs() + 1e-6)).max().item()
        y_err = ((got_y.double() - y_r).abs() / (y_r.abs() + 1e-2)).max().item()
        worst[name] = (res_ulp, post_err, comb_err, y_err)
        return res_ulp <= 1 and post_err < 1e-4 and comb_err < 1e-4 and y_err < 2e-2  # y: bf16 (2^-8) + cancellation

    ref.skref_mhc_post_pre(ctypes.byref(cfg), t, ptr(x), ptr(residual), ptr(prev_post), ptr(prev_comb), ptr(fn), None,
                           ptr(res_r), ptr(post_r), ptr(comb_r), ptr(y_r), None)
    ok = compare("post_pre", *run_post_pre(x, residual, prev_post, prev_comb, fn, hc_scale, hc_base, weight))
    ref.skref_mhc_pre(ctypes.byref(cfg), t, ptr(x), ptr(fn_pre), ptr(res_r), ptr(post_r), ptr(comb_r), ptr(y_r), None)
    ok = compare("pre", *run_pre(x, fn_pre, hc_scale, hc_base, weight)) and ok
    for name, (r, p, c, y) in worst.items():
        print(f"peer check vs ops/norm/ref_mhc.c, {name}: residual_out max {r} ulp, post rel {p:.2e}, comb rel {c:.2e}, "
              f"y rel {y:.2e}: {'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    import triton.testing

    lib = os.path.join(os.environ.get("SK_BUILD", "build"), "lib", "libskref_mhc.so")
    if os.path.exists(lib) and not check_against_reference(lib):
        raise SystemExit("peer_mhc_torch: the peer does not compute norm.mhc's function; not timing it")

    post_c, pre_c, post_pre_c = torch.compile(run_post), torch.compile(run_pre), torch.compile(run_post_pre)
    rows = []
    print("| peer | entry | H | T | us | GB/s | % of 4300 |\n|---|---|---|---|---|---|---|")
    dev = "cuda"
    for h in (2048, 4096, 7168):
        for t in (1, 8, 16, 128, 4096):
            if not keep("SK_BENCH_H", h) or not keep("SK_BENCH_T", t):
                continue
            bf = dict(device=dev, dtype=torch.bfloat16)
            x = torch.randn(t, h, **bf)
            residual = torch.randn(t, 4, h, **bf)
            weight = torch.randn(h, **bf)
            fn = torch.randn(24, 4 * h, device=dev) * 0.01
            fn_pre = fn.view(24, 4, h).sum(1)
            post = torch.rand(t, 4, device=dev) + 0.5
            comb = torch.rand(t, 4, 4, device=dev)
            hc_scale = torch.rand(3, device=dev)
            hc_base = torch.randn(24, device=dev) * 0.1
            cases = (
                ("post", lambda: post_c(x, residual, post, comb), t * h * 2.0 + 2 * 4.0 * t * h * 2 + t * 80.0),
                ("pre", lambda: pre_c(x, fn_pre, hc_scale, hc_base, weight),
                 t * h * 2.0 + 24.0 * h * 4 + h * 2.0 + 4.0 * t * h * 2 + t * h * 2.0 + t * 80.0),
                ("post_pre", lambda: post_pre_c(x, residual, post, comb, fn, hc_scale, hc_base, weight),
                 t * h * 2.0 + 4.0 * t * h * 2 + 96.0 * h * 4 + h * 2.0 + 4.0 * t * h * 2 + t * h * 2.0 + t * 160.0),
            )
            for entry, fn_call, nbytes in cases:
                fn_call()
                torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn_call, warmup=25, rep=100, return_mode="median")
                gbs = nbytes / (ms * 1e-3) / 1e9
                print(f"| torch.compile | {entry} | {h} | {t} | {ms * 1e3:.2f} | {gbs:.0f} | {gbs / 43:.0f}% |", flush=True)
                rows.append({"peer": "torch.compile", "entry": entry, "h": h, "t": t, "us": ms * 1e3, "gbs": gbs})
    if os.environ.get("SK_BENCH_JSON"):
        json.dump({"results": rows}, open(os.environ["SK_BENCH_JSON"], "w"), indent=1)


if __name__ == "__main__":
    main()
