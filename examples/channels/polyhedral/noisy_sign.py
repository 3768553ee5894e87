"""A sign pattern of three half-spaces seen through Gaussian noise (T = 2), written from scratch
(THEORY 1.4).

y_k = sign(w_k . h - t_k) + sqrt(Delta) xi_k, k = 1, 2, 3, with three correlated forms w_k of
(h_11, h_12, h_22). Each of the 8 sign patterns is a polytope of three half-spaces (no closed
form); on it the output mean is the constant pattern. As Delta -> 0 it becomes the discrete
channel y = (sign(w_k . h - t_k))_k (its Z_out, g_out and threshold are the limit).
"""

import itertools

import sympy as sp

from aim_sym.noisy_polyhedral import noisy_piecewise
from aim_sym.symbols import h_matrix

Delta = sp.Symbol("Delta", positive=True)
W = [[1, sp.Rational(2, 5), sp.Rational(-3, 10)], [sp.Rational(-1, 5), 1, sp.Rational(1, 2)],
     [sp.Rational(3, 5), sp.Rational(-7, 10), 1]]
THRESHOLDS = [sp.Rational(1, 5), sp.Rational(-3, 10), sp.Rational(1, 10)]


def forms(tokens=2):
    """The three affine forms w_k . h - t_k."""
    h = h_matrix(tokens)
    x = [h[0, 0], h[0, 1], h[1, 1]]
    return [sum(w * v for w, v in zip(row, x)) - t for row, t in zip(W, THRESHOLDS)]


def channel(tokens):
    if tokens != 2:
        raise ValueError("this example is written for tokens = 2")
    f = forms(tokens)
    pieces = []
    for signs in itertools.product((1, -1), repeat=3):
        pieces.append(([s * e > 0 for s, e in zip(signs, f)], list(signs)))
    return noisy_piecewise(name="noisy-sign3", tokens=2, pieces=pieces, noise=Delta,
                           params={Delta: 0.1}, description="y = sign of three correlated forms "
                           "of h + noise of variance Delta")
