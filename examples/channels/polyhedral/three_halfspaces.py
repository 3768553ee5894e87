"""A channel with three half-spaces in one term (T = 2), written from scratch (THEORY 1.4).

y = 1 iff h_11 > h_12, h_22 > h_12 and h_11 + h_22 > tau (both diagonal entries beat the
off-diagonal one and their sum clears a threshold), else y = 0. Z_out(y = 1) is a trivariate
Gaussian polytope probability (no closed form): the engine integrates it numerically
(docs/polyhedral.md, "Channel files with more than two half-spaces").
"""

import sympy as sp

from aim_sym.channels import discrete, h_matrix

tau = sp.Symbol("tau", real=True)


def channel(tokens):
    if tokens != 2:
        raise ValueError("this example is written for tokens = 2")
    h = h_matrix(2)
    H = sp.Heaviside
    inside = H(h[0, 0] - h[0, 1]) * H(h[1, 1] - h[0, 1]) * H(h[0, 0] + h[1, 1] - tau)
    return discrete(name="three-halfspaces", tokens=2, likelihood={1: inside, 0: 1 - inside},
                    params={tau: 1}, description="y = 1 iff h11 > h12, h22 > h12, "
                    "h11 + h22 > tau")
