"""Resumable parameter sweeps: one engine for every model; local processes by default, a Dask
cluster on request.

A *point* is a flat dict of every parameter that changes its result. The engine adds the task's
name and version, hashes the whole, and stores each finished point atomically as one JSON file
``<hash>.json`` in the state folder ``OUT.partial/`` (holding the full point and its row). A sweep
started again reuses a stored file only if its point equals the requested one, so a resume with
other parameters (another beta, another depth) computes the new points and never reports an old
result under new parameters; failed points are computed again. The rows come back in the order
of the requested points, exactly those; the presentation layer writes them as the tidy CSV
``OUT`` (:func:`aim_sym.tables.write_csv`; this API module does not import the presentation).

With ``scheduler=ADDRESS`` the same tasks go to Dask's distributed scheduler
(``pip install 'aim-sym[dask]'``). Task functions are top-level (picklable): :func:`aim_point`,
:func:`smi_point` and :func:`skip_point` (one skip strength c of the SMI phase diagram,
THEORY.md section 2.2).
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed as cf_as_completed

from .channels import builtin
from .compiled import compile_channel
from .domains import MAX_GRID
from .numerics import aim_se, smi, smi_fibre, smi_sequential
from .numerics.records import ConvergenceError, InputError, atomic_write, require
from .numerics.smi_sequential import SEQ_DIGITS

MAX_POINTS = MAX_GRID  # one bound on grid sizes, declared with the domains
"""The largest sweep accepted (points), so that a typo in a grid does not start a week of work."""

STATE_SUFFIX = ".partial"

Progress = Callable[[int, int, str], None]


class SweepStateError(InputError):
    """A damaged file in a sweep's state folder; the message names it and says to delete it."""


# ----------------------------------------------------------------------------- grids and keys
def grid(**axes) -> list[dict]:
    """Cartesian product of named axes (each a list of values) as a list of dicts, the last
    axis varying fastest; :class:`InputError` beyond :data:`MAX_POINTS` points."""
    names = list(axes)
    size = math.prod(len(axes[n]) for n in names)
    if size > MAX_POINTS:
        shape = " x ".join(f"{len(axes[n])} {n}" for n in names)
        raise InputError(f"grid must have at most {MAX_POINTS} points; got {size} ({shape})")
    return [dict(zip(names, vals)) for vals in itertools.product(*(axes[n] for n in names))]


def sweep_task(*, name: str, version: str) -> Callable:
    """Decorator naming a task and its version; both enter every point's key, so that a change
    of the task's results (a new version) recomputes the stored points."""

    def mark(f):
        f.task_name, f.task_version = name, version
        return f

    return mark


def task_identity(task: Callable) -> dict:
    """The task's name and version as they enter the key of a point."""
    return {"task": getattr(task, "task_name", getattr(task, "__qualname__", repr(task))),
            "task_version": str(getattr(task, "task_version", "0"))}


def _plain(x):
    """JSON fallback for numpy scalars and other number types."""
    if hasattr(x, "item"):
        return x.item()
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def _canonical(d: dict) -> dict:
    return json.loads(json.dumps(d, default=_plain))


