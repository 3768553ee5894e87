"""Do the randomised-QMC bars of the deep AIM SE cover (issue 17; docs/deep_aim.md, section 5,
"Checks")? Over many seeds at the alpha = 0.1 fixed point of DeepAimSE(skip=1, rho = (0.5, 0.5)),
the seed-to-seed spread of the values is set against the standard errors each run reports over its
own scrambles: their ratio must be 1 within the chi-square range, and the reported bars
(COVERAGE standard errors, + the inner-rule term for E_l) must cover the pooled mean as often as
Student t with scrambles - 1 degrees of freedom says. At c = 0.5 (the line inner rule; section 4,
"Inner rule at c < 1") the same for one SE step at V = (0.1, 0.03)
(benchmarks/deep_aim_line_coverage.py is the larger study)."""

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


def _spread_against_bars(values, standard_errors, errors, *, two_sided: bool = True) -> None:
    """Assert (i) sd(values) / rms(standard errors) inside the two-sided LEVEL chi-square range
    for len(values) - 1 degrees of freedom (a 1.5 times under-stated standard error fails it;
    ``two_sided=False``: below its upper end only, over-stated bars pass);
    (ii) the fraction of runs whose bar covers the pooled mean at least the binomial LEVEL lower
    quantile of the Student-t coverage of COVERAGE standard errors."""
    v, se, err = (np.asarray(x, dtype=float) for x in (values, standard_errors, errors))
    n = v.size
    ratio = v.std(ddof=1) / np.sqrt(np.mean(se**2))
    lo, hi = (np.sqrt(stats.chi2.ppf(p, n - 1) / (n - 1)) for p in (LEVEL / 2, 1 - LEVEL / 2))
    assert (lo if two_sided else 0.0) < ratio < hi, (ratio, lo, hi)
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


#: skip c = 0.5, where the default inner rule is the line rule (docs/deep_aim.md section 4, "Inner
#: rule at c < 1"), at V = (0.1, 0.03): a narrow posterior, det A = 0 inside the prior of H1
SMALL_SKIP = ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5)
SMALL_SKIP_V = (0.1, 0.03)


@pytest.mark.slow
def test_line_rule_bars_cover_the_seed_spread_at_small_skip():
    """One SE step's E_1, E_2 and cross term with the line rule at c = 0.5, V = (0.1, 0.03), by
    output_overlaps at 2^5 x 8 points over 64 seeds (253 s on two shared cores): the bars (2.5 standard
    errors + the two-step rule difference) must cover as at c = 1 (a 1.5 times under-stated
    standard error fails the chi-square range). One-sided: E_2's standard error over-states the
    spread over seeds at c = 0.5 (ratio 0.86-0.90 at 2^6 x 8, docs/deep_aim.md), which is no
    failure of its bar."""
    assert SMALL_SKIP.inner == "line"
    q1, q2 = (q0 - v for q0, v in zip(SMALL_SKIP.q0, SMALL_SKIP_V))
    runs = [ds.output_overlaps(SMALL_SKIP, q1=q1, q2=q2, m=5, scrambles=SCRAMBLES, seed=s)
            for s in range(64)]
    for name in ("E1", "E2", "cross"):
        est = [r[name] for r in runs]
        _spread_against_bars([e.value for e in est], [e.extra["standard_error"] for e in est],
                             [e.error for e in est], two_sided=False)
