"""The public API of general SMI channels (THEORY 2.1, 2.2, 2.5): channels from files or
built-ins, weak thresholds, SE fixed points, derivations and identity checks, each returning
:class:`aim_sym.results.Result` / :class:`aim_sym.results.ResultTable`.

    import aim_sym.smi_general_api as sg
    ch = sg.builtin_channel("noisy-attention", tokens=2, beta=1.0, noise=0.1)
    sg.weak_thresholds(ch).to_frame()
    sg.fixed_point(ch, alpha=3.0)
"""

from __future__ import annotations

import time

import numpy as np
import sympy as sp

from .domains import ALPHA, Domain, check_grid
from .numerics import smi_general as engine
from .numerics.records import InputError, require
from .results import Result, ResultTable
from .smi_channels import (
    BETA_DOMAIN,
    BUILTIN,
    NOISE_DOMAIN,
    ROWS,
    SKIP_DOMAIN,
    TOKENS,
    SMIChannel,
    load_smi_channel_file,
    with_values,
)
from .smi_compiled import CompiledSMIChannel, compile_smi_channel

CHANNEL_DOMAIN = Domain(name="channel", option="--channel", choices=tuple(BUILTIN),
                        default="noisy-deep-attention",
                        description="a built-in general SMI channel")
START_DOMAIN = Domain(name="start", option="--start", choices=("uninformed", "informed"),
                      default="uninformed", description="SE initial overlap: Q = 1e-3 I "
                      "(uninformed) or Q = 0.9 I (informed)")
SEED_DOMAIN = Domain(name="seed", option="--seed", kind="integer", low=0, high=2**31 - 1,
                     default=0, description="seed of the scrambled Sobol rules")


# ----------------------------------------------------------------------------- channels
def smi_channel_from_file(path: str, *, tokens: int = 2, **params) -> SMIChannel:
    """The channel of an SMI channel file (RUNS THE FILE'S CODE: it defines
    ``smi_channel(tokens)``), parameter values bound by name and checked by their domains."""
    ch = load_smi_channel_file(path, tokens=tokens)
    return with_values(ch, params) if params else ch


def builtin_channel(name: str, *, tokens: int | None = None, rows: int | None = None,
                    beta: float | None = None, skip: float | None = None,
                    noise: float | None = None) -> SMIChannel:
    """A built-in general SMI channel by name (``sign-product``, ``noisy-attention``,
    ``noisy-deep-attention``); each value checked against its domain, refused where the channel
    does not have that parameter."""
    CHANNEL_DOMAIN.check(name)
    given = {"tokens": tokens, "rows": rows, "beta": beta, "skip": skip, "noise": noise}
    accepted = {"sign-product": ("rows",), "noisy-attention": ("tokens", "beta", "noise"),
                "noisy-deep-attention": ("beta", "skip", "noise")}[name]
    for key, value in given.items():
        if value is not None and key not in accepted:
            raise InputError(f"{key} must be omitted for channel {name} (its parameters: "
                             f"{', '.join(accepted)}); got {value!r}")
    domains = {"tokens": TOKENS, "rows": ROWS, "beta": BETA_DOMAIN, "skip": SKIP_DOMAIN,
               "noise": NOISE_DOMAIN}
    kwargs = {k: domains[k].check(v) for k, v in given.items() if v is not None}
    return BUILTIN[name](**kwargs)


def compiled(channel: SMIChannel) -> CompiledSMIChannel:
    """The channel compiled for the numeric engine (every parameter must have a value)."""
    return compile_smi_channel(channel)


def default_orders(channel: SMIChannel) -> engine.Orders:
    """Rule sizes by inner dimension d = P M: tensor Gauss-Hermite inner rules for d <= 2;
    from d = 3 on scrambled Sobol inner rules (2^15, 2^16, 2^17 points, 4 scramblings), which
    converge faster there than tensor rules of the same cost (measured on noisy deep attention,
    docs/smi_channels.md)."""
    d = channel.P * channel.M
    if d <= 2:
        return engine.Orders(inner_gh=48 if d == 1 else 32)
    return engine.Orders(sobol_inner=True, inner_log2=16, replicates=4)


