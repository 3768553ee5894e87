"""Numeric output functions for finite-size AMP on the AIM (THEORY 1.1), compiled from the
same derivation the state evolution uses.

:func:`amp_functions` takes a channel (:mod:`aim_sym.channels`) and parameter values and returns
an :class:`AmpFunctions`: plain numpy callables that :mod:`aim_sym.numerics.amp` consumes without touching
sympy.

* ``g_dg(obs, omega, V)``: g_out = d log Z_out / d omega (one column per pair a <= b) and the
  diagonal of its Jacobian, d g_ab / d omega_ab, both lambdified from
  :func:`aim_sym.output.derive` (never hand-written);
* ``sample(h, rng)``: draws the observation from P_out(. | h) and returns what AMP sees:
  discrete channels give the output index (into ``channel.outputs``); Gaussian channels give the
  sufficient statistics u = A h (+ noise) in the derivation's ``y`` symbols. For softmax the
  observation y = softmax(beta h) is computed first and u is read off its row-wise log-ratios
  log(y_ab / y_aa) (the statistics the channel was derived from).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import sympy as sp

from .channels import (
    BETA,
    ChannelError,
    DiscreteChannel,
    GaussianChannel,
    coefficients,
    log_ratio_statistics,
)
from .codegen import compile_expr
from .compiled import substitute_params
from .output import derive
from .symbols import V, h_symbols, weights


@dataclass(frozen=True)
class AmpFunctions:
    """Numeric view of a channel for AMP (see the module docstring)."""

    name: str
    tokens: int
    discrete: bool
    n_pairs: int
    weights: np.ndarray
    g_dg: Callable
    sample: Callable
    observe: Callable | None = None
    params: dict = field(default_factory=dict)


def _heaviside(x, h0=0.5):
    return np.heaviside(x, 0.5)


def _broadcast(vals, shape) -> np.ndarray:
    return np.stack([np.broadcast_to(np.asarray(v, dtype=float), shape) for v in vals], axis=-1)


# ----------------------------------------------------------------------------- gaussian
def _gaussian(ch: GaussianChannel, params: dict) -> AmpFunctions:
    d = derive(ch)
    n, K = len(d.omega), len(d.y)
    g_expr = [substitute_params(e, ch, params) for e in d.g_out]
    dg_expr = [substitute_params(d.dg_out[i, i], ch, params) for i in range(n)]
    args = list(d.y) + list(d.omega) + [V]
    g_fn = compile_expr(g_expr, args, backend="numpy")
    dg_fn = compile_expr(dg_expr, args, backend="numpy")

    def g_dg(obs, omega, Vv):
        omega = np.asarray(omega, dtype=float)
        a = [obs[:, k] for k in range(K)] + [omega[:, i] for i in range(n)] + [float(Vv)]
        shape = omega.shape[:1]
        return _broadcast(g_fn(*a), shape), _broadcast(dg_fn(*a), shape)

    A = np.array(sp.Matrix(ch.statistics).evalf(), dtype=float)
    noise = np.array(substitute_params(sp.Matrix(ch.noise), ch, params).evalf(), dtype=float)
    if np.any(np.isnan(noise)):
        raise ChannelError(f"channel {ch.name}: the noise covariance needs its parameter values")
    chol = np.linalg.cholesky(noise) if np.any(noise) else None
    observe = None
    from_obs = None
    if ch.name == "softmax" and ch.observation is not None:
        # y = softmax(beta h); u from the log-ratios log(y_ab / y_aa) the channel was derived from
        T = ch.tokens
        beta = params.get("beta")
        beta = sp.Rational(str(beta)) if beta is not None else sp.Integer(1)
        Y = sp.Matrix(ch.observation).subs(BETA, beta)
        obs_fn = compile_expr(list(Y), list(h_symbols(T)), backend="numpy")
        L = np.array(coefficients(log_ratio_statistics(Y), T).evalf(), dtype=float)
        P = A @ np.linalg.pinv(L)
        off = [(a, b) for a in range(T) for b in range(T) if a != b]

        def observe(h):
            vals = obs_fn(*[h[:, i] for i in range(h.shape[1])])
            return _broadcast(vals, h.shape[:1]).reshape(-1, T, T)

        def from_obs(y):
            lr = np.stack([np.log(y[:, a, b] / y[:, a, a]) for a, b in off], axis=1)
            return lr @ P.T

    def sample(h, rng):
        h = np.asarray(h, dtype=float)
        if from_obs is not None:
            u = from_obs(observe(h))
        else:
            u = h @ A.T
        if chol is not None:
            u = u + rng.standard_normal(u.shape) @ chol.T
        return u

    return AmpFunctions(
        name=ch.name, tokens=ch.tokens, discrete=False, n_pairs=n,
        weights=np.array(weights(ch.tokens), dtype=float), g_dg=g_dg, sample=sample,
        observe=observe, params=dict(params),
    )


# ----------------------------------------------------------------------------- discrete
def _discrete(ch: DiscreteChannel, params: dict) -> AmpFunctions:
    d = derive(ch)
    n = len(d.omega)
    args = list(d.omega) + [V]
    g_fns, dg_fns = [], []
    for gy, dgy in zip(d.g_out, d.dg_out, strict=True):
        g_fns.append(compile_expr([substitute_params(e, ch, params) for e in gy], args))
        dg_fns.append(compile_expr([substitute_params(dgy[i, i], ch, params) for i in range(n)],
                                   args))
    like = [substitute_params(p, ch, params) for p in ch.likelihood]
    # explicit Heaviside rule (value at 0 is irrelevant: a null set of h)
    like_fn = sp.lambdify(list(h_symbols(ch.tokens)), like,
                          modules=[{"Heaviside": _heaviside}, "numpy"])
    Y = len(ch.outputs)

    def g_dg(obs, omega, Vv):
        omega = np.asarray(omega, dtype=float)
        obs = np.asarray(obs)
        g = np.empty(omega.shape)
        dg = np.empty(omega.shape)
        for y in range(Y):
            idx = np.nonzero(obs == y)[0]
            if idx.size == 0:
                continue
            a = [omega[idx, i] for i in range(n)] + [float(Vv)]
            g[idx] = _broadcast(g_fns[y](*a), idx.shape)
            dg[idx] = _broadcast(dg_fns[y](*a), idx.shape)
        return g, dg

    def sample(h, rng):
        h = np.asarray(h, dtype=float)
        P = _broadcast(like_fn(*[h[:, i] for i in range(n)]), h.shape[:1])
        cum = np.cumsum(P, axis=1)
        u = rng.random(h.shape[0]) * cum[:, -1]
        return np.minimum((u[:, None] >= cum).sum(axis=1), Y - 1)

    return AmpFunctions(
        name=ch.name, tokens=ch.tokens, discrete=True, n_pairs=n,
        weights=np.array(weights(ch.tokens), dtype=float), g_dg=g_dg, sample=sample,
        params=dict(params),
    )


@lru_cache(maxsize=32)
def _cached(ch, items: tuple) -> AmpFunctions:
    params = dict(items)
    if isinstance(ch, GaussianChannel):
        return _gaussian(ch, params)
    if isinstance(ch, DiscreteChannel):
        return _discrete(ch, params)
    raise ChannelError(f"not a channel: {ch!r}")


def amp_functions(ch, params: dict | None = None) -> AmpFunctions:
    """Compile g_out, its Jacobian diagonal and a sampler of P_out for ``ch`` (cached)."""
    items = tuple(sorted((k, v) for k, v in (params or {}).items() if v is not None))
    return _cached(ch, items)
