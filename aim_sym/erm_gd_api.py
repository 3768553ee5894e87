"""Finite-size training of the ERM of one tied attention layer (THEORY 3): :func:`gd`.

``gd(kappa0=0.5, delta=0.5, lam=0.01, alpha=0.3, dim=100, seeds=8)`` draws ``seeds`` independent
instances (teacher, training set, initialisation, test set), trains each by full-batch L-BFGS
(or gradient descent with an Armijo line search) on the exact finite-size loss, and returns a
:class:`~aim_sym.results.ResultTable` with one :class:`~aim_sym.results.Result` per quantity of
the SE: ``train`` (loss per d^2, regulariser included), ``test`` (against a noisy label, all
T^2 entries), ``test_clean`` (against the noiseless label), ``mse`` (||S_hat - S0||_F^2 / d),
``rank``, ``q`` (Tr S_hat^2 / d), ``m`` (Tr S_hat S0 / d). Each value is the mean over
instances; its error is the standard error over instances plus the optimisation error (the
change between stopping at 10 tol and at tol). ``se=True`` adds the state evolution's value
(:class:`aim_sym.erm.ERM`, T = 2) to each Result's details. The numeric work is
:mod:`aim_sym.numerics.erm_gd`; ``delta`` is the label-noise variance Delta, as in
:class:`aim_sym.erm.ERM`.
"""

from __future__ import annotations

from collections.abc import Callable

from .domains import ALPHA, RNG_SEED, SEEDS, Domain
from .erm import BETA0, BETA_ERM, KAPPA0, LAM, NOISE
from .results import Result, ResultTable

# the model's parameters share the ERM state evolution's domains (aim_sym.erm)
KAPPA0_GD, NOISE_GD, LAM_GD, BETA_GD, BETA0_GD = KAPPA0, NOISE, LAM, BETA_ERM, BETA0
TOKENS_GD = Domain(name="tokens", option="--tokens", kind="integer", low=2, high=16, default=2,
                   description="sequence length T, 2..16 (memory grows like n T d)")
KAPPA_GD = Domain(name="kappa", option="--kappa", low=1e-2, high=4, default=1.0,
                  description="student width ratio kappa = p / d, in [0.01, 4]")
ALPHA_GD = ALPHA.with_(low_open=True, high=20, description="sample ratio alpha = n / d^2, "
                       "in (0, 20] (memory grows like alpha d^3)")
DIM_GD = Domain(name="dim", option="--dim", kind="integer", low=4, high=400, default=100,
                description="dimension d, 4..400 (time per gradient grows like alpha T d^4)")
SEEDS_GD = SEEDS.with_(default=4, description="independent instances (teacher, data, init)")
TOL_GD = Domain(name="tol", option="--tol", low=1e-12, high=1e-1, default=1e-6,
                description="stopping rule: relative gradient norm ||grad L|| / ||grad L(W_0)||, "
                "in [1e-12, 0.1]")
MAX_ITER_GD = Domain(name="max_iter", option="--max-iter", kind="integer", low=1,
                     high=1_000_000, default=20_000, description="optimiser iterations per run")
N_TEST_GD = Domain(name="n_test", option="--n-test", kind="integer", low=2, high=10_000_000,
                   default=10_000, description="fresh samples of each instance's test error")
INIT_SCALE_GD = Domain(name="init_scale", option="--init-scale", low=0, low_open=True, high=100,
                       default=1.0, description="standard deviation of the initial W entries")
METHOD_GD = Domain(name="method", option="--method", choices=("lbfgs", "gd"), default="lbfgs",
                   description="optimiser: L-BFGS (strong Wolfe) or gradient descent (Armijo)")

QUANTITIES = ("train", "test", "test_clean", "mse", "rank", "q", "m")