def default_se_orders(channel: SMIChannel) -> engine.Orders:
    """Rule sizes of the SE map (an inner rule for every outer omega: smaller than at Q = 0)."""
    d = channel.P * channel.M
    return engine.Orders(inner_gh={1: 32, 2: 24, 3: 16}.get(d, 10), outer_gh=8, y_per_sd=1.0,
                         inner_log2=13, outer_log2=9)


def _parameters(channel: SMIChannel) -> dict:
    return {"channel": channel.name, "P": channel.P, "M": channel.M, "kind": channel.kind,
            **channel.values()}


# ----------------------------------------------------------------------------- thresholds
def weak_thresholds(channel: SMIChannel, *, orders: engine.Orders | None = None,
                    seed: int = 0) -> ResultTable:
    """Weak-recovery thresholds alpha_c = 1 / lambda_max(F) at Q = 0 (THEORY 2.2): one row per
    layer block (rows of z named by the channel's ``layers``) and, with more than one block, one
    for all symmetric modes. Error bars: two rule sizes (+ 2 standard errors of randomised
    rules). Refused (InputError) when E[z | y] != 0."""
    seed = SEED_DOMAIN.check(seed)
    cc = compiled(channel)
    orders = orders or default_orders(channel)
    out = engine.weak_thresholds(cc, orders=orders, seed=seed)
    est = out["estimate"]
    params = _parameters(channel)
    rows = []
    blocks = channel.layer_blocks()
    entries = [(f"layer {i + 1}" if channel.layers else "all", blocks[i], lam, a, est.g_norm_blocks[i])
               for i, (lam, a) in enumerate(out["blocks"])]
    if len(blocks) > 1:
        entries.append(("all", tuple(range(channel.P)), out["all"][0], out["all"][1], None))
    for label, block_rows, lam, a, gnorm in entries:
        n = len(block_rows) * channel.M
        details = {"block": label, "rows": list(block_rows), "lambda_max": lam.value,
                   "lambda_error": lam.error, "refinement": lam.refinement,
                   "standard_error": lam.std_error, "rules": dict(est.rules),
                   "zero_mean": cc.zero_mean_reason if cc.zero_mean else
                   f"checked numerically: E_y |E[z | y]|^2 = {est.mean_sq.value:.2e} "
                   f"+- {est.mean_sq.error:.1e}",
                   "bound": float(n * (n + 1))}
        if gnorm is not None:
            details["E_G_frobenius_sq"] = gnorm.value
        if len(blocks) > 1:
            details["coupling_between_blocks"] = est.coupling.value
        rows.append(Result(quantity="alpha_weak", value=a.value, error=a.error,
                           method="stability operator F at Q = 0 (THEORY 2.2), "
                           "quadrature at three rule sizes", precision=16,
                           parameters=params, details=details))
    return ResultTable(tuple(rows), params)


# ----------------------------------------------------------------------------- state evolution
START_Q = {"uninformed": 1e-3, "informed": 0.9}
EGEN_METHOD = ("Bayes-optimal e_gen = E||y - E[y | omega]||^2 (the channel's own noise "
               "included); plug-in e_gen_plugin = E||y - y(omega)||^2, y(omega) the channel at "
               "omega with independent noise (noiseless: E||g(z) - g(omega)||^2, THEORY 2.4); "
               "labels of a discrete channel read as numbers; errors from the SE's three rule "
               "sizes (and scramblings), each level at its own fixed point")


def _solve(cc, *, alpha: float, Q0: np.ndarray, orders: engine.Orders, seed: int,
           damping: float, tol: float, max_iter: int) -> tuple:
    est, fine, info = engine.se_fixed_point(cc, alpha=alpha, Q0=Q0, orders=orders, seed=seed,
                                            damping=damping, tol=tol, max_iter=max_iter)
    vals = info.pop("values")
    return est, fine, info, vals


