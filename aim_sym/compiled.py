"""Compile an output derivation into plain callables for the numeric layer (THEORY 1.1).

:func:`compile_channel` substitutes parameter values exactly (as Rationals), lambdifies with
explicit modules, and returns a :class:`CompiledChannel` that :mod:`aim_sym.numerics.aim_se` consumes
without touching sympy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from .channels import Channel, DiscreteChannel
from .codegen import compile_expr
from .output import OutputDerivation, derive, expr_has, substitute_params
from .symbols import V, weight_matrix, weights


@dataclass(frozen=True)
class CompiledChannel:
    """Numeric view of a channel's output side.

    Discrete channels: ``z_grad(m_1..m_K, V)`` returns [Z_y for each y] + [dZ_y/domega_ab for
    each y and pair] as a flat list (numpy or mpmath flavour); m = basis . omega ~ N(0, q S).
    Gaussian channels: ``e_g2(V)`` = E[sum (1 + delta) g^2] and ``psi_out(V)`` in closed form.
    ``e_g2_q0(V)`` is the q = 0 value for every channel (exact finite sum for discrete ones).
    """

    name: str
    tokens: int
    discrete: bool
    noiseless: bool
    n_outputs: int
    n_pairs: int
    weights: np.ndarray
    S: np.ndarray
    e_g2_q0: Callable
    e_g2_q0_mp: Callable
    z_grad: Callable | None = None
    z_grad_mp: Callable | None = None
    e_g2: Callable | None = None
    e_g2_mp: Callable | None = None
    psi_out: Callable | None = None
    psi_out_mp: Callable | None = None
    pr_constant: sp.Expr | None = None  # k = lim_{V->0} V E[sum (1+delta) g^2] (Gaussian)
    params: dict = field(default_factory=dict)

    @property
    def K(self) -> int:
        return self.S.shape[0]


def pr_constant(ch: Channel, params: dict | None = None) -> sp.Expr:
    """k = lim_{V->0} V E[sum (1+delta) g^2] (THEORY 1.2); 0 when q_hat V -> 0 (discrete and
    noisy channels): perfect recovery needs k > 0."""
    d = derive(ch)
    if d.discrete:
        return sp.Integer(0)
    e = substitute_params(d.E_g2, ch, params or {})
    return sp.nsimplify(sp.limit(V * e, V, 0, "+"))


def compile_channel(ch: Channel, params: dict | None = None) -> CompiledChannel:
    """Derive (cached) and compile a channel with the given parameter values."""
    params = dict(params or {})
    d: OutputDerivation = derive(ch)
    T = ch.tokens
    C = weight_matrix(T)
    L = sp.Matrix(d.basis)
    S = np.array((L * C * L.T).evalf(), dtype=float) if L.rows else np.zeros((0, 0))
    e0 = substitute_params(d.E_g2_at_q0, ch, params)
    common = dict(
        name=ch.name,
        tokens=T,
        n_pairs=len(d.omega),
        weights=np.array(weights(T), dtype=float),
        S=S,
        e_g2_q0=compile_expr(e0, [V], backend="numpy"),
        e_g2_q0_mp=compile_expr(e0, [V], backend="mpmath"),
        params=params,
    )
    if isinstance(ch, DiscreteChannel):
        sub = dict(zip(d.omega, list(d.omega_of_m)))
        flat = [substitute_params(Z, ch, params).subs(sub) for Z in d.Z_out]
        for Z in d.Z_out:
            Zp = substitute_params(Z, ch, params)
            flat += [sp.diff(Zp, w).subs(sub) for w in d.omega]
        args = list(d.m) + [V]
        return CompiledChannel(
            discrete=True,
            noiseless=d.deterministic,
            n_outputs=len(d.Z_out),
            z_grad=compile_expr(flat, args, backend="numpy"),
            z_grad_mp=compile_expr(flat, args, backend="mpmath"),
            **common,
        )
    e = substitute_params(d.E_g2, ch, params)
    psi = substitute_params(d.psi_out, ch, params)
    return CompiledChannel(
        discrete=False,
        noiseless=bool(ch.noiseless),
        n_outputs=0,
        e_g2=compile_expr(e, [V], backend="numpy"),
        e_g2_mp=compile_expr(e, [V], backend="mpmath"),
        psi_out=compile_expr(psi, [V], backend="numpy"),
        psi_out_mp=compile_expr(psi, [V], backend="mpmath"),
        pr_constant=pr_constant(ch, params),
        **common,
    )


__all__ = ["CompiledChannel", "compile_channel", "pr_constant", "substitute_params", "expr_has"]
