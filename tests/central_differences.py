"""Shared test helpers (not a test module) of the AMP output-function checks: seeded points and
central differences in each column of omega."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def column_differences(f: Callable[[np.ndarray], np.ndarray], omega: np.ndarray,
                       eps: float) -> np.ndarray:
    """``(f(omega + eps e_i) - f(omega - eps e_i)) / (2 eps)`` for each column i of ``omega``
    (shape (n, k)), stacked as the last axis: shape ``f(omega).shape + (k,)``."""
    cols = []
    for i in range(omega.shape[1]):
        e = np.zeros(omega.shape[1])
        e[i] = eps
        cols.append((np.asarray(f(omega + e)) - np.asarray(f(omega - e))) / (2 * eps))
    return np.stack(cols, axis=-1)


def seeded_points(view, *, n: int, seed: int, q: float = 0.8, V: float = 0.6):
    """Seeded (y, omega, V): omega ~ N(0, q C), h | omega ~ N(omega, V C), y from the channel
    (``view.weights`` the diagonal of C, ``view.sample`` the channel)."""
    rng = np.random.default_rng(seed)
    w = np.asarray(view.weights)
    om = np.sqrt(q * w) * rng.standard_normal((n, w.size))
    h = om + np.sqrt(V * w) * rng.standard_normal((n, w.size))
    return view.sample(h, rng), om, V
