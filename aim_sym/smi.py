"""Deep tied attention as a sequence multi-index (SMI) channel, as sympy data (THEORY 2).

Conventions (THEORY 2): M tokens, P = L rows of pre-activations, one row per layer
(``P_l = 1``).  Row ``z_l`` is a vector over the M tokens.

    h^(1) = z_1,   A_l = softmax_rows(beta h^(l) h^(l)T) + c I_M,
    h^(l+1) = A_l ... A_1 z_{l+1},   y = softmax_rows(beta h^(L) h^(L)T).

For M = 2 a softmax row depends on one logit only.  With ``a = beta h_0 (h_0 - h_1)`` and
``b = beta h_1 (h_1 - h_0)``,

    softmax(beta h h^T) = [[s(a), 1 - s(a)], [1 - s(b), s(b)]],   s = logistic,

so ``log(y_00 / y_01) = a`` and ``log(y_11 / y_10) = b``.  Since ``a + b = beta (h_0 - h_1)^2``,
``y`` determines ``h`` up to a global sign (:func:`inversion`), except on the null set
``h_0 = h_1``.  ``det A = (1 + c)(s(a) + s(b) + c - 1) >= c (1 + c)`` because ``a + b >= 0``
implies ``s(a) + s(b) >= 1``; hence ``c > 0`` is required (``c = 0`` makes ``det A`` vanish on a
set of positive probability in the limit and is not supported).

The fibre of ``y`` is parametrised by ``z_1, ..., z_{L-1}``:
``z_L = (A_{L-1} ... A_1)^{-1} (+-h)`` with Jacobian ``1 / |det(A_{L-1} ... A_1)|``
(:func:`fibre`).  Everything is derived here symbolically and compiled with
:func:`compile_functions` (explicit ``modules=`` to numpy or mpmath); the numeric layer only
calls the compiled functions, through :mod:`aim_sym.lambdified` (the same functions rebuilt
from lambdify's cached source, so that a warm process does not import sympy).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import sympy as sp

SUPPORTED_LAYERS = (2, 3)
SUPPORTED_TOKENS = (2,)

beta, c = sp.symbols("beta c", positive=True)


def _require(cond: bool, name: str, allowed: str, value) -> None:
    if not cond:
        # same message format as numerics.records.require, without importing the numeric layer
        raise ValueError(f"{name} must be {allowed}; got {value!r}")


def z_symbols(layers: int) -> list[list[sp.Symbol]]:
    """Symbols ``z_l_m`` (layer l = 1..L, token m = 0, 1), real."""
    return [[sp.Symbol(f"z{l}_{m}", real=True) for m in range(2)] for l in range(1, layers + 1)]


h_syms = sp.symbols("h0 h1", real=True)
y_syms = sp.symbols("y00 y01 y10 y11", positive=True)


def softmax_rows(S: sp.Matrix, b=beta) -> sp.Matrix:
    """Row-wise softmax of ``b * S`` (literal definition)."""
    rows = []
    for i in range(S.rows):
        e = [sp.exp(b * S[i, j]) for j in range(S.cols)]
        tot = sp.Add(*e)
        rows.append([x / tot for x in e])
    return sp.Matrix(rows)


def logistic(x):
    return 1 / (1 + sp.exp(-x))


def softmax_outer_2(hrow, b=beta) -> sp.Matrix:
    """``softmax_rows(b h h^T)`` for two tokens, written with logistic functions of the logits.

    Equal to :func:`softmax_rows` (checked by :func:`check_softmax_form`), but overflow-free
    when lambdified.
    """
    h0, h1 = hrow
    a = b * h0 * (h0 - h1)
    bb = b * h1 * (h1 - h0)
    return sp.Matrix([[logistic(a), logistic(-a)], [logistic(-bb), logistic(bb)]])


def attention(hrow, cc=c, b=beta) -> sp.Matrix:
    """``A = softmax_rows(b h h^T) + cc I`` for a row ``h`` over two tokens."""
    return softmax_outer_2(hrow, b) + cc * sp.eye(2)


def check_softmax_form() -> bool:
    """Symbolic check that the logistic form equals the literal row softmax."""
    h = sp.symbols("g0 g1", real=True)
    H = sp.Matrix(h)
    lit = softmax_rows(H * H.T)
    diff = (lit - softmax_outer_2(h)).applyfunc(lambda e: sp.simplify(sp.expand(e)))
    return diff == sp.zeros(2, 2)


def forward(layers: int = 2):
    """Return ``(z, h, y)``: symbols, final scores row ``h = h^(L)`` (2-vector) and ``y`` (2x2)."""
    _require(layers in SUPPORTED_LAYERS, "layers", f"one of {SUPPORTED_LAYERS}", layers)
    z = z_symbols(layers)
    prod = sp.eye(2)
    h = sp.Matrix(z[0])
    for l in range(1, layers):
        prod = attention(list(h)) * prod
        h = prod * sp.Matrix(z[l])
    y = softmax_outer_2(list(h))
    return z, h, y


def inversion():
    """Fibre inversion ``y -> h`` (one sign; the other is ``-h``).

    ``u = log(y01/y00) = beta h0 (h1 - h0)``, ``v = log(y10/y11) = beta h1 (h0 - h1)``,
    ``d = h0 - h1 = sqrt(-(u + v)/beta)``, ``h0 = -u/(beta d)``, ``h1 = v/(beta d)``.
    Returns ``(u_expr, v_expr, h0_expr, h1_expr)`` in terms of ``y`` symbols; the last two use
    the choice ``d > 0``.
    """
    y00, y01, y10, y11 = y_syms
    u = sp.log(y01 / y00)
    v = sp.log(y10 / y11)
    d = sp.sqrt(-(u + v) / beta)
    return u, v, -u / (beta * d), v / (beta * d)


def check_inversion() -> bool:
    """Substitute ``y = softmax(beta h h^T)`` into :func:`inversion` and verify it returns
    ``h`` for ``h0 > h1`` (the sign convention ``d > 0``)."""
    p, q = sp.symbols("p q", positive=True)  # h1 = p - ... parametrise h0 = h1 + q, q > 0
    h1 = sp.Symbol("t", real=True)
    h0 = h1 + q
    Y = softmax_rows(sp.Matrix([h0, h1]) * sp.Matrix([[h0, h1]]))
    u, v, e0, e1 = inversion()
    sub = dict(zip(y_syms, [Y[0, 0], Y[0, 1], Y[1, 0], Y[1, 1]], strict=True))
    uu = sp.simplify(sp.expand_log(sp.simplify(u.subs(sub)), force=True))
    vv = sp.simplify(sp.expand_log(sp.simplify(v.subs(sub)), force=True))
    ok_u = sp.simplify(uu - beta * h0 * (h1 - h0)) == 0
    ok_v = sp.simplify(vv - beta * h1 * (h0 - h1)) == 0
    d = sp.sqrt(-(uu + vv) / beta)
    r0 = sp.simplify(-uu / (beta * d) - h0)
    r1 = sp.simplify(vv / (beta * d) - h1)
    return bool(ok_u and ok_v and r0 == 0 and r1 == 0)


def attention_inverse():
    """``A(z_1)^{-1}`` and ``det A`` in terms of the row ``z_1`` (closed form).

    With ``s_a = A_00 - c``, ``s_b = A_11 - c``: ``det A = (1 + c)(s_a + s_b + c - 1)``.
    """
    z1 = z_symbols(1)[0]
    A = attention(z1)
    sa, sb = sp.symbols("s_a s_b", positive=True)
    Ab = sp.Matrix([[sa + c, 1 - sa], [1 - sb, sb + c]])
    det = sp.factor(Ab.det())
    inv = (Ab.adjugate() / det).applyfunc(sp.simplify)
    sub = {sa: A[0, 0] - c, sb: A[1, 1] - c}
    return z1, inv.subs(sub), det.subs(sub), det


def fibre(layers: int = 2):
    """Parametrise the fibre ``{z : h^(L)(z) = h}`` by ``z_1..z_{L-1}``.

    Returns ``(z_params, z_L_expr, jac)``: ``z_L = (A_{L-1}...A_1)^{-1} h`` (2-vector of
    expressions in ``z_params`` and ``h``) and ``jac = 1/|det(A_{L-1}...A_1)|`` (determinants are
    positive, so no absolute value is needed).
    """
    _require(layers in SUPPORTED_LAYERS, "layers", f"one of {SUPPORTED_LAYERS}", layers)
    z = z_symbols(layers)
    z1, inv1, det1, _ = attention_inverse()
    subs1 = dict(zip(z1, z[0], strict=True))
    Ainv = inv1.subs(subs1)
    det = det1.subs(subs1)
    hrow = sp.Matrix(z[0])
    prod = attention(list(hrow))
    for l in range(1, layers - 1):
        hrow = prod * sp.Matrix(z[l])
        inv_l = inv1.subs(dict(zip(z1, list(hrow), strict=True)), simultaneous=True)
        det_l = det1.subs(dict(zip(z1, list(hrow), strict=True)), simultaneous=True)
        Ainv = Ainv * inv_l
        det = det * det_l
        prod = attention(list(hrow)) * prod
    zL = Ainv * sp.Matrix(h_syms)
    return z[: layers - 1], list(zL), 1 / det


def check_fibre(layers: int = 2, samples: int = 3, seed: int = 0) -> float:
    """Max |h^(L)(z_1.., z_L(h)) - h| at random points (exact rationals -> high precision)."""
    import random

    rng = random.Random(seed)
    zs, zL, _ = fibre(layers)
    z_all, hfwd, _ = forward(layers)
    worst = 0.0
    for _ in range(samples):
        vals = {s: sp.Rational(rng.randint(-200, 200), 100) for row in zs for s in row}
        hv = {h_syms[0]: sp.Rational(rng.randint(-300, 300), 100),
              h_syms[1]: sp.Rational(rng.randint(-300, 300), 100)}
        vals.update({c: sp.Rational(3, 4), beta: sp.Rational(6, 5)})
        zl_val = [sp.N(e.subs(vals).subs(hv), 40) for e in zL]
        sub = dict(vals)
        sub.update(dict(zip(z_all[-1], zl_val, strict=True)))
        for k in range(2):
            worst = max(worst, float(abs(sp.N(hfwd[k].subs(sub), 40) - hv[h_syms[k]])))
    return worst


@cache
def derived_functions(layers: int = 2) -> dict:
    """The expressions behind :func:`compile_functions`: ``name -> (args, exprs, cse)``.

    Derived once and stored in the on-disk cache (:mod:`aim_sym.cache`, keyed by the engine's
    source, this module included), since the simplifications cost about a second per process."""
    from .cache import cached

    _require(layers in SUPPORTED_LAYERS, "layers", f"one of {SUPPORTED_LAYERS}", layers)
    return cached("smi", f"layers={layers}", lambda: _derive(layers))


def _derive(layers: int) -> dict:
    z, h, y = forward(layers)
    flat = [s for row in z for s in row]
    out = {"forward": ([*flat, c, beta], [h[0], h[1], y[0, 0], y[0, 1], y[1, 0], y[1, 1]], False)}
    _, _, e0, e1 = inversion()
    out["h_from_y"] = ([*y_syms, beta], [e0, e1], False)
    z1, inv, det, _ = attention_inverse()
    out["attention_inverse"] = ([*z1, c, beta], [inv[0, 0], inv[0, 1], inv[1, 0], inv[1, 1],
                                                 det], False)
    zs, zL, jac = fibre(layers)
    params = [s for row in zs for s in row]
    out["fibre"] = ([*params, *h_syms, c, beta], [zL[0], zL[1], jac], False)
    if layers == 2:
        ab, inv_t, det_t = attention_inverse_logits()
        out["attention_inverse_ab"] = ([*ab, c], [inv_t[0, 0], inv_t[0, 1], inv_t[1, 0],
                                                  inv_t[1, 1], det_t], True)
        _, zz, _, logp = logit_chart()
        out["logit_chart"] = ([*ab, beta], [zz[0] ** 2, zz[0] * zz[1], zz[1] ** 2, logp], False)
        J = fibre_jacobian()
        out["fibre_jacobian"] = ([*params, *h_syms, c, beta], [J[0, 0], J[0, 1], J[1, 0],
                                                               J[1, 1]], False)
    return out


def compile_functions(layers: int = 2, backend: str = "numpy") -> dict:
    """Lambdify the channel pieces (:func:`derived_functions`) with explicit ``modules=``
    (``"numpy"`` or ``"mpmath"``).

    Keys:
      ``forward(z..., c, beta) -> (h0, h1, y00, y01, y10, y11)`` (z flattened layer-major);
      ``h_from_y(y00, y01, y10, y11, beta) -> (h0, h1)`` (sign with h0 > h1);
      ``attention_inverse(z1_0, z1_1, c, beta) -> (Ai00, Ai01, Ai10, Ai11, detA)`` (L = 2);
      ``fibre(params..., h0, h1, c, beta) -> (zL_0, zL_1, jac)``;
      L = 2 only: ``attention_inverse_ab``, ``logit_chart``, ``fibre_jacobian``.
    """
    _require(backend in ("numpy", "mpmath"), "backend", "'numpy' or 'mpmath'", backend)
    return _Compiled(derived_functions(layers), backend)


class _Compiled(Mapping):
    """Read-only mapping ``name -> function`` that lambdifies each entry on first use (the
    forward map alone takes ~0.4 s to print, and most callers need one or two entries)."""

    def __init__(self, derived: dict, modules: str) -> None:
        self._derived, self._modules, self._done = derived, modules, {}

    def __getitem__(self, name: str):
        if name not in self._done:
            args, exprs, cse = self._derived[name]
            self._done[name] = sp.lambdify(args, exprs, modules=self._modules, cse=cse)
        return self._done[name]

    def __iter__(self):
        return iter(self._derived)

    def __len__(self) -> int:
        return len(self._derived)


def fibre_jacobian() -> sp.Matrix:
    """``d z_2 / d z_1`` along the L = 2 fibre, ``z_2 = A(z_1)^{-1} h`` (2x2, rows = z_2 entries).

    Used to shape the inner quadrature around the posterior modes when layer 2 is nearly known.
    """
    zs, zL, _ = fibre(2)
    return sp.Matrix(2, 2, lambda a, b: sp.diff(zL[a], zs[0][b]))


logit_syms = sp.symbols("a b", real=True)


def attention_inverse_logits():
    """``A^{-1}`` and ``det A`` as functions of the two softmax logits ``(a, b)`` of the first
    layer (``A_00 = s(a) + c``, ``A_11 = s(b) + c``, ``s`` logistic).  Returns
    ``((a, b), inv, det)``."""
    a, b = logit_syms
    sa, sb = sp.symbols("s_a s_b", positive=True)
    Ab = sp.Matrix([[sa + c, 1 - sa], [1 - sb, sb + c]])
    det = sp.factor(Ab.det())
    inv = (Ab.adjugate() / det).applyfunc(sp.simplify)
    sub = {sa: logistic(a), sb: logistic(b)}
    return (a, b), inv.subs(sub), det.subs(sub)


def logit_chart():
    """Chart of the z_1 plane modulo ``z_1 -> -z_1`` by the logits
    ``a = beta z0 (z0 - z1)``, ``b = beta z1 (z1 - z0)`` (domain ``a + b > 0``).

    Inverse (one preimage): ``d = sqrt((a + b)/beta)``, ``z0 = a/(beta d)``, ``z1 = -b/(beta d)``;
    ``|det d(a, b)/dz| = 2 beta (a + b)``; the density of ``(a, b)`` for ``z_1 ~ N(0, I)`` (two
    preimages) is ``p = exp(-(a^2 + b^2)/(2 beta (a + b))) / (2 pi beta (a + b))``.  Every
    function of ``A(z_1)`` is a function of ``(a, b)``, and the layer-1 likelihood is smooth and
    close to Gaussian there even when the softmax saturates, which makes this the chart for the
    inner (fibre) integral.  Returns ``((a, b), (z0, z1), jac, log_p)``.
    """
    a, b = logit_syms
    d = sp.sqrt((a + b) / beta)
    z0, z1 = a / (beta * d), -b / (beta * d)
    jac = 2 * beta * (a + b)
    logp = -(a**2 + b**2) / (2 * beta * (a + b)) - sp.log(2 * sp.pi * beta * (a + b))
    return (a, b), (z0, z1), jac, logp


def check_logit_chart() -> bool:
    """Symbolic checks of :func:`logit_chart`: the inverse maps back to ``(a, b)``, the
    Jacobian determinant is ``-2 beta (a + b)`` in z coordinates, and ``p`` equals
    ``2 N(z; 0, I) / |det|`` (two preimages)."""
    (a, b), (z0, z1), jac, logp = logit_chart()
    g0, g1 = sp.symbols("g0 g1", real=True)
    fa = beta * g0 * (g0 - g1)
    fb = beta * g1 * (g1 - g0)
    dom = {a: sp.Symbol("ap", positive=True), b: sp.Symbol("bp", positive=True)}
    ok1 = sp.simplify((beta * z0 * (z0 - z1) - a).subs(dom)) == 0
    ok2 = sp.simplify((beta * z1 * (z1 - z0) - b).subs(dom)) == 0
    det = sp.Matrix([[sp.diff(fa, g0), sp.diff(fa, g1)], [sp.diff(fb, g0), sp.diff(fb, g1)]]).det()
    ok3 = sp.simplify(det + jac.subs({a: fa, b: fb})) == 0
    p_push = 2 * sp.exp(-(z0**2 + z1**2) / 2) / (2 * sp.pi) / jac
    ok4 = sp.simplify((sp.log(p_push) - logp).subs(dom).rewrite(sp.log)) == 0 or \
        sp.simplify(sp.expand_log(sp.log(p_push) - logp, force=True).subs(dom)) == 0
    return bool(ok1 and ok2 and ok3 and ok4)
