"""Finite-size ERM training (aim_sym.erm_gd_api.gd) against the ERM paper's Adam runs and the SE
(THEORY 3; issue 16, item 5), side by side.

Ours: L-BFGS to relative gradient norm ``--tol`` at dimension ``--dim``, ``--seeds`` independent
instances (teacher, data, initialisation, 10^4 test samples each); mean +- standard error over
instances. Theirs (reference/erm/GD/, kappa0 = 0.5, Delta = 0.5, T = 2): Adam, lr 0.1, stopped
when the total loss changes by less than 1e-7; mean +- std / sqrt(8) (their script trains 8
students; the files do not record the number, nor d: 100 or 200). The SE (``--se``) is
aim_sym.erm.ERM(...).state_evolution with its own quadrature error bar.

Each (lambda, alpha) point is one line of ``--jsonl`` (appended, so the grid can be run in
pieces); the table is printed from every line of that file. ``--extrapolate`` instead trains at
several ``--dims`` at one point and fits value = a + b / d (weighted least squares; the error
of a from the fit's covariance), the d -> infinity limit to set against the SE.

    OPENBLAS_NUM_THREADS=1 python benchmarks/erm_gd_vs_reference.py --lams 0.01 \\
        --alphas 0.099286,0.28,0.5 --dim 100 --seeds 8 --se --jsonl gd.jsonl
    python benchmarks/erm_gd_vs_reference.py --table --jsonl gd.jsonl
    python benchmarks/erm_gd_vs_reference.py --extrapolate --lams 0.01 --alphas 0.28 \\
        --dims 40,60,80,100 --seeds 8 --se --jsonl fs.jsonl

``--aim``: the AIM paper's comparison (reference/aim/GD_softmax_D=200_rho=0.5_T=2_averages=32
.csv: Adam, lr 0.1, 1000 steps, no weight decay, student width = teacher width rho = 0.5,
32 students averaged on the same data, 16 instances; theirs shown as mean +- std/sqrt(16)):
ours trains ``--students`` students to ``--tol`` per instance at ``--dim`` and averages their
S; the Bayes-optimal mmse is the project's SE (aim_sym.models.AIM, softmax, T = 2).

    python benchmarks/erm_gd_vs_reference.py --aim --alphas 0.0505,0.103,0.1471 --dim 50 \\
        --seeds 4 --students 8 --jsonl aim.jsonl
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: shared cores thrash
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from aim_sym.erm_gd_api import gd, gd_averaged  # noqa: E402

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "tests" / "data" / "erm_gd"
THEIR_INSTANCES = 8
SHOWN = ("test", "test_clean", "train", "mse", "rank")


def reference_row(folder: Path, lam: float, alpha: float) -> dict | None:
    """The row of GD_kappa_0.5_lreg_<lam>_noise_0.5.csv at ``alpha`` (within 1e-5), or None."""
    name = f"GD_kappa_0.5_lreg_{lam:g}_noise_0.5.csv"
    path = folder / name
    if not path.exists():
        return None
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if abs(float(row["alpha"]) - alpha) < 1e-5:
                s = math.sqrt(THEIR_INSTANCES)
                return {"test": float(row["test_error_mean"]),
                        "test_error": float(row["test_err_std"]) / s,
                        "train": float(row["loss_mean"]), "train_error": float(row["loss_std"]) / s}
    return None


AIM_REFERENCE = "GD_softmax_D=200_rho=0.5_T=2_averages=32.csv"
AIM_INSTANCES = 16


def aim_reference_row(folder: Path, alpha: float) -> dict | None:
    """Their averaged-GD row at ``alpha`` (within 1% relative; their grid is logarithmic)."""
    path = folder / AIM_REFERENCE
    if not path.exists():
        return None
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if abs(float(row["alpha"]) / alpha - 1) < 0.01:
                return {"alpha": float(row["alpha"]), "mse": float(row["mmse"]),
                        "mse_error": float(row["mmse_std"]) / math.sqrt(AIM_INSTANCES)}
    return None


def aim_table(rows: list[dict], folder: Path) -> str:
    lines = [f"{'alpha':>8} {'d':>4} {'k':>3} | {'ours: mean of k S (SE)':>22} | "
             f"{'ours: one student':>18} | {'theirs d=200, k=32':>18} | {'Bayes mmse':>10}"]
    for r in rows:
        ref = aim_reference_row(folder, r["alpha"]) or {}
        lines.append(f"{r['alpha']:>8.4f} {r['dim']:>4d} {r['students']:>3d} | "
                     f"{_pm(r['mse'], r['mse_error']):>22} | "
                     f"{_pm(r['mse_single'], r['mse_single_error']):>18} | "
                     f"{_pm(ref.get('mse'), ref.get('mse_error')):>18} | {r['mmse']:>10.4f}")
    return "\n".join(lines)


def run_point(lam: float, alpha: float, *, dim: int, seeds: int, tol: float, se: bool,
              rng_seed: int) -> dict:
    t0 = time.perf_counter()
    table = gd(kappa0=0.5, delta=0.5, lam=lam, alpha=alpha, dim=dim, seeds=seeds, tol=tol,
               se=se, rng_seed=rng_seed)
    out = {"lam": lam, "alpha": alpha, "dim": dim, "seeds": seeds, "tol": tol,
           "time_s": time.perf_counter() - t0}
    for r in table:
        out[r.quantity] = r.value
        out[f"{r.quantity}_error"] = r.error
        out[f"{r.quantity}_opt"] = r.details["optimisation_error"]
        if se:
            out[f"{r.quantity}_se"] = r.details.get("se_value")
            out[f"{r.quantity}_se_error"] = r.details.get("se_error")
    first = table[0].details
    out.update(converged=first["converged"], iterations=list(first["iterations"]),
               lambda_zero=float(np.mean(first["lambda_zero"])))
    return out


def _pm(v, e) -> str:
    """value +- error, the value to the error's second significant digit."""
    if v is None:
        return "-"
    if not e:
        return f"{v:.5g}"
    digits = max(0, 1 - int(math.floor(math.log10(abs(e)))))
    return f"{v:.{digits}f} +- {e:.{digits}f}"


