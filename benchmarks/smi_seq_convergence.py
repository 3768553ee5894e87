"""Convergence of the layer-2 branch statistics (mu1, K2, outer mass, Nishimori residual) of the
lattice engine (numerics.smi_sequential), one rule refined at a time, at a fixed q2.
Run: python benchmarks/smi_seq_convergence.py [q2] [workers] [spec ...]
spec = tau,dh,dz (omega rule step, h lattice spacing / sqrt(V), fibre lattice spacing)."""

import json
import sys
import time

from aim_sym.numerics import smi_sequential as S

q2 = float(sys.argv[1]) if len(sys.argv) > 1 else 0.974376
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 1
specs = sys.argv[3:] or ["0.3,1.9,0.2", "0.2,1.9,0.2", "0.3,1.5,0.2", "0.3,1.9,0.15"]
for spec in specs:
    tau, dh, dz = spec.split(",")
    t = time.perf_counter()
    r = S.branch_stats(q2, n_w=float(tau), dh=float(dh), dz=float(dz),
                       workers=workers)
    r["seconds"] = time.perf_counter() - t
    r["resid"] = r["mu1"] - (1 - q2) * r["K2"] / q2
    out = {k: (v if isinstance(v, dict) else float(v)) for k, v in r.items()}
    out["spec"] = spec
    print(json.dumps(out), flush=True)
