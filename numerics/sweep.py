"""Resumable parameter sweeps: local processes by default, a Dask cluster on request.

Each finished point is stored atomically as one JSON file in a state folder next to the output
(``OUT.partial/``); a sweep started again skips the points already there, so an interrupted run
resumes where it stopped. The final table is a tidy CSV, one row per point: parameters, results,
error, method and convergence status. With ``scheduler=ADDRESS`` the same tasks are submitted to
Dask's distributed scheduler (``pip install 'aim-sym[dask]'``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as cf_as_completed

from .records import atomic_write


def grid(**axes) -> list[dict]:
    """Cartesian product of named axes (each a list of values) as a list of dicts."""
    names = list(axes)
    return [dict(zip(names, vals)) for vals in itertools.product(*(axes[n] for n in names))]


def point_key(point: dict) -> str:
    return hashlib.sha256(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]


def _safe(task: Callable[[dict], dict], point: dict) -> dict:
    try:
        row = task(point)
        return {**point, **row, "status": row.get("status", "converged")}
    except Exception as e:  # a failed point is a row with its error, not a lost sweep
        return {**point, "status": f"failed: {type(e).__name__}: {e}",
                "traceback": traceback.format_exc(limit=3)}


def run_sweep(task: Callable[[dict], dict], points: list[dict], *, out: str,
              workers: int | None = None, scheduler: str | None = None,
              progress: Callable[[int, int, str], None] | None = None) -> list[dict]:
    """Run ``task`` (a picklable top-level function) on every point; resumable; tidy CSV."""
    state = out + ".partial"
    os.makedirs(state, exist_ok=True)
    done: dict[str, dict] = {}
    for p in points:
        f = os.path.join(state, point_key(p) + ".json")
        if os.path.exists(f):
            with open(f) as fh:
                done[point_key(p)] = json.load(fh)
    todo = [p for p in points if point_key(p) not in done]
    total, count = len(points), len(done)
    if progress and done:
        progress(count, total, f"resuming: {count} points already done")

    def record(row: dict, p: dict) -> None:
        nonlocal count
        atomic_write(os.path.join(state, point_key(p) + ".json"), json.dumps(row))
        done[point_key(p)] = row
        count += 1
        if progress:
            progress(count, total, f"{p} -> {row.get('status')}")

    if todo:
        if scheduler:
            try:
                from distributed import Client
                from distributed import as_completed as dask_as_completed
            except ImportError as e:
                raise RuntimeError("--scheduler needs Dask: pip install 'aim-sym[dask]'") from e
            with Client(scheduler) as client:
                futs = {client.submit(_safe, task, p, pure=False): i for i, p in enumerate(todo)}
                for fut in dask_as_completed(list(futs)):
                    record(fut.result(), todo[futs[fut]])
        elif (workers or os.cpu_count() or 1) == 1 or len(todo) == 1:
            for p in todo:
                record(_safe(task, p), p)
        else:
            with ProcessPoolExecutor(max_workers=workers or os.cpu_count()) as ex:
                futs = {ex.submit(_safe, task, p): i for i, p in enumerate(todo)}
                for fut in cf_as_completed(futs):
                    record(fut.result(), todo[futs[fut]])
    rows = [done[point_key(p)] for p in points]
    write_csv(out, rows)
    return rows


def write_csv(path: str, rows: list[dict]) -> None:
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols and k != "traceback":
                cols.append(k)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    atomic_write(path, buf.getvalue())


# ----------------------------------------------------------------------------- AIM task
def aim_point(point: dict) -> dict:
    """One AIM SE point: keys channel, tokens, rho, alpha (and beta, epsilon, delta_out)."""
    from aim_sym.channels import builtin
    from aim_sym.compiled import compile_channel

    from . import aim_se

    ch = builtin(point["channel"], int(point["tokens"]))
    params = {k: point[k] for k in ("beta", "epsilon", "Delta_out") if point.get(k) is not None}
    cc = compile_channel(ch, params)
    fps = aim_se.fixed_points(cc, alpha=float(point["alpha"]), rho=float(point["rho"]))
    bo = aim_se.bayes_optimal(fps)
    return {"q": bo.q, "q_hat": bo.q_hat, "mmse": bo.mmse, "phi": bo.phi, "error": bo.error,
            "n_fixed_points": len(fps), "method": "SE fixed points, two quadrature levels",
            "status": "converged"}


def smi_point(point: dict) -> dict:
    """One SMI deep-attention SE point: keys alpha, skip, beta, layers, tokens."""
    from . import smi

    res = smi.fixed_point(alpha=float(point["alpha"]), layers=int(point["layers"]),
                          tokens=int(point["tokens"]), skip=float(point["skip"]),
                          beta=float(point["beta"]))
    row = {}
    for k, v in res.items():
        if isinstance(v, (list, tuple)):
            row.update({f"{k}_{i + 1}{i + 1}": x for i, x in enumerate(v)})
        elif isinstance(v, (int, float, str, bool)) or v is None:
            row[k] = v
    row.setdefault("method", "SMI SE on the branch Q = diag(0, q2) (numerics.smi.fixed_point)")
    row["status"] = "converged"
    return row