def gd(*, kappa0: float, delta: float, lam: float, alpha: float, tokens: int = 2,
       beta: float = 1.0, beta0: float = 1.0, kappa: float = 1.0, dim: int = 100,
       seeds: int = 4, method: str = "lbfgs", tol: float = 1e-6, max_iter: int = 20_000,
       n_test: int = 10_000, init_scale: float = 1.0, rng_seed: int = 0, se: bool = False,
       progress: Callable[[int, dict], None] | None = None) -> ResultTable:
    """Train the ERM (THEORY 3) at dimension ``dim`` on ``seeds`` instances; one Result per
    quantity of :data:`QUANTITIES` (mean over instances; error = standard error + optimisation
    error, None for one seed). Details of each Result: ``stderr``, ``optimisation_error``,
    ``per_seed`` (that quantity per instance), ``converged``, ``iterations``, ``lambda_zero``
    (per instance: the weight decay above which W = 0 is a local minimum), and with ``se`` the
    SE's ``se_value`` and ``se_error`` (T = 2; None with ``se_note`` where it fails)."""
    from .numerics import erm_gd

    kw = {"kappa0": KAPPA0_GD.check(kappa0), "Delta": NOISE_GD.check(delta),
          "lam": LAM_GD.check(lam), "tokens": TOKENS_GD.check(tokens),
          "beta": BETA_GD.check(beta), "beta0": BETA0_GD.check(beta0),
          "kappa": KAPPA_GD.check(kappa)}
    alpha, dim, seeds = ALPHA_GD.check(alpha), DIM_GD.check(dim), SEEDS_GD.check(seeds)
    method, tol = METHOD_GD.check(method), TOL_GD.check(tol)
    max_iter, n_test = MAX_ITER_GD.check(max_iter), N_TEST_GD.check(n_test)
    init_scale, rng_seed = INIT_SCALE_GD.check(init_scale), RNG_SEED.check(rng_seed)
    problem = erm_gd.GDProblem(**kw)
    r = erm_gd.run_instances(problem, alpha=alpha, dim=dim, seeds=seeds, rng_seed=rng_seed,
                             method=method, tol=tol, max_iter=max_iter, n_test=n_test,
                             init_scale=init_scale, progress=progress)
    params = {"model": "erm", "tokens": kw["tokens"], "kappa0": kw["kappa0"], "delta": kw["Delta"],
              "lam": kw["lam"], "beta": kw["beta"], "beta0": kw["beta0"], "kappa": kw["kappa"],
              "alpha": alpha, "dim": dim, "seeds": seeds, "rng_seed": rng_seed}
    se_values = _se_values(params) if se else {}
    per = r["per_seed"]
    common = {"converged": r["converged"], "iterations": [p["iterations"] for p in per],
              "rel_grad": [p["rel_grad"] for p in per], "lambda_zero": [p["lambda_zero"] for p in per],
              "n": per[0]["n"], "method": method, "tol": tol, "n_test": n_test,
              "time_s": sum(p["time_s"] for p in per)}
    how = (f"{'L-BFGS' if method == 'lbfgs' else 'gradient descent'} at d = {dim}, {seeds} "
           f"instances; error = standard error over instances + optimisation error (rank: at "
           f"least its resolution 1/(d sqrt(instances)))")
    out = []
    for q in QUANTITIES:
        se_err, opt = r["stderr"][q], r["optimisation_error"][q]
        details = {"stderr": se_err, "optimisation_error": opt,
                   "per_seed": [p[q] for p in per], **common}
        if q == "test":
            details["test_mc_error"] = [p["test_mc_error"] for p in per]
        if q == "rank":
            details["rank_coarse"] = [p["rank_coarse"] for p in per]
            # each instance's rank is a count / d: identical counts give a standard error of 0,
            # which says nothing below that resolution; the bar keeps 1 / (d sqrt(seeds))
            if se_err is not None:
                se_err = max(se_err, 1.0 / (dim * seeds**0.5))
                details["resolution_floor"] = 1.0 / (dim * seeds**0.5)
        if se:
            details.update(se_values.get(q, {"se_value": None, "se_error": None}))
        out.append(Result(quantity=q, value=r["mean"][q],
                          error=None if se_err is None else se_err + opt, method=how,
                          precision=16, parameters=params, details=details))
    return ResultTable(tuple(out), params)


STUDENTS_GD = Domain(name="students", option="--students", kind="integer", low=1, high=256,
                     default=8, description="students averaged per instance (AIM comparison)")
RHO_GD = KAPPA0_GD.with_(name="rho", option="--rho", description="width ratio rho = R / d of "
                         "the AIM teacher (and of the student), >= 1e-4")


