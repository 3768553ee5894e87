"""A continuous channel: two Gaussian-noisy linear read-outs of the scores,
y_1 = h_12 - h_11 + noise, y_2 = h_11 + h_22 + noise (noise variance Delta each)."""

import sympy as sp

from aim_sym.channels import gaussian, h_matrix

Delta = sp.Symbol("Delta", positive=True)


def channel(tokens):
    h = h_matrix(tokens)
    return gaussian(
        name="noisy-projection", tokens=tokens,
        statistics=[h[0, 1] - h[0, 0], h[0, 0] + h[1, 1]],
        noise=sp.eye(2) * Delta, params={Delta: 0.25},
        description="y = (h_12 - h_11, h_11 + h_22) + N(0, Delta I)",
    )
