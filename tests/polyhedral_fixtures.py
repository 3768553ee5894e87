"""Channels shared by the polyhedral tests (not a test module): hardmax at T = 3 written as a
channel file, and the rank-4 "four entries of h positive" channel file."""

import itertools

import sympy as sp

from aim_sym.channels import discrete, h_matrix


def hardmax_t3():
    """Hardmax at T = 3 written as a channel file: y_a = argmax_c h_ac, the likelihood a product
    of Heaviside factors; the cyclic labels (probability 0) left out."""
    h = h_matrix(3)
    H = sp.Heaviside
    like = {}
    for y in itertools.product(range(3), repeat=3):
        if y in ((1, 2, 0), (2, 0, 1)):
            continue
        p = sp.Integer(1)
        for a in range(3):
            for c in range(3):
                if c != y[a]:
                    p *= H(h[a, y[a]] - h[a, c])
        like[y] = p
    return discrete(name="hardmax-file", tokens=3, likelihood=like)


#: y = 1 iff four independent entries of h are positive (an event of rank 4), as a channel file
FOUR = (
    "import sympy as sp\n"
    "from aim_sym.channels import discrete, h_matrix\n"
    "def channel(tokens):\n"
    "    h = h_matrix(tokens)\n"
    "    H = sp.Heaviside\n"
    "    e = H(h[0, 0]) * H(h[0, 1]) * H(h[1, 1]) * H(h[0, 2])\n"
    "    return discrete(name='four', tokens=tokens, likelihood={1: e, 0: 1 - e})\n")