def gd_averaged(*, rho: float, alpha: float, tokens: int = 2, beta: float = 1.0,
                dim: int = 50, seeds: int = 4, students: int = 8, method: str = "lbfgs",
                tol: float = 1e-6, max_iter: int = 20_000, init_scale: float = 1.0,
                rng_seed: int = 0, bayes: bool = False) -> Result:
    """The AIM paper's gradient-descent comparison (THEORY 1): noiseless softmax teacher of
    width ``rho``, a student of the same width without weight decay, ``students`` students per
    instance trained from independent initialisations on the same data and their S averaged.
    Result quantity "mse" (||mean S - S0||_F^2 / d, mean over instances, error = standard
    error); details ``mse_single`` (one student) with its error, ``running`` (per instance:
    the mse after 1, 2, 4, ... students), and with ``bayes`` the Bayes-optimal ``mmse`` of
    :class:`aim_sym.models.AIM` (softmax) beside it."""
    from .numerics import erm_gd

    rho, alpha = RHO_GD.check(rho), ALPHA_GD.check(alpha)
    tokens, beta = TOKENS_GD.check(tokens), BETA_GD.check(beta)
    dim, seeds, students = DIM_GD.check(dim), SEEDS_GD.check(seeds), STUDENTS_GD.check(students)
    method, tol, max_iter = METHOD_GD.check(method), TOL_GD.check(tol), MAX_ITER_GD.check(max_iter)
    init_scale, rng_seed = INIT_SCALE_GD.check(init_scale), RNG_SEED.check(rng_seed)
    problem = erm_gd.GDProblem(kappa0=rho, Delta=0.0, lam=0.0, tokens=tokens, beta=beta,
                               beta0=beta, kappa=rho)
    r = erm_gd.run_averaged(problem, alpha=alpha, dim=dim, seeds=seeds, students=students,
                            rng_seed=rng_seed, method=method, tol=tol, max_iter=max_iter,
                            init_scale=init_scale)
    params = {"model": "aim", "channel": "softmax", "tokens": tokens, "rho": rho, "beta": beta,
              "alpha": alpha, "dim": dim, "seeds": seeds, "students": students,
              "rng_seed": rng_seed}
    details = {"mse_single": r["mean"]["mse_single"], "mse_single_error": r["stderr"]["mse_single"],
               "running": [p["running"] for p in r["per_seed"]],
               "per_seed": [p["mse"] for p in r["per_seed"]], "converged": r["converged"],
               "time_s": sum(p["time_s"] for p in r["per_seed"])}
    if bayes:
        from . import channels
        from .models import AIM

        bo = AIM(channels.softmax(tokens=tokens, beta=beta), rho=rho).state_evolution(alpha=alpha)
        details.update(mmse=bo.value, mmse_error=bo.error)
    return Result(quantity="mse", value=r["mean"]["mse"], error=r["stderr"]["mse"],
                  method=f"{students} students averaged per instance, {seeds} instances at "
                  f"d = {dim}; error = standard error over instances", precision=16,
                  parameters=params, details=details)


def _se_values(params: dict) -> dict:
    """The SE's value and error of each quantity at the same parameters (T = 2), or a note."""
    from .numerics.records import ConvergenceError, InputError

    if params["kappa"] != 1.0:
        note = {"se_value": None, "se_error": None,
                "se_note": "the SE is written for student width kappa = 1 only"}
        return {q: dict(note) for q in QUANTITIES}
    try:
        from .erm import ERM

        model = ERM(kappa0=params["kappa0"], delta=params["delta"], lam=params["lam"],
                    tokens=params["tokens"], beta=params["beta"], beta0=params["beta0"])
        table = model.state_evolution(alpha=params["alpha"])
    except (ImportError, InputError, ConvergenceError, AttributeError) as e:
        note = {"se_value": None, "se_error": None, "se_note": str(e)}
        return {q: dict(note) for q in QUANTITIES}
    res = {r.quantity: r for r in table}
    return {q: {"se_value": res[q].value, "se_error": res[q].error}
            for q in QUANTITIES if q in res}


def summary(table: ResultTable) -> dict:
    """A flat dict for ``--json``: the parameters, then ``<quantity>`` and ``<quantity>_error``
    (and ``<quantity>_se`` with the SE), ``converged`` and ``time_s``."""
    out = dict(table.parameters)
    for r in table:
        out[r.quantity] = r.value
        out[f"{r.quantity}_error"] = r.error
        if "se_value" in r.details:
            out[f"{r.quantity}_se"] = r.details["se_value"]
            out[f"{r.quantity}_se_error"] = r.details["se_error"]
    first = table[0]
    out.update(converged=first.details["converged"], time_s=first.details["time_s"],
               iterations=list(first.details["iterations"]))
    return out


__all__ = ["gd", "gd_averaged", "summary", "QUANTITIES", "KAPPA0_GD", "NOISE_GD", "LAM_GD",
           "BETA_GD", "BETA0_GD", "TOKENS_GD", "KAPPA_GD", "ALPHA_GD", "DIM_GD", "SEEDS_GD",
           "TOL_GD", "MAX_ITER_GD", "N_TEST_GD", "INIT_SCALE_GD", "METHOD_GD", "STUDENTS_GD",
           "RHO_GD"]