def point_key(key: dict) -> str:
    """The state file name (without ``.json``) of a full key (task identity + point)."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def state_folder(out: str) -> str:
    return out + STATE_SUFFIX


def _damaged(path: str, why: str) -> SweepStateError:
    return SweepStateError(f"sweep state file {path!r} is damaged ({why}); delete it to recompute "
                           "that point")


def _load(path: str, key: dict) -> dict | None:
    """The stored row of ``key`` in ``path``: None if absent, stored for other parameters, or
    failed (recomputed); :class:`SweepStateError` if the file is damaged."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise _damaged(path, f"unreadable: {getattr(e, 'strerror', None) or e}") from None
    if not text.strip():
        raise _damaged(path, "empty")
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise _damaged(path, f"invalid JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("row"), dict):
        raise _damaged(path, "not an object with a point and a row")
    if obj.get("point") != key:
        return None
    row = obj["row"]
    if str(row.get("status", "")).startswith("failed"):
        return None
    return row


# ----------------------------------------------------------------------------- execution
def _safe(task: Callable[[dict], dict], point: dict) -> tuple[dict, str | None]:
    """(row, traceback or None): a failed point is a row with its error, not a lost sweep."""
    try:
        row = task(point)
        return {**point, **row, "status": row.get("status", "converged")}, None
    except Exception as e:
        msg = " ".join(str(e).split())
        return ({**point, "status": f"failed: {type(e).__name__}: {msg}"},
                traceback.format_exc(limit=5))


PR_SET_PDEATHSIG = 1


def _worker_init(parent_pid: int, check_parent: bool) -> None:
    """Pool initializer: on Linux ask the kernel for SIGTERM when the parent dies (so workers do
    not outlive a killed sweep), and exit at once if the parent is already gone.  The pool's
    processes already fill the cores: each runs the L = 2 sequential lattice in one process
    (:data:`aim_sym.numerics.smi_sequential.DEFAULT_WORKERS`), not two."""
    smi_sequential.DEFAULT_WORKERS = 1
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: best effort only
            pass
    if check_parent and os.getppid() != parent_pid:
        os._exit(1)


def _executor(workers: int) -> ProcessPoolExecutor:
    ctx = multiprocessing.get_context()
    # under forkserver the workers' parent is the server, not this process
    check = ctx.get_start_method() in ("fork", "spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(), check))


def _describe(point: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in point.items())


def run_sweep(task: Callable[[dict], dict], points: list[dict], *, out: str,
              workers: int | None = None, scheduler: str | None = None,
              progress: Progress | None = None) -> list[dict]:
    """Run ``task`` (a picklable top-level function) on every point, resumably, keeping the state
    in ``out + '.partial/'`` (see the module docstring); return one row per point (the point's
    parameters, then the task's columns and ``status``), in the order of ``points``.

    ``workers``: local processes (default: all cores; 1 runs in this process); ``scheduler``: a
    Dask scheduler address instead; ``progress(done, total, message)`` after every point."""
    require(len(points) <= MAX_POINTS, "points", f"at most {MAX_POINTS} per sweep", len(points))
    require(workers is None or (isinstance(workers, int) and 1 <= workers <= 256), "workers",
            "an integer in 1..256", workers)
    ident = task_identity(task)
    points = [_canonical(p) for p in points]
    keys = [_canonical({**ident, **p}) for p in points]
    names = [point_key(k) for k in keys]
    state = state_folder(out)
    try:
        os.makedirs(state, exist_ok=True)
    except OSError as e:
        raise InputError(f"out must be a path where the state folder {state!r} can be created; "
                         f"got {out!r} ({e.strerror or e})") from None
    done: dict[str, dict] = {}
    for n, k in zip(names, keys):
        if n not in done:
            row = _load(os.path.join(state, n + ".json"), k)
            if row is not None:
                done[n] = row
    todo: dict[str, int] = {}
    for i, n in enumerate(names):
        if n not in done and n not in todo:
            todo[n] = i
    total, count = len(done) + len(todo), len(done)
    if progress and done:
        progress(count, total, f"resuming: {count} points already done")

    def record(n: str, result: tuple[dict, str | None]) -> None:
        nonlocal count
        row, tb = result
        obj = {"point": keys[todo[n]], "row": row}
        if tb:
            obj["traceback"] = tb
        atomic_write(os.path.join(state, n + ".json"), json.dumps(obj, default=_plain))
        done[n] = row
        count += 1
        if progress:
            progress(count, total, f"{_describe(points[todo[n]])} -> {row.get('status')}")

    if todo:
        if scheduler:
            _run_dask(task, points, todo, scheduler, record)
        elif (workers or os.cpu_count() or 1) == 1 or len(todo) == 1:
            for n, i in todo.items():
                record(n, _safe(task, points[i]))
        else:
            with _executor(min(workers or os.cpu_count() or 1, len(todo))) as ex:
                futs = {ex.submit(_safe, task, points[i]): n for n, i in todo.items()}
                try:
                    for fut in cf_as_completed(futs):
                        record(futs[fut], fut.result())
                except BaseException:
                    ex.shutdown(wait=False, cancel_futures=True)
                    raise
    return [done[n] for n in names]


def _run_dask(task, points, todo, scheduler, record) -> None:
    try:
        from distributed import Client
        from distributed import as_completed as dask_as_completed
    except ImportError:
        raise InputError("scheduler needs Dask: pip install 'aim-sym[dask]'; got "
                         f"{scheduler!r}") from None
    with Client(scheduler) as client:
        futs = {client.submit(_safe, task, points[i], pure=False): n for n, i in todo.items()}
        for fut in dask_as_completed(list(futs)):
            record(futs[fut], fut.result())


def failed(rows: list[dict]) -> int:
    """How many rows of a sweep failed (status "failed: ...")."""
    return sum(str(r.get("status", "")).startswith("failed") for r in rows)


# ----------------------------------------------------------------------------- AIM task
@sweep_task(name="aim_point", version="1")
def aim_point(point: dict) -> dict:
    """One AIM SE point: keys channel, tokens, rho, alpha; optional beta (softmax), epsilon
    (noisy-hardmax), delta_out (linear-noisy)."""
    ch = builtin(point["channel"], int(point["tokens"]))
    params = {name: point[k] for k, name in (("beta", "beta"), ("epsilon", "epsilon"),
                                               ("delta_out", "Delta_out"))
              if point.get(k) is not None}
    cc = compile_channel(ch, params)
    fps = aim_se.fixed_points(cc, alpha=float(point["alpha"]), rho=float(point["rho"]))
    bo = aim_se.bayes_optimal(fps)
    return {"q": bo.q, "q_hat": bo.q_hat, "mmse": bo.mmse, "phi": bo.phi, "error": bo.error,
            "n_fixed_points": len(fps), "method": "SE fixed points, two quadrature levels",
            "status": "converged"}


# ----------------------------------------------------------------------------- SMI tasks
@sweep_task(name="smi_point", version="2")  # 2: small-c rules (issue 14)
def smi_point(point: dict) -> dict:
    """One SMI deep-attention SE point: keys alpha, skip, beta, layers, tokens."""
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


SKIP_LAYERS = (2, 3, 4, 5, 6)
"""Depths of the skip sweep: L = 2 by numerics.smi (weak and sequential), L = 3, 4, 5 by the
depth-L weak-threshold kernel numerics.smi_weak (weak thresholds only; its own check sets the
validated skip range per depth)."""

SKIP_COLUMNS = ("skip", "weak_layer2", "weak_layer2_error", "weak_layer1", "weak_layer1_error",
                "sequential_layer1", "sequential_layer1_error", "sequential_q2", "seconds",
                "status")
"""CSV columns of the L = 2 skip sweep."""


def skip_columns(layers: int) -> tuple[str, ...]:
    """CSV columns of :func:`sweep_skip`: :data:`SKIP_COLUMNS` for L = 2; for L >= 3 the weak
    thresholds of every layer (the sweep's sequential thresholds are the L = 2 lattice's)."""
    if layers == 2:
        return SKIP_COLUMNS
    weak = [k for l in range(layers, 0, -1) for k in (f"weak_layer{l}", f"weak_layer{l}_error")]
    return ("skip", *weak, "seconds", "status")


@sweep_task(name="skip_point", version="3")  # 2: small-c rules and floors; 3: L = 3 by smi_weak
def skip_point(point: dict) -> dict:
    """One skip strength c of the SMI phase diagram (THEORY.md 2.2): keys layers, tokens, skip,
    beta, sequential (and digits of the sequential threshold). The weak thresholds of every
    layer and, for L = 2 unless sequential is false, the sequential threshold of layer 1; NaN
    where not computed; status "ok", "skipped sequential", "ok (weak only: ...)" or
    "failed: ..." (a ConvergenceError, kept as a row)."""
    layers, tokens = int(point["layers"]), int(point["tokens"])
    c, beta = float(point["skip"]), float(point["beta"])
    sequential = bool(point.get("sequential", False)) and layers == 2
    below_floor = sequential and c < smi_fibre.SKIP_FLOORS["sequential"]
    sequential = sequential and not below_floor
    row: dict = dict.fromkeys(skip_columns(layers), math.nan)
    row["skip"] = c
    t = time.perf_counter()
    try:
        if layers == 2:
            kw = {"digits": int(point["digits"])} if sequential and "digits" in point else {}
            res = smi.weak_thresholds(layers=layers, tokens=tokens, skip=c, beta=beta,
                                      sequential=sequential, **kw)
        else:   # imported here: scipy.stats would slow the start of every sweep worker
            from .numerics import smi_weak

            res = smi_weak.weak_thresholds(layers=layers, tokens=tokens, skip=c, beta=beta)
        for d in res:
            key = f"{d['kind']}_layer{d['layer']}"
            row[key], row[key + "_error"] = float(d["value"]), float(d["error"])
            if d["kind"] == "sequential":
                row["sequential_q2"] = float(d["q2"])
        row["status"] = (
            "ok" if sequential
            else "ok (weak only: the sequential threshold is validated for skip >= "
            f"{smi_fibre.SKIP_FLOORS['sequential']:g})" if below_floor
            else "skipped sequential" if layers == 2
            else f"ok (weak only: sequential thresholds need L = 2, not {layers})")
        notes = [d["note"] for d in res if d.get("note")]
        if notes:
            row["status"] += "; " + "; ".join(notes)
    except ConvergenceError as e:  # keep the point, say why; retried on resume
        row["status"] = f"failed: {e}"
    row["seconds"] = time.perf_counter() - t
    return row


def check_skip_sweep(*, skips, layers: int, tokens: int, beta: float) -> list[float]:
    """The skip strengths as floats, after checking every parameter (:class:`InputError`)."""
    try:
        cs = [float(c) for c in skips]
    except (TypeError, ValueError):
        raise InputError(f"skips must be a list of numbers c > 0; got {skips!r}") from None
    require(len(cs) > 0, "skips", "a non-empty list of c > 0", skips)
    require(len(cs) <= MAX_POINTS, "skips", f"at most {MAX_POINTS} values", len(cs))
    require(isinstance(layers, int) and layers in SKIP_LAYERS, "layers", f"one of {SKIP_LAYERS}",
            layers)
    require(isinstance(tokens, int) and tokens == 2, "tokens", "2", tokens)
    require(isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0, "beta",
            "finite and > 0", beta)
    for c in cs:
        require(math.isfinite(c) and c > 0, "skip", "finite and > 0 (det A = c (1 + c) must not "
                "vanish)", c)
        if layers == 2:
            smi.check_weak_skip(c)
        else:
            from .numerics import smi_weak

            smi_weak.check(layers=layers, tokens=tokens, skip=c, beta=float(beta))
    return cs


def sweep_skip(*, skips, layers: int = 2, tokens: int = 2, beta: float = 1.0, out: str,
               progress: Progress | None = None, sequential: bool = True, digits: int = 4,
               workers: int | None = 1, scheduler: str | None = None) -> list[dict]:
    """Thresholds against the skip strength c (THEORY.md 2.2) on :func:`run_sweep`: one row per
    c with exactly the columns :func:`skip_columns` (in that order), sorted by c; resumable
    (state in ``out + '.partial/'``; the caller writes the rows to ``out``, e.g. with
    :func:`aim_sym.tables.write_csv`). ``sequential`` applies to L = 2 only; ``digits``: accuracy
    asked of the sequential threshold."""
    cs = sorted(check_skip_sweep(skips=skips, layers=layers, tokens=tokens, beta=beta))
    seq = bool(sequential) and layers == 2
    if seq:
        require(digits in SEQ_DIGITS, "digits", f"an integer in {min(SEQ_DIGITS)}..{max(SEQ_DIGITS)}",
                digits)
    base: dict = {"layers": layers, "tokens": tokens, "beta": float(beta), "sequential": seq}
    if seq:
        base["digits"] = int(digits)
    points = [{**base, "skip": c} for c in cs]
    columns = list(skip_columns(layers))
    rows = run_sweep(skip_point, points, out=out, workers=workers, scheduler=scheduler,
                     progress=progress)
    return [{k: r.get(k, math.nan) for k in columns} for r in rows]


__all__ = ["MAX_POINTS", "SKIP_COLUMNS", "SKIP_LAYERS", "SweepStateError", "aim_point", "check_skip_sweep",
           "failed", "grid", "point_key", "run_sweep", "skip_columns", "skip_point", "smi_point",
           "state_folder", "sweep_skip", "sweep_task", "task_identity"]
