"""Do the randomised-QMC bars of the deep AIM SE cover (issue 17; docs/deep_aim.md, section 5,
"Checks")? Over many seeds at the alpha = 0.1 fixed point of DeepAimSE(skip=1, rho = (0.5, 0.5)),
the seed-to-seed spread of the values is set against the standard errors each run reports over its
own scrambles: their ratio must be 1 within the chi-square range, and the reported bars
(COVERAGE standard errors, + the inner-rule term for E_l) must cover the pooled mean as often as
Student t with scrambles - 1 degrees of freedom says."""

from __future__ import annotations

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_se as ds
from scipy import stats

MODEL = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
Q = {"q1": 0.6763, "q2": 0.9434}
SCRAMBLES = 8
#: two-sided level of every acceptance range below (one false alarm in 1000 runs per check)
LEVEL = 1e-3


def _spread_against_bars(values, standard_errors, errors) -> None:
    """Assert (i) sd(values) / rms(standard errors) inside the two-sided LEVEL chi-square range
    for len(values) - 1 degrees of freedom (a 1.5 times under-stated standard error fails it);
    (ii) the fraction of runs whose bar covers the pooled mean at least the binomial LEVEL lower
    quantile of the Student-t coverage of COVERAGE standard errors."""
    v, se, err = (np.asarray(x, dtype=float) for x in (values, standard_errors, errors))
    n = v.size
    ratio = v.std(ddof=1) / np.sqrt(np.mean(se**2))
    lo, hi = (np.sqrt(stats.chi2.ppf(p, n - 1) / (n - 1)) for p in (LEVEL / 2, 1 - LEVEL / 2))
    assert lo < ratio < hi, (ratio, lo, hi)
    covered = int(np.sum(np.abs(v - v.mean()) <= err))
    p_t = 2.0 * stats.t.cdf(ds.COVERAGE, SCRAMBLES - 1) - 1.0
    assert covered >= stats.binom.ppf(LEVEL, n, p_t), (covered, n, p_t)


def test_generalisation_error_bars_cover_the_seed_spread():
    """e_gen (12-dimensional RQMC, 2^12 x 8 points) over 300 seeds."""
    runs = [ds.generalisation_error(MODEL, **Q, m=12, scrambles=SCRAMBLES, seed=s)
            for s in range(300)]
    for name in ("e_gen", "e_gen_plugin"):
        est = [r[name] for r in runs]
        _spread_against_bars([e.value for e in est], [e.extra["standard_error"] for e in est],
                             [e.error for e in est])


@pytest.mark.slow
def test_se_step_bars_cover_the_seed_spread():
    """One SE step's E_1, E_2 (and the cross term E[g_1 . g_2]) by output_overlaps at 2^7 x 8
    points over 48 seeds (about 45 s)."""
    runs = [ds.output_overlaps(MODEL, **Q, m=7, scrambles=SCRAMBLES, seed=s) for s in range(48)]
    for name in ("E1", "E2", "cross"):
        est = [r[name] for r in runs]
        _spread_against_bars([e.value for e in est], [e.extra["standard_error"] for e in est],
                             [e.error for e in est])
