"""Symbols of the attention-indexed model (AIM), named as in THEORY 1.

The T x T symmetric pre-activation matrix h has n = T(T+1)/2 free entries h_ab (a <= b);
Var(h_ab) = (1 + delta_ab) Q0, so every Gaussian over h carries the diagonal weight
C = diag(1 + delta_ab).
"""

from __future__ import annotations

from functools import cache

import sympy as sp

V = sp.Symbol("V", positive=True)
q = sp.Symbol("q", nonnegative=True)
q_hat = sp.Symbol("q_hat", nonnegative=True)
alpha = sp.Symbol("alpha", nonnegative=True)
rho = sp.Symbol("rho", positive=True)
Q0 = sp.Symbol("Q_0", positive=True)

LATEX_NAMES = {V: "V", q: "q", q_hat: r"\hat{q}", alpha: r"\alpha", rho: r"\rho", Q0: "Q_0"}


def pairs(T: int) -> tuple[tuple[int, int], ...]:
    """Index pairs (a, b), 1 <= a <= b <= T, in row-major order."""
    return tuple((a, b) for a in range(1, T + 1) for b in range(a, T + 1))


@cache
def h_symbols(T: int) -> tuple[sp.Symbol, ...]:
    """Pre-activations h_ab, a <= b."""
    return tuple(sp.Symbol(f"h_{a}{b}", real=True) for a, b in pairs(T))


@cache
def omega_symbols(T: int) -> tuple[sp.Symbol, ...]:
    """Posterior means omega_ab of h_ab (THEORY 1.1)."""
    return tuple(sp.Symbol(f"omega_{a}{b}", real=True) for a, b in pairs(T))


def h_matrix(T: int) -> sp.Matrix:
    """The symmetric T x T matrix whose (a, b) entry is h_min(a,b)max(a,b)."""
    hs = dict(zip(pairs(T), h_symbols(T)))
    return sp.Matrix(T, T, lambda i, j: hs[(min(i, j) + 1, max(i, j) + 1)])


def weights(T: int) -> tuple[int, ...]:
    """The diagonal of C: 1 + delta_ab for each pair."""
    return tuple(2 if a == b else 1 for a, b in pairs(T))


def weight_matrix(T: int) -> sp.Matrix:
    """C = diag(1 + delta_ab), the covariance shape of h (THEORY 1)."""
    return sp.diag(*weights(T))


def latex_names(T: int) -> dict:
    """symbol_names for sympy.latex in paper notation."""
    names = dict(LATEX_NAMES)
    for (a, b), s in zip(pairs(T), h_symbols(T)):
        names[s] = f"h_{{{a}{b}}}"
    for (a, b), s in zip(pairs(T), omega_symbols(T)):
        names[s] = rf"\omega_{{{a}{b}}}"
    return names
