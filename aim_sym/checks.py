"""Identity checks that any channel gets for free (THEORY 1.2 and 4).

1. g_out against finite differences of log Z_out, and dg_out against finite differences of
   g_out, in mpmath at 50 digits;
2. the Nishimori identity pointwise in omega: sum_y [g g^T + dg/domega] Z_out = 0
   (discrete: finite sum at 50 digits; Gaussian: E_y[g g^T] + dg = 0 symbolically);
3. free-entropy stationarity: 4 alpha dPsi_out/dq reproduces q_hat (symbolic for Gaussian
   channels, numeric for discrete ones);
4. closed forms of THEORY 1.2 where they apply (linear and softmax q_hat).

Each check returns a record {name, passed, detail, value, tolerance}. An API-layer module
(docs/api.md, "Layers"): check 3 runs the numeric output quadrature.
"""

from __future__ import annotations

import random

import mpmath
import sympy as sp

from .channels import Channel, GaussianChannel
from .codegen import compile_expr
from .compiled import compile_channel, substitute_params
from .numerics.aim_se import output_moments
from .output import derive, stationarity_residual
from .symbols import V, weight_matrix

DPS = 50


def _record(name: str, value, tol: float, detail: str) -> dict:
    v = float(value)
    return {"name": name, "passed": bool(v <= tol), "value": v, "tolerance": tol, "detail": detail}


def _points(ch: Channel, n: int, seed: int):
    rng = random.Random(seed)
    d = derive(ch)
    pts = []
    for _ in range(n):
        om = [mpmath.mpf(rng.uniform(-1.2, 1.2)) for _ in d.omega]
        v = mpmath.mpf(rng.uniform(0.3, 1.5))
        ys = [mpmath.mpf(rng.uniform(-1.5, 1.5)) for _ in d.y]
        pts.append((om, v, ys))
    return pts


def _fns(ch: Channel, params: dict):
    """(labels, [(logZ, g, dg) compiled to mpmath in (omega, V, y)])."""
    d = derive(ch)
    args = list(d.omega) + [V] + list(d.y)
    sub = lambda e: substitute_params(e, ch, params)  # noqa: E731
    if d.discrete:
        items = zip(d.log_Z_out, d.g_out, d.dg_out, d.Z_out)
    else:
        items = [(d.log_Z_out, d.g_out, d.dg_out, d.Z_out)]
    out = []
    for lz, g, dg, Z in items:
        out.append(tuple(compile_expr(sub(e), args, backend="mpmath") for e in (lz, g, dg, Z)))
    return d, out


def check_gradients(ch: Channel, *, params: dict | None = None, n: int = 2, seed: int = 0):
    """g_out vs d log Z_out / d omega and dg_out vs d g_out / d omega by finite differences."""
    params = params or {}
    d, fns = _fns(ch, params)
    k = len(d.omega)
    worst_g = worst_dg = mpmath.mpf(0)
    with mpmath.workdps(DPS + 20):
        h = mpmath.mpf(10) ** -12
        for om, v, ys in _points(ch, n, seed):
            for lz, g, dg, Z in fns:
                if Z(*om, v, *ys) <= mpmath.mpf(10) ** -30:
                    continue
                gv = g(*om, v, *ys)
                dgv = dg(*om, v, *ys)
                for i in range(k):
                    def at(t, f, i=i, om=om, v=v, ys=ys):
                        o = list(om)
                        o[i] += t
                        return f(*o, v, *ys)

                    # fourth-order central differences, truncation O(h^4) = 1e-48
                    fd = (-at(2 * h, lz) + 8 * at(h, lz) - 8 * at(-h, lz) + at(-2 * h, lz)) / (12 * h)
                    worst_g = max(worst_g, abs(fd - gv[i]) / (1 + abs(gv[i])))
                    fdg = (-at(2 * h, g) + 8 * at(h, g) - 8 * at(-h, g) + at(-2 * h, g)) / (12 * h)
                    for j in range(k):
                        worst_dg = max(worst_dg, abs(fdg[j] - dgv[j, i]) / (1 + abs(dgv[j, i])))
    tol = 1e-30
    return [
        _record("finite differences: g_out = d log Z_out/d omega", worst_g, tol,
                f"max relative deviation {mpmath.nstr(worst_g, 3)} (4th-order differences, h = 1e-12, "
                f"{DPS + 20} digits)"),
        _record("finite differences: dg_out = d g_out/d omega", worst_dg, tol,
                f"max relative deviation {mpmath.nstr(worst_dg, 3)} (4th-order differences of g_out)"),
    ]


