#!/usr/bin/env python3
"""Turn the JSON of bench_quant, bench_mhc and bench_runtime (which predate bench_ops' row format)
into bench/results.py rows: JSON lines with op, case, us, metric, value, roofline, gpu, date, commit.

    python3 bench/rows_of.py --gpu NAME --date YYYY-MM-DD --commit SHA FILE... > rows.jsonl

bench_quant rows become quantization.<op> "m=M k=K"; bench_mhc rows norm.mhc "<entry> H=H T=T"
(the "/2-launch" diagnostics are left out); bench_runtime rows op "runtime". "us" is the graph
replay time; "roofline" is the rate of a same-size device copy (`copy_graph_us`), so "% of
roofline" reads as "% of a same-size copy". Standard library only.
"""
import argparse
import json
import sys


def rows_of(doc):
    for r in doc.get("results", []):
        if "entry" in r and "h" in r:  # bench_mhc
            if "/" in r["entry"]:
                continue
            yield "norm.mhc", f"{r['entry']} H={r['h']} T={r['t']}", r
        elif r.get("op") in ("nvfp4", "mxfp8") and "m" in r:  # bench_quant
            yield f"quantization.{r['op']}", f"m={r['m']} k={r['k']}", r
        elif "name" in r and "unit" in r:  # bench_runtime
            yield "runtime", r["name"].strip(), r


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/rows_of.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--commit", required=True)
    a = ap.parse_args(argv)
    for path in a.files:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            print(f"rows_of.py: {path}: {e}", file=sys.stderr)
            return 2
        for op, case, r in rows_of(doc):
            row = {"op": op, "case": case, "gpu": a.gpu, "date": a.date, "commit": a.commit}
            if op == "runtime":
                row.update(metric=r["unit"] or "", value=r["value"])
                if r.get("goal"):
                    row["note"] = f"goal {r['goal']}" + (f": {r['verdict']}" if r.get("verdict") else "")
            else:
                g = r.get("graph_us") or r["us"]
                row.update(us=g, stream_us=r["us"], metric="GB/s", value=r["gbs"])
                if r.get("copy_graph_us"):
                    row["roofline"] = round(r["gbs"] * g / r["copy_graph_us"], 1)
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
