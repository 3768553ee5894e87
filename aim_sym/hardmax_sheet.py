"""Equation sheet of hardmax attention at any T (THEORY 1.1, 1.4, 1.5): what is derived
symbolically and what is an integral.

For T >= 3 an output y (the argmax of each row of h) is the polytope of h cut out by T (T - 1)
half-spaces h_{a y_a} >= h_{a c}; Z_out, g_out and dg_out are Gaussian moments of that polytope in
T (T + 1)/2 dimensions with no closed form (T = 2: Phi and Phi2, see :mod:`aim_sym.sheets`). The
sheet writes the half-spaces, the integrals, the two invariances that reduce the state evolution
to one function of r = q/V (both verified here symbolically on the likelihood), the orbits of
the token permutations, and the generalisation error's one-row form; the numbers come from
:mod:`aim_sym.numerics.hardmax` and :mod:`aim_sym.numerics.hardmax_se`.
"""

from __future__ import annotations

import itertools

import sympy as sp

from .channels import argmax_likelihood
from .sheets import _tex, canonical_block
from .symbols import V, h_matrix, h_symbols, omega_symbols, pairs, weights

#: token counts the sheet is written for (the outcomes number T^T; T = 2 has closed forms)
SHEET_TOKENS = (3, 4, 5)


def half_spaces(y: tuple[int, ...]) -> sp.Matrix:
    """Rows A with P(y | h) = 1 iff A h >= 0 (h the vector of entries h_ab, a <= b): one row
    h_{a y_a} - h_{a c} per row a and other token c."""
    T = len(y)
    H = h_matrix(T)
    hs = h_symbols(T)
    rows = []
    for a, b in enumerate(y):
        for c in range(T):
            if c != b - 1:
                d = H[a, b - 1] - H[a, c]
                rows.append([d.coeff(s) for s in hs])
    return sp.Matrix(rows)


def orbits(T: int) -> list[tuple[tuple[int, ...], int]]:
    """Orbits of the outcomes under simultaneous token permutations (rows and values): a
    representative (the smallest outcome) and the orbit's size."""
    seen: set = set()
    out = []
    for y in itertools.product(range(1, T + 1), repeat=T):
        if y in seen:
            continue
        orbit = set()
        for p in itertools.permutations(range(T)):
            z = [0] * T
            for a, b in enumerate(y):
                z[p[a]] = p[b - 1] + 1
            orbit.add(tuple(z))
        seen |= orbit
        out.append((y, len(orbit)))
    return out


def _density(T: int) -> sp.Expr:
    """The Gaussian density of h given omega: h_ab ~ N(omega_ab, (1 + delta_ab) V)."""
    f = sp.Integer(1)
    for h, w, c in zip(h_symbols(T), omega_symbols(T), weights(T)):
        f *= sp.exp(-(h - w) ** 2 / (2 * c * V)) / sp.sqrt(2 * sp.pi * c * V)
    return f


def invariances_hold(T: int) -> bool:
    """True when every likelihood term is unchanged by h -> s h (s > 0) and by shifting every
    entry by t: the two invariances behind E(q, V) = E_hat(q/V)/V (THEORY 1.4)."""
    s = sp.Symbol("s", positive=True)
    t = sp.Symbol("t", real=True)
    hs = h_symbols(T)
    for y in (rep for rep, _ in orbits(T)):
        A = half_spaces(y)
        h = sp.Matrix(hs)
        shifted = A * (h + t * sp.ones(len(hs), 1))
        if any(sp.simplify(e - f) != 0 for e, f in zip(shifted, A * h)):
            return False
        # Heaviside(s x) = Heaviside(x) for s > 0: the rows scale by s, their signs do not change
        if any(sp.simplify(e - s * f) != 0 for e, f in zip(A * (s * h), A * h)):
            return False
    return True


def hardmax_expressions(T: int) -> dict[str, sp.Expr]:
    """Named expressions of the hardmax derivation at T tokens (the sheet's canonical content)."""
    if T not in SHEET_TOKENS:
        raise ValueError(f"the polytope sheet is written for T in {SHEET_TOKENS}; got {T!r}")
    outputs, like = argmax_likelihood(T)
    likelihood = dict(zip(outputs, like))
    hs, ws = h_symbols(T), omega_symbols(T)
    dens = _density(T)
    limits = [(h, -sp.oo, sp.oo) for h in hs]
    out: dict[str, sp.Expr] = {}
    for y, size in orbits(T):
        tag = "".join(map(str, y))
        out[f"orbit_size[{tag}]"] = sp.Integer(size)
        out[f"half_spaces[{tag}]"] = sp.ImmutableMatrix(half_spaces(y))
        Z = sp.Integral(likelihood[y] * dens, *limits)
        out[f"Z_out[{tag}]"] = Z
        # g_ab = d log Z / d omega_ab = E[(h_ab - omega_ab) 1_y] / ((1 + delta_ab) V Z)
        for h, w, c in zip(hs[:1], ws[:1], weights(T)[:1]):
            out[f"g_out[{tag}][{w.name}]"] = (
                sp.Integral((h - w) * likelihood[y] * dens, *limits) / (c * V * Z))
    out["outcomes"] = sp.Integer(T ** T)
    out["invariant_directions"] = sp.Integer(1)
    return out