def check_nishimori(ch: Channel, *, params: dict | None = None, n: int = 3, seed: int = 1):
    """sum_y [g g^T + dg/domega] Z_out = 0 pointwise in omega (THEORY 1.2)."""
    params = params or {}
    d = derive(ch)
    if isinstance(ch, GaussianChannel):
        A = sp.Matrix(ch.statistics)
        C = weight_matrix(ch.tokens)
        M = V * A * C * A.T + sp.Matrix(ch.noise)
        G = sp.Matrix(d.g_out).jacobian(d.y)
        resid = (G * M * G.T + sp.Matrix(d.dg_out)).applyfunc(sp.simplify)
        bad = [e for e in resid if e != 0]
        return [_record("Nishimori: E_y[g g^T] = -dg/domega (symbolic)", 0 if not bad else 1, 0.5,
                        "exact: E_y[g g^T] + dg/domega simplifies to 0" if not bad
                        else f"nonzero entries: {bad[:3]}")]
    _, fns = _fns(ch, params)
    k = len(d.omega)
    worst = mpmath.mpf(0)
    with mpmath.workdps(DPS):
        for om, v, _ in _points(ch, n, seed):
            acc = mpmath.zeros(k, k)
            for _, g, dg, Z in fns:
                z = Z(*om, v)
                if z == 0:
                    continue
                gv, dgv = g(*om, v), dg(*om, v)
                acc += (gv * gv.T + dgv) * z
            worst = max(worst, max(abs(x) for x in acc))
    return [_record("Nishimori: sum_y [g g^T + dg/domega] Z_out = 0 pointwise", worst, 1e-35,
                    f"max |entry| {mpmath.nstr(worst, 3)} over {n} random (omega, V), {DPS} digits")]


def check_stationarity(ch: Channel, *, params: dict | None = None):
    """4 alpha dPsi_out/dq = q_hat (Gaussian: symbolic; discrete: numeric)."""
    params = params or {}
    d = derive(ch)
    if not d.discrete:
        r = substitute_params(stationarity_residual(d), ch, params)
        ok = sp.simplify(r) == 0
        return [_record("free-entropy stationarity reproduces the SE map (symbolic)",
                        0 if ok else 1, 0.5,
                        "4 alpha dPsi_out/dq - q_hat simplifies to 0" if ok else f"residual {r}")]
    cc = compile_channel(ch, params)
    worst = 0.0
    Q0 = 1.5
    for qv in (0.3, 0.8, 1.2):
        h = 1e-3

        def psi(x):
            return output_moments(cc, q=x, V=Q0 - x, level=1)[1]

        # fourth-order central difference of Psi_out(q, Q0 - q) in q
        dpsi = (-psi(qv + 2 * h) + 8 * psi(qv + h) - 8 * psi(qv - h) + psi(qv - 2 * h)) / (12 * h)
        e = output_moments(cc, q=qv, V=Q0 - qv, level=1)[0]
        worst = max(worst, abs(2 * dpsi - e) / e)
    return [_record("free-entropy stationarity: 2 dPsi_out/dq = E[sum (1+delta) g^2] (numeric)",
                    worst, 1e-8, f"max relative deviation {worst:.2e} at q in (0.3, 0.8, 1.2), "
                    "Q0 = 1.5, 4th-order finite differences")]


def check_closed_forms(ch: Channel, *, params: dict | None = None):
    """THEORY 1.2: linear q_hat = T(T+1) alpha/V, softmax q_hat = (T^2+T-2) alpha/V."""
    d = derive(ch)
    T = ch.tokens
    expected = {"linear": sp.Rational(T * (T + 1), 2) / V,
                "softmax": sp.Rational(T * T + T - 2, 2) / V}.get(ch.name)
    if expected is None:
        return []
    ok = sp.simplify(d.E_g2 - expected) == 0
    return [_record(f"closed form: {ch.name} q_hat = 2 alpha * {expected}", 0 if ok else 1, 0.5,
                    f"derived E[sum (1+delta) g^2] = {d.E_g2}")]


def run_checks(ch: Channel, *, params: dict | None = None) -> list[dict]:
    """All identity checks that apply to the channel."""
    params = params or {}
    return (
        check_gradients(ch, params=params)
        + check_nishimori(ch, params=params)
        + check_stationarity(ch, params=params)
        + check_closed_forms(ch, params=params)
    )
