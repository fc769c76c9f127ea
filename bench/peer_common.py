"""What the torch peer scripts share (bench/peer_*_torch.py): the repository root, the bench cases
of a case table (ops/<group>/cases.c), the run's identity (GPU as bench_ops names it, UTC date,
commit) and the JSON bench/results.py reads. Standard library only: import it before torch."""
import datetime
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_cases(table, flag):
    """(label, [field tokens]) of the rows of ops/<table> whose flags name `flag`."""
    text = re.sub(r"/\*.*?\*/", "", open(os.path.join(ROOT, table), encoding="utf-8").read(), flags=re.S)
    for m in re.finditer(r'\{\s*"([^"]*)"\s*,([^{}]*)\}', text):
        toks = [t.strip() for t in m.group(2).split(",")]
        if flag in [f.strip() for f in toks[-1].split("|")]:
            yield m.group(1), toks[:-1]


def commit():
    """The checkout's short commit, else $SK_COMMIT (a device copy has no .git), else None."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip() or None
    except Exception:
        return os.environ.get("SK_COMMIT") or None


def run_identity(gpu):
    """Fields every peer row carries: gpu (cudaDeviceProp.name, as bench_ops writes it), date, commit."""
    ident = {"gpu": gpu, "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat()}
    sha = commit()
    if sha:
        ident["commit"] = sha
    return ident


def save(rows):
    """With SK_BENCH_JSON=FILE, write {"results": rows} for bench/results.py."""
    if os.environ.get("SK_BENCH_JSON"):
        with open(os.environ["SK_BENCH_JSON"], "w") as f:
            json.dump({"results": rows}, f, indent=1)
