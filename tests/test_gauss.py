"""numerics.gauss: tensor Gaussian grids for many covariances against the one-point rule."""

import numpy as np
import pytest
from aim_sym.numerics import gauss


@pytest.mark.parametrize("level", [-3, -1])
def test_gaussian_grid_many_is_the_single_rule(level):
    S = np.array([[3.0, -1.0], [-1.0, 3.0]])
    q = np.array([0.3, 1.2, 2.0])
    V = np.array([0.9, 0.05, 1e-4])
    m, w, counts, pruned = gauss.gaussian_grid_many(q[:, None, None] * S,
                                                    np.sqrt(V[:, None] * np.diag(S)), level,
                                                    tail_sd=7.0)
    start = 0
    for i in range(len(q)):
        m1, w1, p1 = gauss.gaussian_grid(q[i] * S, np.sqrt(V[i] * np.diag(S)), level,
                                         tail_sd=7.0)
        assert counts[i] == len(w1)
        np.testing.assert_allclose(m[start:start + counts[i]], m1, rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(w[start:start + counts[i]], w1, rtol=1e-12)
        assert pruned[i] == pytest.approx(p1, rel=1e-10, abs=1e-300)
        start += counts[i]