def _num(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def _point_details(est, fine, info, vals, *, tol: float) -> dict:
    """Q, its error and the functionals at the fixed point as plain JSON-able entries. The
    functionals' bars add the fixed-point tolerance times an O(1) slope to the refinement."""
    v, e = vals.value, vals.error + tol
    return {"Q": est.value.tolist(), "error": (est.error + tol).tolist(),
            "Q_hat": fine.Q_hat.tolist(), "mse": (1 - np.diag(est.value)).tolist(),
            "e_gen": _num(v[1]), "e_gen_error": _num(e[1]),
            "e_gen_plugin": _num(v[2]), "e_gen_plugin_error": _num(e[2]),
            "phi": _num(v[3]), "phi_error": _num(e[3]),
            "mutual_information": _num(v[0]), "mutual_information_error": _num(e[0]),
            "iterations": info["iterations"], "residual": fine.residual, "rules": info,
            "refinement": est.refinement.tolist(), "spread": est.spread.tolist()}


def fixed_point(channel: SMIChannel, *, alpha: float, start: str = "uninformed",
                orders: engine.Orders | None = None, seed: int = 0, damping: float = 1.0,
                tol: float = 1e-7, max_iter: int = 400, Q0=None) -> Result:
    """The SE fixed point Q (P x P) at ``alpha`` by damped iteration from ``start`` (Q = 1e-3 I
    or 0.9 I; or an explicit ``Q0``) (THEORY 2.1), at three rule sizes (and independent
    scramblings for randomised rules); error bar as in
    :class:`aim_sym.numerics.smi_general.ArrayValue`. Details add e_gen (Bayes-optimal) and
    e_gen_plugin (THEORY 1.5, 2.4), the free entropy phi relative to Q = 0 and
    mutual_information = Psi_out(Q) - Psi_out(0) (THEORY 2.1), each with its error from the same
    levels. ConvergenceError if the iteration does not settle."""
    alpha = ALPHA.check(alpha)
    start = START_DOMAIN.check(start)
    seed = SEED_DOMAIN.check(seed)
    require(0 < damping <= 1, "damping", "in (0, 1]", damping)
    cc = compiled(channel)
    orders = orders or default_se_orders(channel)
    if Q0 is None:
        Q0 = START_Q[start] * np.eye(channel.P)
    est, fine, info, vals = _solve(cc, alpha=alpha, Q0=np.asarray(Q0, dtype=float),
                                   orders=orders, seed=seed, damping=damping, tol=tol,
                                   max_iter=max_iter)
    d = _point_details(est, fine, info, vals, tol=tol)
    return Result(quantity="Q", value=d.pop("Q"), error=d.pop("error"),
                  method="damped SE iteration (THEORY 2.1), quadrature at three rule sizes"
                  + (" and independent scramblings" if info["randomised"] else ""),
                  precision=16, parameters={**_parameters(channel), "alpha": alpha,
                                            "start": start},
                  details={**d, "e_gen_method": EGEN_METHOD,
                           "phi_method": "Phi = -Tr(Q Q_hat)/2 + Tr(Q_hat)/2 - log det(I + "
                           "Q_hat)/2 + alpha (Psi_out(Q) - Psi_out(0)) (THEORY 2.1), relative "
                           "to Q = 0"})


def _distinct(a: Result, b: Result) -> bool:
    """Two fixed points differ when some entry of Q differs by more than both error bars."""
    return bool(np.any(np.abs(np.array(a.value) - np.array(b.value))
                       > np.array(a.error) + np.array(b.error)))


def fixed_points(channel: SMIChannel, *, alpha: float,
                 starts: tuple[str, ...] = ("uninformed", "informed"), **kw) -> ResultTable:
    """The SE fixed points reached from each start (:func:`fixed_point`), duplicates (equal within
    their bars) merged; each row's details carry ``largest_phi`` (True for the one of largest
    phi: the Bayes-optimal point; ``phi_resolved`` is False when the two largest phi are not
    separated by their bars) and ``starts``."""
    found: list[tuple[Result, list[str]]] = []
    for s in starts:
        r = fixed_point(channel, alpha=alpha, start=s, **kw)
        for other, names in found:
            if not _distinct(r, other):
                names.append(s)
                break
        else:
            found.append((r, [s]))
    phis = [r.details["phi"] if r.details["phi"] is not None else -np.inf for r, _ in found]
    best = int(np.argmax(phis))
    order = sorted(range(len(found)), key=lambda i: -phis[i])
    resolved = True
    if len(found) > 1:
        a, b = found[order[0]][0], found[order[1]][0]
        resolved = bool(a.details["phi"] - b.details["phi"]
                        > (a.details["phi_error"] or 0) + (b.details["phi_error"] or 0))
    rows = []
    for i, (r, names) in enumerate(found):
        rows.append(Result(quantity=r.quantity, value=r.value, error=r.error, method=r.method,
                           precision=r.precision, parameters=r.parameters,
                           details={**r.details, "starts": names, "largest_phi": i == best,
                                    "phi_resolved": resolved}))
    return ResultTable(tuple(rows), {**_parameters(channel), "alpha": float(alpha)})


def curve(channel: SMIChannel, *, alphas, orders: engine.Orders | None = None, seed: int = 0,
          informed: bool = True, progress=None, tol: float = 1e-7,
          max_iter: int = 400) -> ResultTable:
    """The SE along an alpha grid (THEORY 2.1): one flat row per alpha with Q_pq, Q_pq_error,
    e_gen, e_gen_plugin, phi (each with its error), the number of distinct fixed points and the
    start of the reported one (of largest phi), method and seconds.

    Starts: the uninformed branch is warm-started from the previous alpha's uninformed Q when the
    grid increases and that Q >= 1e-3 I (its smallest eigenvalue): the Bayes-optimal SE map is
    monotone in Q and in alpha, so the iteration from that Q is squeezed between the one from
    1e-3 I and the new uninformed fixed point, and lands on the same point; otherwise (below the
    threshold, a decreasing grid) it starts from 1e-3 I. With ``informed`` each alpha is also
    solved from 0.9 I, and the fixed point of largest phi is reported."""
    grid = check_grid(alphas, ALPHA, label="alphas")
    P = channel.P
    rows, prev_Q, prev_alpha = [], None, None
    for k, a in enumerate(grid):
        t = time.perf_counter()
        warm = (prev_Q is not None and a >= prev_alpha
                and float(np.linalg.eigvalsh(np.asarray(prev_Q))[0]) >= START_Q["uninformed"])
        kw = {"orders": orders, "seed": seed, "tol": tol, "max_iter": max_iter}
        points = [fixed_point(channel, alpha=a, start="uninformed",
                              Q0=np.asarray(prev_Q) if warm else None, **kw)]
        prev_Q, prev_alpha = points[0].value, a
        if informed:
            r = fixed_point(channel, alpha=a, start="informed", **kw)
            if _distinct(r, points[0]):
                points.append(r)
        phis = [p.details["phi"] if p.details["phi"] is not None else -np.inf for p in points]
        best = points[int(np.argmax(phis))]
        d = best.details
        row = {"alpha": a}
        for p in range(P):
            for q in range(p, P):
                row[f"Q_{p + 1}{q + 1}"] = best.value[p][q]
                row[f"Q_{p + 1}{q + 1}_error"] = best.error[p][q]
        row.update({key: d[key] for key in ("e_gen", "e_gen_error", "e_gen_plugin",
                                              "e_gen_plugin_error", "phi", "phi_error")})
        row.update({"fixed_points": len(points),
                    "start": best.parameters["start"] + (" (warm)" if warm and best is points[0]
                                                         else ""),
                    "method": best.method, "seconds": time.perf_counter() - t})
        if len(points) > 1:
            other = points[1] if best is points[0] else points[0]
            row["phi_other"] = other.details["phi"]
            row["phi_other_error"] = other.details["phi_error"]
        rows.append(row)
        if progress:
            progress(k + 1, len(grid), f"alpha = {a:g} done ({len(points)} fixed point"
                     f"{'s' if len(points) > 1 else ''}, {row['seconds']:.0f} s)")
    return ResultTable(tuple(rows), _parameters(channel))


# ----------------------------------------------------------------------------- derivation
def derive(channel: SMIChannel) -> str:
    """Markdown: the forward map, P_out, Z_out as an integral, g_out, the SE map and the
    stability operator (THEORY 2.1, 2.2)."""
    lines = [f"# SMI channel {channel.name}", "", channel.description, "",
             f"z in R^{{{channel.P} x {channel.M}}} (P = {channel.P} rows, M = {channel.M} "
             "tokens), token columns z_m ~ N(0, I_P).", ""]
    if channel.layers:
        lines += ["Layers (rows of z): " + ", ".join(
            f"layer {i + 1}: rows {[r + 1 for r in b]}" for i, b in enumerate(channel.layers)), ""]
    if channel.kind == "noisy":
        lines += ["## Forward map", "",
                  f"y = g(z) + sqrt({sp.latex(channel.noise)}) xi, xi ~ N(0, I_{channel.K}), with",
                  ""]
        lines += [f"- $g_{{{k + 1}}}(z) = {sp.latex(e)}$" for k, e in enumerate(channel.output)]
        lines += ["", "$P_{out}(y | z) = N(y; g(z), \\Delta I_K)$", ""]
    else:
        lines += ["## Forward map", "", "y takes the values " +
                  ", ".join(map(str, channel.labels)) + " with", ""]
        lines += [f"- $P(y = {y} \\mid z) = {sp.latex(e)}$"
                  for y, e in zip(channel.labels, channel.output)]
        lines.append("")
    lines += ["## Output side (THEORY 2.1)", "",
              "$Z_{out}(y; \\omega, V) = \\int dz\\, P_{out}(y \\mid z) \\prod_{m=1}^{M} "
              "N(z_m; \\omega_m, V)$, with $\\omega_m \\in R^P$, $V = I_P - Q$.", "",
              "$g_{out} = \\partial_\\omega \\log Z_{out} = V^{-1} (E[z \\mid y, \\omega] - "
              "\\omega)$ (column by column, a P x M matrix).", "",
              "$\\hat Q = \\alpha E[\\sum_m g_m g_m^T]$, $Q = \\hat Q (I + \\hat Q)^{-1}$.", "",
              "## Stability at Q = 0 (THEORY 2.2)", "",
              "$F(X)_{pp'} = E_y[\\sum_{m,k} \\sum_{q,q'} G_{pm,qk} G_{p'm,q'k} X_{qq'}]$, "
              "$G = Cov[z \\mid y] - I$; weak threshold $\\alpha_c = 1/\\lambda_{max}(F)$ "
              "(per layer block).", ""]
    from .smi_channels import flip_symmetric

    if flip_symmetric(channel):
        lines.append("E[z | y] = 0: proved, the channel is invariant under z -> -z, so Q = 0 "
                     "is a fixed point.")
    else:
        lines.append("E[z | y] = 0 is not implied by a z -> -z symmetry; the engine checks it "
                     "numerically and refuses weak thresholds if it fails.")
    if channel.layers and all(flip_symmetric(channel, rows=b) for b in channel.layers):
        lines.append("Each layer's rows can flip sign alone: F is block diagonal between layers.")
    vals = channel.values()
    if vals:
        lines += ["", "Parameter values: " + ", ".join(f"{k} = {v}" for k, v in vals.items())]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- checks
def check(channel: SMIChannel, *, seed: int = 0, monte_carlo_samples: int = 4000) -> ResultTable:
    """Identity checks (THEORY 4): numpy against mpmath forward maps; E[z | y] = 0; the bound
    lambda_max(F_l) <= E||G_l||_F^2 <= n_l (n_l + 1) (n_l = P_l M) per layer block; the
    Nishimori identity E[g g^T] = -E[dg/domega] at Q = 0.3 I; for noisy channels with P M <= 2 a
    seeded Monte Carlo estimate of F within 4 standard errors. Rows: name, passed, detail."""
    cc = compiled(channel)
    rows = []
    rng = np.random.default_rng(seed)
    # 1. numpy and mpmath forward maps agree
    z = rng.standard_normal((4, cc.d))
    num = cc.forward(z)
    mp = np.array([[float(v) for v in cc.forward_mp(*row)] for row in z])
    dev = float(np.abs(num - mp).max())
    rows.append({"name": "forward numpy = mpmath", "passed": dev < 1e-12,
                 "detail": f"max deviation {dev:.1e} at 4 random z"})
    # 2-3. E[z|y] = 0 and the bound, from the stability operator at small orders
    orders = _check_orders(channel)
    est = engine.stability(cc, orders=orders, seed=seed)
    ok = engine.zero_mean_holds(cc, est)
    rows.append({"name": "E[z | y] = 0", "passed": ok,
                 "detail": cc.zero_mean_reason if cc.zero_mean else
                 f"E_y |E[z | y]|^2 = {est.mean_sq.value:.2e} +- {est.mean_sq.error:.1e}"})
    for i, rows_l in enumerate(channel.layer_blocks()):
        n = len(rows_l) * channel.M
        lam, g2 = est.lam_blocks[i], est.g_norm_blocks[i]
        passed = (lam.value <= g2.value + lam.error + g2.error + 1e-12
                  and g2.value <= n * (n + 1) + g2.error)
        rows.append({"name": f"bound, block {i + 1}", "passed": bool(passed),
                     "detail": f"lambda_max = {lam.value:.6g} <= E||G||_F^2 = {g2.value:.6g} "
                     f"<= n (n + 1) = {n * (n + 1)} (n = {n})"})
    # 4. Nishimori at Q = 0.3 I, one seeded omega, at two inner rule sizes: the identity holds
    # up to the inner rule's error, so the deviation must be within 1e-5 or shrink with it
    Q = 0.3 * np.eye(channel.P)
    omega = 0.5 * rng.standard_normal(cc.d)
    devs, ses = [], []
    for o in (orders, orders.refined()):
        gg, mdg, se = engine.nishimori(cc, Q=Q, omega=omega, orders=o, seed=seed,
                                       with_error=True)
        devs.append(float(np.abs(gg - mdg).max()))
        ses.append(float(se.max()))
    scale = float(np.abs(gg).max())
    tol = 1e-5 * max(1.0, scale) + 4 * ses[1]
    if ses[1] == 0:     # deterministic output rule: the deviation is the inner rule's error
        tol += 2 * abs(devs[1] - devs[0])
    rows.append({"name": "Nishimori E[g g^T] = -E[dg/domega]", "passed": devs[1] <= tol,
                 "detail": f"max |difference| {devs[1]:.1e} (coarser rule {devs[0]:.1e}; "
                 f"sampling standard error {ses[1]:.1e}; E[g g^T] max entry {scale:.4g}) at "
                 "Q = 0.3 I, one seeded omega"})

    # 5. Monte Carlo oracle of F
    if channel.kind == "noisy" and cc.d <= 2:
        mean, se = engine.stability_monte_carlo(cc, samples=monte_carlo_samples, seed=seed + 1)
        dev = np.abs(mean - est.F_sym)
        bar = 4 * se + 4 * est.lam_all.error
        rows.append({"name": "F by seeded Monte Carlo", "passed": bool(np.all(dev <= bar)),
                     "detail": f"max |F_MC - F| = {dev.max():.2e}, 4 se = {4 * se.max():.2e} "
                     f"({monte_carlo_samples} samples)"})
    return ResultTable(tuple(rows), _parameters(channel))


def _check_orders(channel: SMIChannel) -> engine.Orders:
    d = channel.P * channel.M
    return engine.Orders(inner_gh={1: 32, 2: 24, 3: 16}.get(d, 8), inner_log2=12,
                         replicates=4)


def thresholds_value(table: ResultTable) -> dict:
    """label -> (alpha, error) of a :func:`weak_thresholds` table (a convenience for reports)."""
    return {r.details["block"]: (r.value, r.error) for r in table}


__all__ = ["smi_channel_from_file", "builtin_channel", "compiled", "default_orders", "default_se_orders",
           "weak_thresholds", "fixed_point", "fixed_points", "curve", "derive", "check", "thresholds_value",
           "CHANNEL_DOMAIN", "START_DOMAIN"]
