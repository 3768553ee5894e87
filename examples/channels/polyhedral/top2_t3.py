"""Top-2 attention at T = 3 written from scratch (THEORY 1.4): each row a of h keeps its two
largest scores and drops the smallest, so the kept set of row a is {0, 1, 2} minus y_a, with
y_a = argmin_c h_ac. The label y = (y_0, y_1, y_2) (the dropped token of each row) carries the
same information as the three kept sets. P(y | h) is a product of six Heaviside factors
(h_ac > h_a,y_a for c != y_a); with h symmetric the event spans 5 directions of h, so Z_out is
integrated by the polytope engine's cube rule (docs/polyhedral.md, "Events of rank > 3") for
threshold weak --small-width and check, and se / curve / e_gen by randomised QMC over the model
(docs/polyhedral_rank.md; its SE equals hardmax's at every q by h -> -h, omega -> -omega).

The cyclic labels (1, 2, 0) and (2, 0, 1) are impossible (h_01 < h_02 < h_12 < h_01) and are
left out. At omega = 0, h -> -h maps this channel onto hardmax (argmax of each row), so its
alpha_bar_c equals hardmax's at T = 3.
"""

import itertools

import sympy as sp

from aim_sym.channels import discrete, h_matrix

CYCLIC = ((1, 2, 0), (2, 0, 1))


def channel(tokens):
    if tokens != 3:
        raise ValueError("this example is written for tokens = 3 (at T = 2 top-2 keeps every "
                         "token)")
    h = h_matrix(3)
    H = sp.Heaviside
    likelihood = {}
    for y in itertools.product(range(3), repeat=3):
        if y in CYCLIC:
            continue
        p = sp.Integer(1)
        for a in range(3):
            for c in range(3):
                if c != y[a]:
                    p *= H(h[a, c] - h[a, y[a]])
        likelihood[y] = p
    return discrete(name="top2-t3", tokens=3, likelihood=likelihood,
                    description="top-2 attention at T = 3: y_a = the token row a drops")
