"""ReLU attention seen through Gaussian noise, written from scratch (THEORY 1.4).

y_ab = max(h_ab, 0) + sqrt((1 + delta_ab) Delta) xi_ab for every pair a <= b (the noise
variance follows the convention of the noisy linear channel, THEORY 1). One piece per sign
pattern of the T(T+1)/2 entries (8 at T = 2): on it the output mean is the positive entries.
Z_out is a mixture of Gaussian densities times orthant probabilities (no closed form as a
whole): the engine integrates it (docs/polyhedral.md, "Noisy outputs").
"""

import itertools

import sympy as sp

from aim_sym.noisy_polyhedral import noisy_piecewise
from aim_sym.symbols import h_matrix

Delta = sp.Symbol("Delta", positive=True)


def channel(tokens):
    if tokens not in (2, 3):
        raise ValueError("this example is written for tokens = 2 or 3")
    h = h_matrix(tokens)
    pairs = [(a, b) for a in range(tokens) for b in range(a, tokens)]
    entries = [h[a, b] for a, b in pairs]
    pieces = []
    for on in itertools.product((False, True), repeat=len(entries)):
        conditions = [e > 0 if s else e < 0 for e, s in zip(entries, on)]
        mean = [e if s else 0 for e, s in zip(entries, on)]
        pieces.append((conditions, mean))
    noise = Delta * sp.diag(*[2 if a == b else 1 for a, b in pairs])
    return noisy_piecewise(name="noisy-relu", tokens=tokens, pieces=pieces, noise=noise,
                           params={Delta: 0.1}, description="y = max(h, 0) + noise of variance "
                           "Delta (1 + delta_ab), entrywise")
