"""Hardmax with each row's argmax flipped with probability eps (T = 2), written from scratch."""

import sympy as sp

from aim_sym.channels import discrete, h_matrix

eps = sp.Symbol("eps", nonnegative=True)


def channel(tokens):
    if tokens != 2:
        raise ValueError("this example is written for tokens = 2")
    h = h_matrix(2)
    H = sp.Heaviside
    row1 = {1: H(h[0, 0] - h[0, 1]), 2: H(h[0, 1] - h[0, 0])}  # argmax of row 1
    row2 = {1: H(h[1, 0] - h[1, 1]), 2: H(h[1, 1] - h[1, 0])}  # argmax of row 2

    def noisy(row, b):
        return (1 - eps) * row[b] + eps * row[3 - b]

    likelihood = {(b1, b2): noisy(row1, b1) * noisy(row2, b2) for b1 in (1, 2) for b2 in (1, 2)}
    return discrete(name="noisy-hardmax-file", tokens=2, likelihood=likelihood,
                    params={eps: 0.1}, description="hardmax, each row flipped w.p. eps")
