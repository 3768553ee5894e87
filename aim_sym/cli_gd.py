"""``aim-sym gd``: the finite-size gradient-trained check (THEORY 3 ERM; the AIM paper's
averaged-student comparison with ``--model aim``), on :mod:`aim_sym.erm_gd_api`."""

from __future__ import annotations

import click

from .cli_common import emit, fail, progress_printer, relabel
from .domains import DomainError

#: options that belong to one mode only
ERM_ONLY = ("kappa0", "delta", "lam", "beta0", "kappa", "n_test", "se")
AIM_ONLY = ("rho", "students")


@click.command("gd")
@click.option("--model", default="erm", show_default=True,
              help="erm (weight-decayed ERM against its SE) or aim (averaged students, no weight "
              "decay, against the Bayes-optimal mmse)")
@click.option("--channel", default=None, help="aim: softmax (the only channel trained)")
@click.option("--kappa0", type=float, default=None, help="erm: the teacher's rank ratio")
@click.option("--delta", type=float, default=None, help="erm: label noise variance (default 0)")
@click.option("--lam", type=float, default=None, help="erm: weight decay (default 0.01)")
@click.option("--rho", type=float, default=None, help="aim: the teacher's width ratio")
@click.option("--students", type=int, default=None, help="aim: students averaged (default 8)")
@click.option("--tokens", type=int, default=2, show_default=True, help="T")
@click.option("--beta", type=float, default=None, help="student inverse temperature (default 1)")
@click.option("--beta0", type=float, default=None, help="erm: teacher inverse temperature")
@click.option("--kappa", type=float, default=None, help="erm: student width p/d (default 1)")
@click.option("--alpha", type=float, required=True, help="sample ratio alpha = n/d^2 > 0")
@click.option("--dim", type=int, default=None, help="d (default 100 for erm, 50 for aim)")
@click.option("--seeds", type=int, default=None, help="independent instances (default 4)")
@click.option("--method", type=click.Choice(["lbfgs", "gd"]), default="lbfgs",
              show_default=True, help="L-BFGS (strong Wolfe) or gradient descent (Armijo)")
@click.option("--tol", type=float, default=1e-6, show_default=True,
              help="stopping rule on the relative gradient norm")
@click.option("--max-iter", type=int, default=20000, show_default=True)
@click.option("--n-test", type=int, default=None, help="erm: fresh test samples per instance")
@click.option("--rng-seed", type=int, default=0, show_default=True)
@click.option("--se/--no-se", default=False, help="erm: the SE's value beside each quantity")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def gd(model, channel, as_json, **kw):
    """Train the actual model at finite size (seeded instances) and report each quantity with
    its standard error (plus the optimisation error), beside the theory."""
    from . import erm_gd_api as api

    if model not in ("erm", "aim"):
        fail("--model", "erm or aim for gd", model)
    given = {k: v for k, v in kw.items() if v is not None}
    wrong = AIM_ONLY if model == "erm" else ERM_ONLY
    for name in wrong:
        if name == "se":
            if kw["se"]:
                fail("--se", "used only with --model erm", True)
        elif name in given:
            fail("--" + name.replace("_", "-"), f"not given with --model {model} (it does not "
                 "apply)", given[name])
    common = {k: given[k] for k in ("tokens", "beta", "alpha", "dim", "seeds", "method", "tol",
                                    "max_iter", "rng_seed") if k in given}
    try:
        if model == "erm":
            if channel is not None:
                fail("--channel", "omitted with --model erm (the teacher is softmax)", channel)
            if "kappa0" not in given:
                fail("--kappa0", "given with --model erm", None)
            erm = {k: given[k] for k in ("kappa0", "delta", "lam", "beta0", "kappa", "n_test")
                   if k in given}
            erm.setdefault("delta", 0.0)
            erm.setdefault("lam", 0.01)
            seeds = given.get("seeds", 4)
            table = api.gd(**erm, **common, se=kw["se"], progress=lambda s, row: progress_printer(
                s + 1, seeds, "instance trained"))
            out = api.summary(table)
            emit(out, as_json, lambda o: "\n".join(
                [f"ERM gradient training, d = {o.get('dim')}, {o.get('seeds')} instances, "
                 f"alpha = {o.get('alpha')}:"]
                + [f"  {r.quantity:10s} = {r.value:.6g} +- "
                   + ("n/a" if r.error is None else f"{r.error:.1e}")
                   + (f"   (SE {r.details['se_value']:.6g} +- {r.details['se_error']:.1e})"
                      if "se_value" in r.details else "") for r in table]))
            return
        if channel not in (None, "softmax"):
            fail("--channel", "softmax for gd --model aim", channel)
        if "rho" not in given:
            fail("--rho", "given with --model aim", None)
        aim = {"rho": given["rho"], **({"students": given["students"]}
                                      if "students" in given else {})}
        r = api.gd_averaged(**aim, **common, bayes=True)
        out = {"quantity": r.quantity, "value": r.value, "error": r.error, "method": r.method,
               **dict(r.parameters), **dict(r.details)}
        emit(out, as_json, lambda o: (
            f"AIM softmax, averaged students: mse = {o['value']:.6g} +- {o['error']:.1e}"
            + (f"  (Bayes-optimal mmse {o['mmse']:.6g})" if o.get("mmse") is not None else "")))
    except DomainError as e:
        raise relabel(e) from None