def table(rows: list[dict], folder: Path) -> str:
    lines = [f"{'lam':>7} {'alpha':>8} {'d':>4} {'qty':>5} | {'ours (mean +- SE)':>22} | "
             f"{'Adam ref (mean +- std/sqrt8)':>28} | {'SE (its error)':>22} | z(ours-SE)"]
    for r in rows:
        ref = reference_row(folder, r["lam"], r["alpha"]) or {}
        for q in SHOWN:
            ours = _pm(r[q], r[f"{q}_error"])
            theirs = _pm(ref.get(q), ref.get(f"{q}_error"))
            se_v, se_e = r.get(f"{q}_se"), r.get(f"{q}_se_error")
            z = "-"
            if se_v is not None and r[f"{q}_error"]:
                z = f"{(r[q] - se_v) / math.hypot(r[f'{q}_error'], se_e or 0.0):+.1f}"
            lines.append(f"{r['lam']:>7g} {r['alpha']:>8.4f} {r['dim']:>4d} {q:>5} | {ours:>22} | "
                         f"{theirs:>28} | {_pm(se_v, se_e):>22} | {z}")
    return "\n".join(lines)


def extrapolate(rows: list[dict], q: str) -> tuple[float, float, float]:
    """Weighted least squares value = a + b/d over the rows (one per d): a, its standard error,
    and the fit's chi^2 per degree of freedom."""
    d = np.array([r["dim"] for r in rows], float)
    y = np.array([r[q] for r in rows], float)
    s = np.array([r[f"{q}_error"] for r in rows], float)
    A = np.stack([np.ones_like(d), 1.0 / d], axis=1) / s[:, None]
    coef, *_ = np.linalg.lstsq(A, y / s, rcond=None)
    cov = np.linalg.inv(A.T @ A)
    chi2 = float(np.sum((A @ coef - y / s) ** 2)) / max(1, len(d) - 2)
    return float(coef[0]), float(math.sqrt(cov[0, 0])), chi2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lams", default="0.01")
    ap.add_argument("--alphas", default="0.28")
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--dims", default="40,60,80,100")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--rng-seed", type=int, default=0)
    ap.add_argument("--se", action="store_true", help="add the SE (aim_sym.erm)")
    ap.add_argument("--reference", default=str(FIXTURES),
                    help="folder of GD_kappa_0.5_lreg_*_noise_0.5.csv (default: the fixtures)")
    ap.add_argument("--jsonl", default="erm_gd_vs_reference.jsonl")
    ap.add_argument("--table", action="store_true", help="only print the table of --jsonl")
    ap.add_argument("--extrapolate", action="store_true")
    ap.add_argument("--aim", action="store_true", help="the AIM averaged-GD comparison")
    ap.add_argument("--students", type=int, default=8)
    args = ap.parse_args()
    folder = Path(args.reference)
    lams = [float(x) for x in args.lams.split(",")]
    alphas = [float(x) for x in args.alphas.split(",")]
    dims = [int(x) for x in args.dims.split(",")] if args.extrapolate else [args.dim]
    if args.aim:
        for alpha in alphas if not args.table else []:
            t0 = time.perf_counter()
            r = gd_averaged(rho=0.5, alpha=alpha, dim=args.dim, seeds=args.seeds,
                            students=args.students, tol=args.tol, rng_seed=args.rng_seed,
                            bayes=True)
            row = {"alpha": alpha, "dim": args.dim, "students": args.students,
                   "seeds": args.seeds, "mse": r.value, "mse_error": r.error,
                   "mse_single": r.details["mse_single"],
                   "mse_single_error": r.details["mse_single_error"],
                   "running": r.details["running"], "mmse": r.details["mmse"],
                   "converged": r.details["converged"], "time_s": time.perf_counter() - t0}
            with open(args.jsonl, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"alpha {alpha:g}: {row['time_s']:.1f} s", flush=True)
        print(aim_table([json.loads(line) for line in open(args.jsonl)], folder))
        return
    if not args.table:
        for lam in lams:
            for alpha in alphas:
                for dim in dims:
                    row = run_point(lam, alpha, dim=dim, seeds=args.seeds, tol=args.tol,
                                    se=args.se and dim == dims[-1], rng_seed=args.rng_seed)
                    with open(args.jsonl, "a") as fh:
                        fh.write(json.dumps(row) + "\n")
                    print(f"lam {lam:g} alpha {alpha:g} d {dim}: {row['time_s']:.1f} s, "
                          f"converged {row['converged']}", flush=True)
    rows = [json.loads(line) for line in open(args.jsonl)]
    by_point: dict = {}
    for r in rows:
        by_point.setdefault((r["lam"], r["alpha"]), []).append(r)
    print(table([r for r in rows], folder))
    for (lam, alpha), rs in by_point.items():
        if len({r["dim"] for r in rs}) >= 3:
            se_row = next((r for r in rs if r.get("test_se") is not None), {})
            print(f"\nd -> infinity, lam {lam:g}, alpha {alpha:g} (fit a + b/d over d = "
                  f"{sorted({r['dim'] for r in rs})}):")
            for q in SHOWN:
                a, ea, chi2 = extrapolate(rs, q)
                se_v, se_e = se_row.get(f"{q}_se"), se_row.get(f"{q}_se_error")
                print(f"  {q:>5}: {a:.4f} +- {ea:.4f} (chi2/dof {chi2:.2f})   SE {_pm(se_v, se_e)}")


if __name__ == "__main__":
    main()
