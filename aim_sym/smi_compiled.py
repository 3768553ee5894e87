"""Compile an SMI channel (:mod:`aim_sym.smi_channels`) into plain callables (THEORY 2.5).

The numeric engine :mod:`aim_sym.numerics.smi_general` receives a :class:`CompiledSMIChannel`:
``forward(z)`` maps an (N, P M) array of flattened z (row by row, the order of
:func:`aim_sym.smi_channels.z_symbols`) to the (N, K) free outputs g(z) (noisy channels) or to
the (N, K) likelihoods P(y = label_k | z) (discrete channels). ``forward_mp`` is the same map in
mpmath (one point, any precision). Parameter values are substituted exactly (as Rationals)
before lambdify, and every lambdify names its ``modules=`` with explicit rules for Heaviside and
sign.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mpmath
import numpy as np
import sympy as sp

from .smi_channels import SMIChannel, flip_symmetric, substituted, z_symbols


def _np_heaviside(x, h0=0.5):
    return np.heaviside(x, h0)


def _mp_heaviside(x, h0=None):
    if x > 0:
        return mpmath.mpf(1)
    if x < 0:
        return mpmath.mpf(0)
    return mpmath.mpf(1) / 2 if h0 is None else mpmath.mpf(h0)


NUMPY_MODULES = [{"Heaviside": _np_heaviside, "sign": np.sign}, "numpy"]
MPMATH_MODULES = [{"Heaviside": _mp_heaviside, "sign": mpmath.sign}, "mpmath"]


@dataclass(frozen=True)
class CompiledSMIChannel:
    """Numeric view of an SMI channel: everything the numeric layer needs, no sympy."""

    name: str
    P: int
    M: int
    kind: str
    K: int
    forward: Callable
    forward_mp: Callable
    noise: float | None
    labels: tuple
    layers: tuple[tuple[int, ...], ...]
    zero_mean: bool
    zero_mean_reason: str

    @property
    def d(self) -> int:
        return self.P * self.M


def _vectorised(fn: Callable, K: int) -> Callable:
    def forward(z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        cols = fn(*z.T)
        n = z.shape[0]
        return np.stack([np.broadcast_to(np.asarray(c, dtype=float), (n,)) for c in cols], axis=1)

    return forward


def compile_smi_channel(ch: SMIChannel) -> CompiledSMIChannel:
    """Substitute the bound parameter values and lambdify the forward map for numpy and mpmath;
    decide E[z | y] = 0 symbolically where the channel is invariant under z -> -z."""
    out, noise = substituted(ch)
    args = z_symbols(ch.P, ch.M)
    fn = sp.lambdify(args, out, modules=NUMPY_MODULES, cse=True)
    fn_mp = sp.lambdify(args, out, modules=MPMATH_MODULES)
    zero = flip_symmetric(ch)
    reason = ("proved: the channel is invariant under z -> -z" if zero else
              "not proved symbolically (no z -> -z invariance); checked numerically")
    if noise is not None:
        noise_value = float(noise)
        if not noise_value > 0:
            raise ValueError(f"noise variance must be > 0; got {noise}")
    else:
        noise_value = None
    return CompiledSMIChannel(
        name=ch.name, P=ch.P, M=ch.M, kind=ch.kind, K=len(out),
        forward=_vectorised(fn, len(out)),
        forward_mp=lambda *z: [mpmath.mpf(v) if not isinstance(v, mpmath.mpf) else v
                               for v in fn_mp(*z)],
        noise=noise_value, labels=tuple(ch.labels), layers=ch.layer_blocks(),
        zero_mean=zero, zero_mean_reason=reason)


__all__ = ["CompiledSMIChannel", "compile_smi_channel", "NUMPY_MODULES", "MPMATH_MODULES"]