def hardmax_sheet(T: int) -> str:
    """Markdown + LaTeX sheet of hardmax at T tokens (T >= 3): half-spaces, integrals,
    invariances, orbits, the SE reduction and e_gen (THEORY 1.1, 1.4, 1.5)."""
    ex = hardmax_expressions(T)
    n = T * (T + 1) // 2
    reps = orbits(T)
    if not invariances_hold(T):  # pragma: no cover - a derivation error, not an input error
        raise AssertionError("the hardmax likelihood lost its scale or shift invariance")
    L = [f"# AIM, hardmax channel, T = {T}", "",
         "Channel: $y_a = \\mathrm{one\\text{-}hot}(\\arg\\max_b h_{ab})$ row-wise; "
         f"{T ** T} outcomes.", "",
         "Conventions (THEORY 1.1): $h_{ab} \\sim \\mathcal N(\\omega_{ab}, (1+\\delta_{ab}) V)$ "
         f"independently for $a \\le b$ ({n} entries), $V = Q_0 - q$, "
         "$g_{ab} = \\partial_{\\omega_{ab}} \\log Z_{\\rm out}$.", "",
         "## What is symbolic and what is an integral", "",
         f"Each outcome is a polytope $\\{{h : A_y h \\ge 0\\}}$ with {T * (T - 1)} half-spaces "
         f"in {n} dimensions. Its Gaussian mass $Z_y$ and moments have no closed form for "
         "$T \\ge 3$ (at $T = 2$ they are $\\Phi$ and $\\Phi_2$): they are written below as "
         "integrals and computed by the ordered-cone recursion "
         "(`aim_sym.numerics.hardmax` at $q = 0$, `aim_sym.numerics.hardmax_se` at any "
         "$\\omega$), with errors by refinement.", "",
         "## Orbits of the token permutations", "",
         "Permuting tokens (rows and values together) maps outcomes to outcomes and leaves the "
         f"law of $\\omega$ invariant: {len(reps)} orbits, sizes summing to {T ** T}.", "",
         "| representative $y$ | orbit size | half-spaces $A_y h \\ge 0$ (rows over "
         + ", ".join(f"$h_{{{a}{b}}}$" for a, b in pairs(T)) + ") |",
         "|---|---|---|"]
    for y, size in reps:
        tag = "".join(map(str, y))
        A = ex[f"half_spaces[{tag}]"]
        rows = "; ".join("(" + ", ".join(str(v) for v in A.row(i)) + ")" for i in range(A.rows))
        L.append(f"| {y} | {size} | {rows} |")
    y0 = reps[0][0]
    tag0 = "".join(map(str, y0))
    w0 = omega_symbols(T)[0]
    L += ["", f"## Partition function and denoiser (representative y = {y0})", "",
          f"$$Z_{{\\rm out}} = {_tex(ex[f'Z_out[{tag0}]'], T)}$$",
          f"$$g_{{11}} = {_tex(ex[f'g_out[{tag0}][{w0.name}]'], T)}$$",
          "and likewise for every entry; "
          "$\\partial_\\omega g = C^{-1}\\mathrm{Cov}[h \\mid y]C^{-1}/V^2 - C^{-1}/V$ "
          "with $C = \\mathrm{diag}(1+\\delta_{ab})$, second moments of the same polytope.", "",
          "## Invariances and the state evolution", "",
          "Verified symbolically on every half-space: $A_y(s h) = s A_y h$ ($s > 0$) and "
          "$A_y(h + t\\mathbf 1) = A_y h$. Hence $Z_y(\\omega; V) = Z_y(\\omega/\\sqrt V; 1)$ "
          "and the output side depends on $(q, V)$ only through $r = q/V$:",
          "$$\\hat q = 2\\alpha\\,\\mathbb E_\\omega\\sum_y Z_y |g_y|_C^2 = "
          "\\frac{2\\alpha}{V}\\hat E(q/V),\\qquad \\omega \\sim \\mathcal N(0, qC),$$",
          f"an expectation over {n - 1} dimensions once the direction $\\mathbf 1$ is removed, "
          "summed over the orbit representatives with their sizes.", "",
          "## Bayes-optimal generalisation error (THEORY 1.5)", "",
          "By the permutation symmetry one row suffices:",
          "$$e_{\\rm gen} = T\\Big(1 - \\mathbb E_\\omega \\sum_b "
          "P(y_1 = b \\mid \\omega)^2\\Big),$$",
          "the row's argmax probabilities being one-dimensional integrals.", "",
          "## Stability of the uninformative fixed point (small width, THEORY 1.4)", "",
          "$$\\bar\\alpha_c(T) = \\frac{1}{2\\hat E(0)},\\qquad "
          "\\hat E(0) = \\sum_y \\frac{|\\nabla_\\omega Z_y|_C^2}{Z_y}\\Big|_{\\omega=0,V=1},$$",
          "an integral computed by `aim-sym threshold weak --small-width --channel hardmax "
          f"--tokens {T}` (12+ digits; see derivations/aim_hardmax.py for the table against "
          "softmax).", ""]
    return "\n".join(L) + "\n" + canonical_block(ex)
