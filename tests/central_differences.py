"""Shared test helper (not a test module): central differences in each column of omega."""

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
