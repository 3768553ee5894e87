"""records.standard_error and mean_estimate: the one place the Monte Carlo and QMC routes form
their standard errors."""

import math

import numpy as np
from aim_sym.numerics.records import mean_estimate, standard_error


def test_standard_error_scalar_axis_and_too_few_values():
    x = np.array([1.0, 2.0, 4.0, 7.0])
    assert abs(standard_error(x) - np.std(x, ddof=1) / 2.0) < 1e-15
    assert math.isnan(standard_error([3.0]))
    a = np.arange(24, dtype=float).reshape(4, 3, 2) ** 1.5
    se = standard_error(a, axis=0)
    assert se.shape == (3, 2)
    assert abs(se[1, 1] - standard_error(a[:, 1, 1])) < 1e-12
    assert np.all(np.isnan(standard_error(a[:1], axis=0)))


def test_mean_estimate_carries_the_extra_fields():
    e = mean_estimate([1.0, 3.0], "two draws", seed=5)
    assert e.value == 2.0 and abs(e.error - 1.0) < 1e-15 and e.extra == {"seed": 5}


def test_bayes_optimal_is_the_stable_point_of_largest_phi():
    from aim_sym.numerics.records import bayes_optimal

    fps = [{"stable": True, "phi": -1.0}, {"stable": False, "phi": 5.0},
           {"stable": True, "phi": -0.5}]
    assert bayes_optimal(fps) is fps[2]
    assert bayes_optimal([{"stable": False, "phi": 1.0}]) is None


def test_atomic_write_gives_the_mode_of_a_plainly_created_file(tmp_path):
    """Results written atomically are readable like any other new file (the temporary file
    starts at 0o600; a user's CSV must not stay private to them)."""
    import os

    from aim_sym.numerics.records import atomic_write, new_file_mode

    old = os.umask(0o022)
    try:
        path = tmp_path / "out.csv"
        atomic_write(str(path), "a,b\n1,2\n")
        assert path.read_text() == "a,b\n1,2\n"
        assert new_file_mode() == 0o644
        assert (path.stat().st_mode & 0o777) == 0o644
    finally:
        os.umask(old)
