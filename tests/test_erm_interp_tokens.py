"""The ERM interpolation threshold at the SE level for T = 3 tokens (THEORY 3; issue 16).

alpha_interp(3) is a closed-form root (alpha_bar scaling).  The T = 3 state evolution (randomised
QMC output side) at small lambda must interpolate below it (training loss O(lambda): train /
lambda tends to the nuclear norm of the minimum-nuclear-norm interpolator, Sigma ~ 1/lambda) and
not above it (training loss O(1)).  Slow: one QMC fixed point costs 2-5 minutes.
"""

from __future__ import annotations

import pytest
from aim_sym.numerics import erm_se, wishart
from aim_sym.numerics.erm_thresholds import alpha_bar_factor, interpolation_threshold
from scipy.integrate import quad

KAPPA0, DELTA, LAM, T = 0.5, 0.5, 1e-3, 3
Q0, Q0N = 1 + KAPPA0, 1 + KAPPA0 + DELTA / 2


def _alpha_interp(tokens: int) -> float:
    return float(interpolation_threshold(kappa0=KAPPA0, Delta=DELTA, tokens=tokens,
                                         dps=None).value)


def _nuclear_norm(delta: float, eps: float) -> float:
    """int (x - eps)_+ d mu_delta(x): the nuclear norm per d of the interpolator (eta = 1)."""
    total = 0.0
    for a, b in wishart.support(KAPPA0, delta * delta):
        lo = max(a, eps)
        if b > lo:
            total += quad(lambda x: (x - eps) * wishart.density(x, rho=KAPPA0,
                                                                delta=delta * delta),
                          lo, b, limit=200)[0]
    return total


def _se(tokens: int, alpha: float, lam: float, init: tuple) -> erm_se.FixedPoint:
    p = erm_se.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam, tokens=tokens)
    fps = erm_se.solve(p, inits=(init,))
    return next(f for f in fps if f.global_minimum)


_POINTS: dict = {}


def _point(ratio: float, lam: float):
    """The T = 3 fixed point at alpha = ratio alpha_interp(3) (cached): started from the
    lambda -> 0+ limit below the threshold, from the SE's middle start above (as
    benchmarks/erm_interp_tokens.py)."""
    key = (ratio, lam)
    if key not in _POINTS:
        alpha = ratio * _alpha_interp(T)
        if ratio < 1:
            lim = erm_se.interpolator_limit(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, tokens=T)
            init = (lim.q / Q0, lim.m / Q0, alpha * alpha_bar_factor(T) * lim.eps / lam)
        else:
            init = erm_se.DEFAULT_INITS[1]
        _POINTS[key] = _se(T, alpha, lam, init)
    return _POINTS[key]


def test_limit_train_identity():
    """The lambda -> 0+ training loss per lambda, alpha_bar (Q0n - m)/(lambda Sigma) =
    (Q0n - m)/eps from the SE's six equations, equals the interpolator's nuclear norm computed
    from the spectrum (an independent quadrature)."""
    alpha = 0.8 * _alpha_interp(T)
    lim = erm_se.interpolator_limit(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, tokens=T)
    assert lim.eps > 0.1
    assert (Q0N - lim.m) / lim.eps == pytest.approx(_nuclear_norm(lim.delta, lim.eps),
                                                    rel=1e-9)


@pytest.mark.slow
def test_t3_interpolates_below_threshold():
    """alpha = 0.8 alpha_interp(3): train / lambda stays below the interpolator's nuclear norm
    N (the interpolator is a candidate: min train <= lambda N) and grows towards it as lambda
    falls (train is concave in lambda with train(0) = 0), so train = O(lambda) -> 0."""
    alpha = 0.8 * _alpha_interp(T)
    lim = erm_se.interpolator_limit(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, tokens=T)
    nuc = _nuclear_norm(lim.delta, lim.eps)
    g = {}
    for lam in (1e-3, 1e-4):
        fp = _point(0.8, lam)
        g[lam] = (fp.train / lam, fp.errors["train"] / lam)
        assert g[lam][0] - g[lam][1] <= nuc
        assert g[lam][0] - g[lam][1] > 0.5 * nuc
    assert g[1e-4][0] + g[1e-4][1] >= g[1e-3][0] - g[1e-3][1]
    # a tenth of lambda: about a tenth of the training loss (at most 1.5x that: the slow approach)
    assert _point(0.8, 1e-4).train < 0.15 * _point(0.8, 1e-3).train


@pytest.mark.slow
def test_t3_does_not_interpolate_above_threshold():
    """alpha = 1.2 and 2 alpha_interp(3), lambda = 1e-3: the training loss rises with alpha
    above the threshold and Sigma falls (lambda Sigma 0.18 -> 0.09 -> 0.02), against Sigma ~
    0.18 / lambda below it.  Above the threshold a single-replicate map can have no exact
    fixed point (one node's prox switching branch, tests/test_erm_tokens_switching.py): the
    pooled fixed points are met to 1e-9 and the switching floor is inside the bar."""
    below = _point(0.8, 1e-3)
    a12, a20 = _point(1.2, 1e-3), _point(2.0, 1e-3)
    for fp in (a12, a20):
        assert fp.residual < 1e-9
        for k in ("q", "m", "sigma", "train"):
            assert fp.errors[f"{k}_floor"] < 0.5 * fp.errors[k]
    assert a12.train - a12.errors["train"] > below.train + below.errors["train"]
    assert a20.train - a20.errors["train"] > 2 * (a12.train + a12.errors["train"])
    assert a20.sigma < a12.sigma < below.sigma - below.errors["sigma"]
