"""Time to accuracy for the SMI sequential threshold (deep tied attention, L = 2, M = 2, c = 1,
beta = 1; THEORY 2.2): the lattice engine at each ``--digits`` against the plain Monte Carlo
estimate of the same threshold, side by side.

Engine: ``numerics.smi_sequential.sequential_threshold(digits=d, workers=W)``, wall and CPU time
of the whole root search (bracket, root order, coarse and refined orders), the error bar its own
(two-order spread + interpolation + Nishimori residual + cut bounds).

Monte Carlo: ``montecarlo_branch`` (tests/smi_mc_oracles.py) at the engine's q2* (seeded, 1/mu1 there, the
route that gave 0.695 +- 0.016 in benchmarks/RESULTS.md), timed at ``--mc-samples`` outer
samples; the samples (and time) for a standard error eps follow the 1/sqrt(n) law
n(eps) = n0 (se0/eps)^2 -- an extrapolation, stated as such; it ignores the O(1/inner) ratio
bias of the inner importance sampling, which does not shrink with n.  The Monte Carlo estimate is
also not a root search: it is evaluated at the engine's q2*, so its time is a lower bound.

    python benchmarks/smi_sequential_time_to_accuracy.py --digits 2 4 6 --workers 2 \\
        [--mc-samples 8000 --mc-inner 1600] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from aim_sym.numerics import smi_sequential

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def engine(digits: int, workers: int) -> dict:
    load0 = _load()
    w, c = time.perf_counter(), time.process_time()
    r = smi_sequential.sequential_threshold(digits=digits, workers=workers)
    wall = time.perf_counter() - w
    # CPU time of this process and of its finished worker processes
    ch = os.times()
    return dict(route="engine", digits=digits, value=r["value"], error=r["error"], q2=r["q2"],
                values=r["values"], root_value=r["root_value"],
                root_order=r["root_order"], spread=r["spread"], interpolation=r["interpolation"],
                nishimori=r["nishimori"][-1], cut=r["cut"], orders=r["orders"],
                pairs=r["pairs"], wall=wall, cpu_parent=time.process_time() - c,
                cpu_children_total=ch.children_user + ch.children_system,
                workers=workers, load_before=load0, load_after=_load())


def montecarlo(q2: float, samples: int, inner: int, seed: int, targets) -> dict:
    load0 = _load()
    w = time.perf_counter()
    mc = smi_mc_oracles.montecarlo_branch(q2, samples=samples, inner=inner, seed=seed)
    wall = time.perf_counter() - w
    a = 1.0 / mc["mu1"].value
    se = mc["mu1"].error * a * a
    extrap = {f"{eps:g}": dict(samples=samples * (se / eps) ** 2,
                               seconds=wall * (se / eps) ** 2) for eps in targets}
    return dict(route="montecarlo", q2=q2, samples=samples, inner=inner, seed=seed, value=a,
                error=se, resid=mc["resid"].value, resid_error=mc["resid"].error, wall=wall,
                extrapolated_1_over_sqrt_n=extrap, load_before=load0, load_after=_load())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--digits", type=int, nargs="+", default=[2, 4, 6])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--mc-samples", type=int, default=8000)
    ap.add_argument("--mc-inner", type=int, default=1600)
    ap.add_argument("--mc-seed", type=int, default=5)
    ap.add_argument("--no-mc", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = []
    for d in a.digits:
        rows.append(engine(d, a.workers))
        print(json.dumps(rows[-1]), flush=True)
    if not a.no_mc and rows:
        best = min(rows, key=lambda r: r["error"])
        targets = sorted({1e-3} | {r["error"] for r in rows})
        rows.append(montecarlo(best["q2"], a.mc_samples, a.mc_inner, a.mc_seed, targets))
        print(json.dumps(rows[-1]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
