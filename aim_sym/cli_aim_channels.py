"""The AIM's command-line paths beyond the one-layer closed-form channels: hardmax's
small-width threshold at T >= 3, sparsemax attention (T = 2) and two tied attention layers
(``--layers 2``); each called by :mod:`aim_sym.cli`'s commands with the parsed options."""

from __future__ import annotations

from .cli_common import emit, fail, given, read_resume_state, relabel, write_json
from .domains import DomainError


def deep_aim_weak(kw, kind, small_width, certified, no_sequential, direct) -> None:
    """``threshold weak --model aim --layers 2 --small-width --skip c``: per-layer thresholds of
    two tied attention layers (T = 2, noiseless softmax; THEORY 1.6, docs/deep_aim.md)."""
    from .thresholds import deep_aim_small_width_weak

    if kind != "weak":
        fail("KIND", "weak for --model aim --layers 2", kind)
    if not small_width:
        fail("--small-width", "given with --model aim --layers 2 (per-layer thresholds in the "
             "small-width scaling)", False)
    for opt, value in (("certified", certified), ("no_sequential", no_sequential),
                       ("direct", direct), ("digits", None)):
        if given(opt):
            fail("--" + opt.replace("_", "-"), "omitted for --model aim --layers 2", value)
    if kw.get("channel") not in (None, "softmax") or kw.get("channel_file"):
        fail("--channel", "softmax for --model aim --layers 2 (two tied attention layers)",
             kw.get("channel") or kw.get("channel_file"))
    if kw["tokens"] != 2:
        fail("--tokens", "2 for --model aim --layers 2", kw["tokens"])
    if kw.get("rho") is not None:
        fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
    if kw.get("noise") is not None:
        _deep_aim_noisy_weak(kw)
        return
    try:
        table = deep_aim_small_width_weak(skip=1.0 if kw.get("skip") is None else kw["skip"],
                                          beta=1.0 if kw.get("beta") is None else kw["beta"])
    except DomainError as e:
        raise relabel(e) from None
    out = {**dict(table.parameters), "thresholds": [
        {"layer": r.details["layer"], "value": r.value, "error": r.error, "method": r.method,
         **{k: v for k, v in r.details.items() if k != "layer"}} for r in table]}
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM, two tied attention layers, T=2, skip={o['skip']}, beta={o['beta']}: "
         "small-width weak thresholds alpha_bar_c per layer"]
        + [f"  layer {t['layer']}: " + (f"{t['value']:.10g} +- {t['error']:.1e}"
                                         if t["value"] is not None else t["note"])
           for t in o["thresholds"]]))


#: output noise Delta accepted by the noisy two-layer routes (below 0.003 the prior-sampled inner
#: rule weakens: docs/deep_aim.md, "Output noise at finite width")
DEEP_AIM_NOISE = (0.003, 10.0)


def _deep_aim_noise(kw: dict) -> float:
    import math

    d = kw["noise"]
    lo, hi = DEEP_AIM_NOISE
    if not (math.isfinite(d) and lo <= d <= hi):
        fail("--noise", f"in [{lo:g}, {hi:g}] (the variance Delta of the output noise) for "
             "--model aim --layers 2", d)
    return float(d)


def _deep_aim_noisy_weak(kw: dict) -> None:
    """``threshold weak --model aim --layers 2 --small-width --noise D``: S_l and alpha_bar_c,l
    of the noisy channel (randomised QMC, numerics/deep_aim_noisy.small_width_noisy)."""
    from .numerics import deep_aim_noisy as dan

    delta = _deep_aim_noise(kw)
    skip = 1.0 if kw.get("skip") is None else kw["skip"]
    beta = 1.0 if kw.get("beta") is None else kw["beta"]
    r = dan.small_width_noisy(Delta=delta, skip=skip, beta=beta, m=10)
    rows = []
    for l in (1, 2):
        a = r[f"alpha_bar_{l}"]
        resolved = a.error != float("inf")
        rows.append({"layer": l, "value": a.value if resolved else None,
                     "error": a.error if resolved else None,
                     "S": r[f"S{l}"].value, "S_error": r[f"S{l}"].error,
                     "method": r[f"S{l}"].method + "; alpha_bar_c = 1 / (2 S)",
                     **({} if resolved else {"note": "S's bar reaches 0: not resolved"})})
    out = {"model": "aim", "layers": 2, "channel": "softmax", "tokens": 2, "skip": skip,
           "beta": beta, "noise": delta, "thresholds": rows}
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM, two tied attention layers, T=2, skip={skip}, beta={beta}, output noise "
         f"Delta={delta}: small-width weak thresholds alpha_bar_c per layer"]
        + [f"  layer {t['layer']}: " + (f"{t['value']:.6g} +- {t['error']:.1e}"
                                         if t["value"] is not None else t["note"])
           for t in o["thresholds"]]))


def sparsemax_weak(kw: dict, digits: int, certified: bool) -> None:
    """``threshold weak --channel sparsemax --small-width [--beta B] [--tokens 2|3]``
    (THEORY 1.4)."""
    from .thresholds import sparsemax_small_width_weak

    if kw["tokens"] not in (2, 3):
        fail("--tokens", "2 or 3 for sparsemax's threshold", kw["tokens"])
    if kw["tokens"] == 3 and given("digits"):
        fail("--digits", "omitted for sparsemax --tokens 3 (randomised QMC: about 4 digits, "
             "printed to 8 with the bar)", digits)
    if kw.get("rho") is not None:
        fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
    if certified:
        fail("--certified", "used only for closed-form thresholds", True)
    for name in ("delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), "omitted for channel sparsemax", kw[name])
    beta = 1.0 if kw.get("beta") is None else kw["beta"]
    try:
        r = sparsemax_small_width_weak(beta=beta, digits=digits if given("digits") else 15,
                                       tokens=kw["tokens"])
    except DomainError as e:
        raise relabel(e) from None
    T = kw["tokens"]
    out = {"model": "aim", "channel": "sparsemax", "tokens": T, "beta": beta,
           "threshold": r.quantity, "kind": r.details["kind"], "value": r.value,
           "error": r.error, "method": r.method,
           **{k: v for k, v in r.details.items() if k != "kind"}}
    emit(out, kw["as_json"], lambda o: (
        f"alpha_bar_c (sparsemax, T={T}, beta={beta:g}) = {o['value']}  (error {o['error']:.1e})\n"
        f"limits: softmax (beta -> 0) {o['softmax']}, hardmax (beta -> inf) {o['hardmax']}\n"
        f"method: {o['method']}"))


def hardmax_weak(kw: dict, digits: int, certified: bool) -> None:
    """``threshold weak --channel hardmax --small-width --tokens 3..5``: the ordered-cone
    quadrature of THEORY 1.4 (no closed form; T = 2 keeps the closed-form path)."""
    from .thresholds import hardmax_small_width_weak

    if kw.get("rho") is not None:
        fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
    if certified:
        fail("--certified", "used only for closed-form thresholds (hardmax: --tokens 2)", True)
    for name in ("beta", "delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), "omitted for channel hardmax (it has no such "
                 "parameter)", kw[name])
    try:
        r = hardmax_small_width_weak(tokens=kw["tokens"],
                                     digits=digits if given("digits") else 15)
    except DomainError as e:
        raise relabel(e) from None
    out = {"model": "aim", "channel": "hardmax", "tokens": kw["tokens"],
           "threshold": r.quantity, "kind": r.details["kind"], "value": r.value, "error": r.error,
           "method": r.method, **{k: v for k, v in r.details.items() if k != "kind"}}
    emit(out, kw["as_json"], lambda o: (
        f"{r.quantity} (hardmax, T={o['tokens']}) = {o['value']}  (error {o['error']:.1e})\n"
        f"softmax 1/(T^2+T-2) = {o['softmax']:.16g}; linear 1/(T(T+1)) = {o['linear']:.16g}\n"
        f"method: {o['method']}"))


def sparsemax_se(kw: dict, alpha: float) -> None:
    """``se --channel sparsemax --rho R --alpha A [--beta B] [--tokens 2|3]``: every SE fixed
    point, through :class:`aim_sym.sparsemax_model.Sparsemax`."""
    from .sparsemax_model import Sparsemax

    beta, rho = _sparsemax_options(kw, "se", tokens=(2, 3))
    T = kw["tokens"]
    try:
        r = Sparsemax(beta=beta, rho=rho, tokens=T).state_evolution(alpha=alpha)
    except DomainError as e:
        raise relabel(e) from None
    fps = r.details["fixed_points"]
    out = {**r.parameters, "fixed_points": fps,
           "note": "e_gen: Bayes-optimal (THEORY 1.5), e_gen_plugin: the plug-in error; "
                   "bayes_optimal: the stable fixed point of largest phi (perfect recovery when "
                   "alpha >= alpha_PR)"}
    if r.value is not None:
        out.update({"mmse": r.value, "error": r.error,
                    **{k: v for k, v in r.details.items() if k != "fixed_points"}})
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM sparsemax T={T} beta={beta:g} rho={rho} alpha={o['alpha']}: {len(fps)} fixed "
         "point(s)"]
        + [f"  mmse = {f['mmse']:.12g} +- {f['error']:.1e}, q = {f['q']:.12g}, "
           f"e_gen = {f['e_gen']:.10g} +- {f['e_gen_error']:.1e} (plug-in "
           f"{f['e_gen_plugin']:.10g}), stable = {f['stable']}"
           + (", Bayes-optimal" if f["bayes_optimal"] else "") for f in fps]))


def _sparsemax_options(kw: dict, what: str, tokens: tuple = (2,)) -> tuple[float, float]:
    """(beta, rho) of a sparsemax command (``tokens``: the T it serves), the options it does not
    take refused."""
    from .channels import BETA_DOMAIN
    from .domains import RHO

    if kw["tokens"] not in tokens:
        fail("--tokens", " or ".join(map(str, tokens)) + f" for {what} --channel sparsemax",
             kw["tokens"])
    for name in ("delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), "omitted for channel sparsemax", kw[name])
    try:
        beta = BETA_DOMAIN.check(1.0 if kw.get("beta") is None else kw["beta"])
        rho = RHO.check(0.5 if kw.get("rho") is None else kw["rho"])
    except DomainError as e:
        raise relabel(e) from None
    return beta, rho


def sparsemax_curve(kw: dict, grid, out_path: str | None, plot_path: str | None) -> None:
    """``curve --channel sparsemax --rho R --alphas a:b:n [--beta B] [--tokens 2|3]``: every SE
    fixed point at each alpha, with e_gen and the plug-in error (THEORY 1.1, 1.5; docs/sparsemax.md).
    Where several fixed points share an alpha the row is the Bayes-optimal one (largest phi;
    ``bayes_optimal`` false where none can be flagged, then the lowest mmse) and ``all_mmse``
    lists them all."""
    from .cli_common import progress_printer
    from .sparsemax_model import Sparsemax

    beta, rho = _sparsemax_options(kw, "curve", tokens=(2, 3))
    T = kw["tokens"]
    alphas = [float(a) for a in grid]
    if any(a <= 0 for a in alphas):
        fail("--alphas", "a grid of alpha > 0 for channel sparsemax", alphas)
    try:
        rows = Sparsemax(beta=beta, rho=rho, tokens=T).curve(alphas=alphas,
                                                             progress=progress_printer).rows()
    except DomainError as e:
        raise relabel(e) from None
    if out_path:
        from .tables import write_csv

        write_csv(out_path, rows)
    if plot_path:
        from .plots import plot_curve

        plot_curve(rows, ["mmse", "e_gen"], path=plot_path,
                   title=f"AIM sparsemax, T={T}, beta={beta:g}, rho={rho:g}")
    emit({"model": "aim", "channel": "sparsemax", "tokens": T, "beta": beta, "rho": rho,
          "rows": rows}, kw["as_json"], lambda o: "\n".join(
        f"alpha={r['alpha']:.6g}: mmse = {r['mmse']:.10g} +- {r['mmse_error']:.1e}, e_gen = "
        f"{r['e_gen']:.10g} +- {r['e_gen_error']:.1e} ({r['fixed_points']} fixed point(s))"
        for r in o["rows"]))


def sparsemax_check(kw: dict) -> list[dict]:
    """``check --channel sparsemax [--beta B] [--tokens 3]``: the channel's identity checks."""
    from .sparsemax_model import Sparsemax

    if kw.get("rho") is not None:
        fail("--rho", "omitted for check --channel sparsemax (the checks are on the channel)",
             kw["rho"])
    beta, _ = _sparsemax_options(kw, "check", tokens=(2, 3))
    return [dict(r) for r in Sparsemax(beta=beta, tokens=kw["tokens"]).check()]


#: q/V reached by the T = 4 and T = 5 curves (mmse >= Q0 / (1 + QMC_R_MAX)); their cost grows
#: with it
QMC_R_MAX = 5.0
#: per T: (Sobol points per scramble, scrambles, Chebyshev nodes in r, minutes on one core)
#: of the randomised-QMC curves (docs/hardmax_se.md, "T = 4" and "T = 5")
QMC_SETTINGS = {4: (256, 8, 9, 2), 5: (4096, 8, 9, 2)}


def hardmax_qmc_rows(T: int, rho: float, alphas, *, with_egen: bool) -> list[list[dict]]:
    """Per alpha, the SE fixed points at T = 4 or 5 (numerics.hardmax_qmc: E_hat(r) curves by
    randomised QMC once for all alphas, QMC_SETTINGS[T], a few minutes on one core), or a
    one-row list with a note where alpha is beyond q/V <= QMC_R_MAX."""
    from .cli_common import progress_printer
    from .numerics import hardmax_qmc
    from .numerics.records import ConvergenceError

    points, scrambles, nodes, minutes = QMC_SETTINGS[T]
    progress_printer(0, len(alphas) + 1, f"E_hat(r) curves at T = {T}, r in [{rho:g}, "
                     f"{QMC_R_MAX:g}] (about {minutes} minutes)")
    curves = hardmax_qmc.e_hat_curves(T=T, r_min=rho, r_max=QMC_R_MAX, nodes=nodes,
                                      points=points, scrambles=scrambles)
    k = hardmax_qmc.coverage_factor(scrambles)
    how = ("one y drawn per point, h = omega + xi" if T >= hardmax_qmc.DRAWS_FROM
           else "every outcome orbit at each omega")
    method = (f"E_hat(r) by randomised QMC ({scrambles} scrambles x {points} Sobol points, "
              f"{how}, {nodes} Chebyshev nodes in r, same points at every r); error = "
              f"t({scrambles - 1}, 0.995) = {k:.3g} x standard error of the per-scramble fixed "
              "points + the interpolation difference")
    out = []
    for i, a in enumerate(alphas):
        progress_printer(i + 1, len(alphas) + 1, f"alpha = {a:g}")
        try:
            rows = hardmax_qmc.se_curve_qmc(rho=rho, alphas=[a], curves=curves,
                                            with_egen=with_egen)
            out.append([{**r, "method": method} for r in rows])
        except ConvergenceError:
            out.append([{"alpha": a, "note": f"no fixed point with q/V <= {QMC_R_MAX:g} "
                         "(beyond the computed range)"}])
    progress_printer(len(alphas) + 1, len(alphas) + 1, "done")
    return out


def hardmax_se(kw: dict, alpha: float) -> None:
    """``se --channel hardmax --tokens 3|4|5 --rho R --alpha A``: every SE fixed point with phi
    (the Bayes-optimal one flagged) and e_gen (THEORY 1.1, 1.4, 1.5; docs/hardmax_se.md). T = 3:
    those with mmse >= Q0/3 by the tensor outer rule (q/V <= 2), those below from the E_hat
    table (rho >= 4/9; smaller rho: mmse >= Q0/3 only). T = 4, 5: randomised QMC, q/V <=
    QMC_R_MAX."""
    from .domains import ALPHA, RHO
    from .numerics import hardmax_se as hse
    from .numerics.records import ConvergenceError

    if kw["tokens"] not in (3, 4, 5):
        fail("--tokens", "2 (closed forms), 3, 4 or 5 for hardmax's state evolution",
             kw["tokens"])
    for name in ("beta", "delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), f"omitted for channel hardmax --tokens "
                 f"{kw['tokens']}", kw[name])
    try:
        rho = RHO.check(0.5 if kw.get("rho") is None else kw["rho"])
        alpha = ALPHA.with_(low_open=True).check(alpha)
    except DomainError as e:
        raise relabel(e) from None
    if kw["tokens"] in (4, 5):
        T = kw["tokens"]
        if rho >= QMC_R_MAX:
            fail("--rho", f"below {QMC_R_MAX:g} for hardmax --tokens {T}", rho)
        from .numerics import hardmax_qmc

        points, scrambles = QMC_SETTINGS[T][:2]
        top = hardmax_qmc.alpha_max(T=T, rho=rho, r_max=QMC_R_MAX, points=min(points, 1024),
                                    scrambles=scrambles)
        if alpha > top.value + top.error:
            fail("--alpha", f"in (0, {top.value - top.error:.4g}] for hardmax --tokens {T} at "
                 f"rho = {rho:g}: larger alphas have their fixed point beyond q/V = "
                 f"{QMC_R_MAX:g}, the computed range (alpha at q/V = {QMC_R_MAX:g}: "
                 f"{top.value:.4g} +- {top.error:.1e})", alpha)
        fps = hardmax_qmc_rows(T, rho, [alpha], with_egen=True)[0]
        if not fps or "note" in fps[0]:
            raise ConvergenceError(
                f"no SE fixed point at T = {T} within q/V <= {QMC_R_MAX:g} (mmse >= "
                f"{(1 + rho) / (1 + QMC_R_MAX):.4g}): alpha is beyond the computed range",
                last_iterate=None, residual=None)
        out = {"model": "aim", "channel": "hardmax", "tokens": T, "rho": rho, "alpha": alpha,
               "fixed_points": fps, "mmse_searched_from": (1 + rho) / (1 + QMC_R_MAX)}
        best = [f for f in fps if f["bayes_optimal"]]
        if best:
            out.update({k: best[0][k] for k in ("mmse", "error", "q", "phi", "e_gen",
                                                "e_gen_error", "method")})
        emit(out, kw["as_json"], lambda o: "\n".join(
            [f"AIM hardmax T={T} rho={rho} alpha={alpha}: {len(fps)} fixed point(s)"]
            + [f"  mmse = {f['mmse']:.6g} +- {f['error']:.1e}, phi = {f['phi']:.6g}, e_gen = "
               f"{f['e_gen']:.6g} +- {f['e_gen_error']:.1e}, stable = {f['stable']}"
               f"{', Bayes-optimal' if f['bayes_optimal'] else ''}" for f in fps]))
        return
    Q0 = 1.0 + rho
    v_min = Q0 / (1.0 + hse.max_ratio(3))
    table = hse.t3_table()
    tabulated = rho >= 1 / table["s_max"] ** 2
    try:
        fps = [{**f, "method": "tensor Gauss-Hermite outer rule, three orders"}
               for f in hse.se_fixed_points(T=3, alpha=alpha, rho=rho)]
    except ConvergenceError as e:
        if not tabulated:
            raise ConvergenceError(
                f"no SE fixed point with mmse >= {v_min:.6g} (= Q0/3, the smallest mmse the "
                "deterministic rule resolves at T = 3; rho >= 4/9 reaches every mmse through "
                "the E_hat table): alpha is beyond the resolved range",
                last_iterate=e.last_iterate, residual=e.residual) from None
        fps = []
    if tabulated:
        # below Q0/3 the fixed points come from the E_hat table (docs/hardmax_se.md, "Large r")
        t = hse.se_curve_tabulated(rho=rho, alphas=[alpha], table=table)[0]
        if t["mmse"] < v_min:
            fps.append({"mmse": t["mmse"], "error": t["error"], "q": t["q"],
                        "q_hat": 2 * alpha * t["E"], "phi": t["phi"], "stable": t["stable"],
                        **hardmax_egen_row(t, rho), "bayes_optimal": False,
                        "method": "E_hat table in 1/sqrt(q/V) "
                                  f"({len(hse.T3_TABLE_NODES) + 1} nodes)"})
        from .numerics.records import bayes_optimal

        best = bayes_optimal(fps)
        for f in fps:
            f["bayes_optimal"] = f is best
    searched = 0.0 if tabulated else v_min
    out = {"model": "aim", "channel": "hardmax", "tokens": 3, "rho": rho, "alpha": alpha,
           "fixed_points": fps, "mmse_searched_from": searched}
    best = [f for f in fps if f["bayes_optimal"]]
    if best:
        out.update({k: best[0][k] for k in ("mmse", "error", "q", "q_hat", "phi", "e_gen",
                                            "e_gen_error")})
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM hardmax T=3 rho={rho} alpha={alpha}: {len(fps)} fixed point(s) with mmse >= "
         f"{searched:.4g}"]
        + [f"  mmse = {f['mmse']:.10g} +- {f['error']:.1e}, q = {f['q']:.10g}, phi = "
           f"{f['phi']:.10g}, e_gen = {f['e_gen']:.10g} +- {f['e_gen_error']:.1e}, stable = "
           f"{f['stable']}{', Bayes-optimal' if f['bayes_optimal'] else ''}" for f in fps]))


#: skips accepted by the two-layer routes at finite width that need c >= 1 on the command line
#: (the noisy ``se``, ``check``, ``amp``): below c = 1 det A vanishes inside the domain
DEEP_AIM_SE_SKIP = (1.0, 1e3)
#: skips accepted by the noiseless ``se``/``curve --model aim --layers 2``: below c = 1 the line
#: inner rule (docs/deep_aim.md section 4, "Inner rule at c < 1"), its map checked against plain
#: Monte Carlo at finite width at c = 0, 0.25, 0.5 and 0.75 and fixed points run at c = 0, 0.25
#: and 0.5 (section 4, "the command line at c < 1"); S_l is finite for every c >= 0 (section 1)
DEEP_AIM_SE_SKIP_LINE = (0.0, 1e3)
#: --points: log2 of the Sobol points per scramble (8 scrambles) of the noiseless se/curve
DEEP_AIM_POINTS = (5, 12)
#: the starts of ``se --model aim --layers 2`` (--starts): name -> (label, initial (mmse_1, mmse_2))
DEEP_AIM_STARTS = {"uninformed": ("uninformed", (1.0, 1.0)),
                   "informed": ("informed", (1e-3, 1e-3)),
                   "layer1": ("layer 1 informed", (1e-3, 1.0)),
                   "layer2": ("layer 2 informed", (1.0, 1e-3))}
#: measured wall seconds of one fixed point at c < 1 by --points (rho = (0.5, 0.5), alpha = 0.3,
#: line rule, uninformed start, bars, e_gen and cross-overlap term included; 2^9: c = 0.5, about
#: 7 min; 2^5: the largest of c = 0, 0.25, 0.5, 93 s at c = 0; two cores shared with other jobs:
#: upper bounds at that load; docs/deep_aim.md section 4, "The command line at c < 1"); between
#: them linear in the points, beyond 2^9 proportional
DEEP_AIM_SMALL_SKIP_SECONDS = {5: 95.0, 9: 420.0}


def _alpha(alpha: float) -> float:
    from .domains import ALPHA

    try:
        return ALPHA.with_(low_open=True).check(alpha)
    except DomainError as e:
        raise relabel(e) from None


def deep_aim_se_model(kw: dict, *, noise_ok: bool = False, design_ok: bool = False,
                      small_skip_ok: bool = False):
    """The two-layer SE specification named by the options (checked: channel softmax, T = 2,
    skip in DEEP_AIM_SE_SKIP, rho one value or r1,r2, beta, --design (shared tokens by
    default) only where ``design_ok``; --noise only where ``noise_ok``). ``small_skip_ok``
    (noiseless se and curve): skip in DEEP_AIM_SE_SKIP_LINE (the line inner rule below 1)."""
    from .domains import RHO
    from .numerics import deep_aim_se as das

    if kw.get("noise") is not None and not noise_ok:
        fail("--noise", "used with se and threshold weak --small-width for --model aim "
             "--layers 2 (the noisy two-layer routes)", kw["noise"])
    if kw.get("design") is not None and not design_ok:
        fail("--design", "used with se and curve for --model aim --layers 2 (AMP and the "
             "checks use shared tokens)", kw["design"])

    if kw.get("channel") not in (None, "softmax") or kw.get("channel_file"):
        fail("--channel", "softmax for --model aim --layers 2 (two tied attention layers)",
             kw.get("channel") or kw.get("channel_file"))
    if kw["tokens"] != 2:
        fail("--tokens", "2 for --model aim --layers 2", kw["tokens"])
    skip = 1.0 if kw.get("skip") is None else kw["skip"]
    line = small_skip_ok and kw.get("noise") is None
    lo, hi = DEEP_AIM_SE_SKIP_LINE if line else DEEP_AIM_SE_SKIP
    if not (lo <= skip <= hi):
        where = ("c < 1 with the line inner rule, minutes per fixed point" if line
                 else "c < 1 is served by the noiseless se and curve")
        fail("--skip", f"in [{lo:g}, {hi:g}] for this two-layer route at finite width on the "
             f"command line ({where}; small width: threshold weak --small-width)", skip)
    rho = kw.get("rho")
    rho = (0.5, 0.5) if rho is None else (rho if isinstance(rho, tuple) else (rho, rho))
    try:
        rho = tuple(RHO.check(r) for r in rho)
    except DomainError as e:
        raise relabel(e) from None
    beta = 1.0 if kw.get("beta") is None else kw["beta"]
    if not (beta > 0 and beta < 1e3):
        fail("--beta", "in (0, 1000)", beta)
    return das.DeepAimSE(skip=skip, rho1=rho[0], rho2=rho[1], beta=beta,
                         design=kw.get("design") or "shared")


#: D for the two-layer GAMP-RIE on the command line (every sample's g_out is a quadrature)
DEEP_AMP_DIM = (10, 400)
#: skips served by ``amp --model aim --layers 2``: c >= 1 and, with the SE's line inner rule,
#: c in [0.5, 1) (AMP compared with the SE at c = 0.5: docs/deep_aim.md section 6, "c = 0.5";
#: numerics.deep_aim_amp.SKIP_MIN)
DEEP_AIM_AMP_SKIP = (0.5, 1e3)


def deep_aim_amp(kw: dict, *, alpha: float, damping, out_path: str | None, dim: int, seeds: int,
                 max_iter: int, rng_seed: int) -> None:
    """``amp --model aim --layers 2``: finite-size GAMP-RIE of two tied attention layers
    (numerics.deep_aim_amp; docs/deep_aim.md section 6): per layer the final error over seeds
    (mean, stderr), the control-variate estimate (cv_mean, cv_stderr), failed seeds."""
    import json

    from .cli_common import progress_printer
    from .numerics import deep_aim_amp as dam
    from .numerics.records import atomic_write

    alpha = _alpha(alpha)
    skip = 1.0 if kw.get("skip") is None else kw["skip"]
    lo, hi = DEEP_AIM_AMP_SKIP
    if not (lo <= skip <= hi):
        fail("--skip", f"in [{lo:g}, {hi:g}] for amp --model aim --layers 2 (below 1 the line "
             f"inner rule; AMP is compared with the SE at c = {lo:g} and c >= 1 only)", skip)
    model = deep_aim_se_model(kw, small_skip_ok=True)
    lo, hi = DEEP_AMP_DIM
    if not (lo <= dim <= hi):
        fail("--dim", f"in [{lo}, {hi}] for --model aim --layers 2", dim)
    if not (1 <= seeds <= 1000):
        fail("--seeds", "in [1, 1000]", seeds)
    if not (1 <= max_iter <= 1000):
        fail("--max-iter", "in [1, 1000] for --model aim --layers 2", max_iter)
    r = dam.run_deep_amp(alpha=alpha, rho1=model.rho1, rho2=model.rho2, skip=model.skip,
                         beta=model.beta, dim=dim, seeds=seeds, max_iter=max_iter,
                         damping=damping, rng_seed=rng_seed, tail=min(10, max_iter),
                         progress=progress_printer)
    out = {"model": "aim", "layers": 2, "skip": model.skip, "beta": model.beta,
           "rho": [model.rho1, model.rho2], "alpha": alpha, "dim": dim, "seeds": seeds,
           # over the seeds that did not diverge (failed_seeds lists the others)
           **{f"{k}{l}": r[f"{k}_ok{l}"] for l in (1, 2)
              for k in ("mean", "stderr", "tail_mean", "tail_stderr")},
           **{f"{k}{l}": r[f"{k}{l}"] for l in (1, 2) for k in ("cv_mean", "cv_stderr")},
           "failed_seeds": r["failed_seeds"], "reasons": r["reasons"],
           "dampings": r["dampings"],
           "time_s": r["time_s"],
           "note": "the SE's mmse per layer: se --model aim --layers 2 (same options); at "
                   "D <= 140 the AMP sits above it by a finite-size bias (docs/deep_aim.md, "
                   "section 6)"}
    if out_path:
        try:
            atomic_write(out_path, json.dumps(out, indent=2, default=float))
        except OSError as e:
            fail("--out", "a writable path", f"{out_path} ({e.strerror})")
    def fmt(v):
        return "n/a" if v is None else f"{v:.6g}"

    emit(out, kw["as_json"], lambda o: "\n".join(
        f"layer {l}: final mmse {fmt(o[f'mean{l}'])} +- {fmt(o[f'stderr{l}'])} (control "
        f"variate {fmt(o[f'cv_mean{l}'])} +- {fmt(o[f'cv_stderr{l}'])})" for l in (1, 2))
        + f"\nfailed seeds (left out): {o['failed_seeds']}")


def deep_aim_starts(spec: str | None) -> list[str]:
    """--starts: a comma list of DEEP_AIM_STARTS names, each once (default: all four)."""
    if spec is None:
        return list(DEEP_AIM_STARTS)
    names = [x.strip() for x in spec.split(",")]
    if not names or any(n not in DEEP_AIM_STARTS for n in names) or len(set(names)) < len(names):
        fail("--starts", "a comma list of distinct names from " + ", ".join(DEEP_AIM_STARTS),
             spec)
    return names


def deep_aim_points(points: int | None) -> int:
    """--points: log2 of the Sobol points per scramble, in DEEP_AIM_POINTS (default 9)."""
    if points is None:
        return 9
    lo, hi = DEEP_AIM_POINTS
    if not (lo <= points <= hi):
        fail("--points", f"in [{lo}, {hi}] (log2 of the points per scramble; fewer: quicker, "
             "larger bars)", points)
    return points


def _deep_aim_key(command: str, model, m: int, **extra) -> dict:
    """The options a stored result depends on (a resumed run must match them exactly)."""
    return {"command": command, "skip": model.skip, "rho": [model.rho1, model.rho2],
            "beta": model.beta, "design": model.design, "inner": model.inner,
            "points": m, "scrambles": 8, "seed": 0, **extra}


def _deep_aim_cost(model, m: int, runs: int, what: str) -> None:
    """One stderr line before a c < 1 run: the expected cost (measured, an upper bound)."""
    import click

    (m0, t0), (m1, t1) = sorted(DEEP_AIM_SMALL_SKIP_SECONDS.items())
    secs = (t0 + (t1 - t0) * (2.0**m - 2.0**m0) / (2.0**m1 - 2.0**m0) if m <= m1
            else t1 * 2.0 ** (m - m1))
    click.echo(f"expected cost at skip {model.skip:g} < 1: about {secs / 60:.2g} min per {what} x "
               f"{runs} at 2^{m} x 8 points (measured on two shared cores at alpha = 0.3: "
               f"{t0 / 60:.2g} min at 2^{m0}, {t1 / 60:.2g} min at 2^{m1}; more near alpha_PR)",
               err=True)


def _iteration_printer(k: int, n: int, name: str):
    from .cli_common import progress_printer

    def hook(it: int, v: list[float], residual: float) -> None:
        progress_printer(k, n, f"{name}: iteration {it}, mmse = ({v[0]:.6g}, {v[1]:.6g}), "
                               f"|F - V| = {residual:.2g}")
    return hook


def deep_aim_se(kw: dict, alpha: float, *, starts: str | None = None,
                out_path: str | None = None, resume: bool = False,
                points: int | None = None) -> None:
    """``se --model aim --layers 2 --rho r1,r2 --skip c --alpha a``: the SE fixed points of two
    tied attention layers at finite width, T = 2 (THEORY 1.6), one per start (``starts``, default
    uninformed, informed, each layer informed), per layer q, q_hat, mmse with errors (randomised
    QMC, 2^points x 8, docs/deep_aim.md section 4). c < 1 (line inner rule) takes minutes per
    start: progress per start and iteration on stderr; with ``out_path`` each finished start is
    written (atomically) to that JSON file, and ``resume`` skips the starts found there."""
    from .cli_common import progress_printer
    from .numerics import deep_aim_se as das

    alpha = _alpha(alpha)
    model = deep_aim_se_model(kw, noise_ok=True, design_ok=True, small_skip_ok=True)
    if kw.get("noise") is not None:
        for opt, value in (("--starts", starts), ("--out", out_path),
                           ("--resume", resume or None), ("--points", points)):
            if value is not None:
                fail(opt, "omitted with --noise (the noisy route runs one start)", value)
        _deep_aim_noisy_se(kw, alpha, model)
        return
    names = deep_aim_starts(starts)
    m = deep_aim_points(points)
    if resume and not out_path:
        fail("--resume", "used with --out FILE (the file of an earlier run)", True)
    if out_path:
        from .tables import check_writable

        check_writable(out_path, "--out")
    key = _deep_aim_key("se", model, m, alpha=alpha)
    done = {}
    if resume:
        stored = read_resume_state(out_path, key, "--out file of se")
        done = {f["start"]: f for f in (stored or {}).get("fixed_points", [])}
    skip, beta, rho = model.skip, model.beta, (model.rho1, model.rho2)
    todo = [n for n in names if DEEP_AIM_STARTS[n][0] not in done]
    if skip < 1 and todo:
        _deep_aim_cost(model, m, len(todo), "start")
    out = {"model": "aim", "layers": 2, "channel": "softmax", "tokens": 2, "skip": skip,
           "beta": beta, "rho": list(rho), "alpha": alpha, "design": model.design,
           "alpha_PR": das.perfect_recovery_alpha(model),
           "method": f"randomised QMC (8 scrambles x 2^{m} Sobol points, truths first) over the "
                     "output side of E_l = (2 V_l - E tr Cov_l[. | z]) / V_l^2 (posterior-variance "
                     "form), 2D inner rule over H1's seen directions"
                     + (" (line rule: nodes graded towards det A = 0)" if skip < 1 else "")
                     + "; error = 2.5 standard errors plus the inner rule's two-step difference, "
                     "through (I - J)^-1",
           "note": "phi ranks coexisting fixed points (Bayes-optimal: the stable one of largest "
                   "phi); e_gen: E||y(h) - y(h')||^2/2, h, h' two posterior draws given omega; "
                   "e_gen_plugin: E||y(h) - y(omega)||^2",
           "options": key}
    n = len(names)
    for k, name in enumerate(names):
        label, init = DEEP_AIM_STARTS[name]
        if label in done:
            progress_printer(k, n, f"start {label}: resumed (stored in {out_path})")
            continue
        progress_printer(k, n, f"start {label} (mmse {init[0]:g}, {init[1]:g})")
        done[label] = {"start": label, **das.fixed_point(
            model, alpha=alpha, v_init=init, m=m, progress=_iteration_printer(k, n, label))}
        if out_path:
            stored = [done[lb] for lb in done]
            write_json(out_path, {**out, "complete": False, "fixed_points": stored})
    progress_printer(n, n, "done")
    fps = das.flag_bayes_optimal([done[DEEP_AIM_STARTS[nm][0]] for nm in names])
    out["fixed_points"] = fps
    if out_path:
        extra = [f for lb, f in done.items() if lb not in {x["start"] for x in fps}]
        write_json(out_path, {**out, "complete": True, "fixed_points": fps + extra})
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM, two tied attention layers, T=2, skip={skip}, rho={list(rho)}, alpha={alpha} "
         f"(alpha_PR = {o['alpha_PR']:.6g}):"]
        + [f"  from {f['start']}: " + ("perfect recovery (mmse 0, both layers)"
                                       if f["perfect_recovery"] else "; ".join(
            f"layer {i + 1}: mmse = {L['mmse']:.5g} +- {L['mmse_error']:.1e}, q_hat = "
            f"{L['q_hat']:.5g}" for i, L in enumerate(f["layers"]))
            + f"; phi = {f['phi']:.6g} +- {f['phi_error']:.1e}, e_gen = {f['e_gen']:.5g} +- "
            f"{f['e_gen_error']:.1e}")
           + f", stable = {f['stable']}" + (", Bayes-optimal" if f["bayes_optimal"] else "")
           for f in fps]
        + [o["note"]]))


#: measured wall seconds of one ``se --model aim --layers 2 --mmse1 V`` point by --points (c =
#: 0.5, rho = (0.5, 0.5), v1 = 0.05, seed 0, e_gen included; two cores shared with other jobs:
#: upper bounds at that load; docs/deep_aim.md section 4, "The branch with alpha as an output");
#: at c >= 1 about 4 s at 2^5
DEEP_AIM_BRANCH_SECONDS = {5: 15.0, 9: 425.0}


def deep_aim_branch_se(kw: dict, v1: float, *, starts: str | None = None,
                       out_path: str | None = None, resume: bool = False,
                       points: int | None = None) -> None:
    """``se --model aim --layers 2 --mmse1 V``: the SE fixed point on the finite branch at
    mmse_1 = V with alpha an output and its bar (numerics.deep_aim_se.branch_point; THEORY 1.6,
    docs/deep_aim.md section 4, "The branch with alpha as an output"): alpha, alpha_PR, alpha -
    alpha_PR, per layer mmse (mmse_1 exact), q_hat, the Jacobian eigenvalues of the map at that
    alpha, phi and e_gen. Randomised QMC, 2^points x 8, seed 0, as ``se``; ``out_path``: the JSON
    written atomically at the end."""
    import math

    from .cli_common import progress_printer
    from .numerics import deep_aim_se as das

    if not (isinstance(v1, float) and math.isfinite(v1) and 0 < v1 <= 1):
        fail("--mmse1", "in (0, 1] (mmse_1 on the finite branch of --model aim --layers 2; "
             "alpha is the output)", v1)
    if kw.get("noise") is not None:
        fail("--noise", "omitted with --mmse1 (the branch with alpha an output is the "
             "noiseless SE's)", kw["noise"])
    for opt, value in (("--starts", starts), ("--resume", resume or None)):
        if value is not None:
            fail(opt, "omitted with --mmse1 (one branch point: no starts, nothing to resume)",
                 value)
    model = deep_aim_se_model(kw, design_ok=True, small_skip_ok=True)
    m = deep_aim_points(points)
    if out_path:
        from .tables import check_writable

        check_writable(out_path, "--out")
    if model.skip < 1:
        import click

        click.echo(f"expected cost at skip {model.skip:g} < 1: 2^{m} x 8 points; measured on two "
                   "shared cores at c = 0.5, v1 = 0.05: " + ", ".join(
                       f"{t:.0f} s at 2^{k}" for k, t in sorted(DEEP_AIM_BRANCH_SECONDS.items())),
                   err=True)
    progress_printer(0, 1, f"branch point at mmse_1 = {v1:g} (alpha an output)")
    r = das.branch_point(model, v1=v1, m=m, scrambles=8, seed=0)
    progress_printer(1, 1, "done")
    skip, beta, rho = model.skip, model.beta, (model.rho1, model.rho2)
    eig = r["jacobian_eigenvalues"]
    fp = {"start": f"branch at mmse_1 = {v1:g}", **r,   # complex eigenvalues: cli_common._finite
          "jacobian_eigenvalue_moduli": sorted(abs(complex(x)) for x in eig)}
    out = {"model": "aim", "layers": 2, "channel": "softmax", "tokens": 2, "skip": skip,
           "beta": beta, "rho": list(rho), "mmse1": v1, "alpha": r["alpha"],
           "alpha_error": r["alpha_error"], "design": model.design, "alpha_PR": r["alpha_PR"],
           "method": f"randomised QMC (8 scrambles x 2^{m} Sobol points, seed 0) over the output "
                     "side; alpha_1(V) = q_hat_1*(V1)/(2 E_1(V)) = alpha_2(V) = q_hat_2*(V2)/"
                     "(2 E_2(V)) solved for V2 at the given V1 (Brent in log V2), alpha the "
                     "output; error = 2.5 standard errors plus the inner rule's two-step "
                     "difference, through the branch's 2 x 2 sensitivity, plus the root "
                     "tolerance; mmse_1 exact",
           "note": "jacobian_eigenvalues: of the SE map at the output alpha (stable: all of "
                   "modulus < 1); phi ranks coexisting fixed points at one alpha; e_gen: "
                   "E||y(h) - y(h')||^2/2, h, h' two posterior draws given omega",
           "options": _deep_aim_key("se", model, m, mmse1=v1),
           "fixed_points": [fp]}
    if out_path:
        write_json(out_path, {**out, "complete": True})

    def text(o: dict) -> str:
        f = o["fixed_points"][0]
        L1, L2 = f["layers"]
        return "\n".join([
            f"AIM, two tied attention layers, T=2, skip={skip}, rho={list(rho)}, mmse_1={v1:g} "
            f"(alpha an output; alpha_PR = {o['alpha_PR']:.6g}):",
            f"  on the branch: alpha = {f['alpha']:.6g} +- {f['alpha_error']:.1e}, alpha - "
            f"alpha_PR = {f['alpha_minus_PR']:.5g} +- {f['alpha_error']:.1e}; layer 1: mmse = "
            f"{L1['mmse']:.5g} (exact), q_hat = {L1['q_hat']:.5g}; layer 2: mmse = "
            f"{L2['mmse']:.5g} +- {L2['mmse_error']:.1e}, q_hat = {L2['q_hat']:.5g}"
            + (f"; phi = {f['phi']:.6g} +- {f['phi_error']:.1e}" if f.get("phi") is not None
               else "")
            + (f", e_gen = {f['e_gen']:.5g} +- {f['e_gen_error']:.1e}"
               if f.get("e_gen") is not None else "")
            + "; |Jacobian eigenvalues| = "
            + ", ".join(f"{x:.4g}" for x in f["jacobian_eigenvalue_moduli"])
            + f", stable = {f['stable']}",
            o["note"]])

    emit(out, kw["as_json"], text)


def _deep_aim_noisy_se(kw: dict, alpha: float, model) -> None:
    """``se --model aim --layers 2 --noise D``: the SE fixed point of the noisy two-layer model
    from the uninformed start (randomised QMC, numerics/deep_aim_noisy.fixed_point_noisy; a few
    minutes on two cores)."""
    from .cli_common import progress_printer
    from .numerics import deep_aim_noisy as dan

    delta = _deep_aim_noise(kw)
    rho = (model.rho1, model.rho2)
    progress_printer(0, 1, f"start uninformed (mmse 1, 1), Delta = {delta:g}")
    fp = dan.fixed_point_noisy(alpha=alpha, rho=rho, Delta=delta, skip=model.skip,
                               beta=model.beta, design=model.design)
    progress_printer(1, 1, "done")
    out = {"model": "aim", "layers": 2, "channel": "softmax", "tokens": 2, "skip": model.skip,
           "beta": model.beta, "rho": list(rho), "noise": delta, "alpha": alpha,
           "design": model.design,
           "method": "randomised QMC (8 scrambles x 2^9 points) over the output side, inner "
                     "self-normalised importance sampling from the prior at two sizes; error = "
                     "2.5 standard errors + the inner-size difference, through (I - J)^-1, + "
                     "the last step",
           "note": "one start (uninformed); phi's Psi_out is that of the density of the noisy "
                   "statistics (ranks fixed points at one alpha and Delta only); e_gen: the "
                   "noisy output's Bayes error (clean part + 4 Delta), e_gen_clean the clean "
                   "part, e_gen_plugin_clean the clean plug-in error",
           "fixed_points": [{"start": "uninformed", **fp}]}
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"AIM, two tied attention layers, T=2, skip={model.skip}, rho={list(rho)}, output "
         f"noise Delta={delta}, alpha={alpha}:"]
        + ["  from uninformed: " + "; ".join(
            f"layer {i + 1}: mmse = {L['mmse']:.5g} +- {L['mmse_error']:.1e}, q_hat = "
            f"{L['q_hat']:.5g}" for i, L in enumerate(fp["layers"]))
           + f"; e_gen = {fp['e_gen']:.5g} +- {fp['e_gen_error']:.1e}, stable = {fp['stable']}",
           o["note"]]))


def _flat_rows(rows: list[dict]) -> list[dict]:
    """The CSV rows of the deep curve: alpha, per layer mmse/q/q_hat with errors, phi, e_gen."""
    flat = []
    for r in rows:
        row = {"alpha": r["alpha"]}
        for i, L in enumerate(r["layers"], start=1):
            for k in ("mmse", "q", "q_hat"):
                row[f"{k}_{i}"] = L[k]
                row[f"{k}_{i}_error"] = L[f"{k}_error"]
        for k in ("phi", "phi_error", "e_gen", "e_gen_error", "e_gen_plugin",
                  "e_gen_plugin_error", "perfect_recovery", "stable"):
            row[k] = r.get(k)
        flat.append(row)
    return flat


#: the suffix of ``curve --model aim --layers 2 --out F``'s state file (F + suffix): the finished
#: alphas' fixed points, written atomically after each alpha (``--resume`` continues from it)
DEEP_CURVE_STATE = ".partial.json"


def deep_aim_curve(kw: dict, grid, out_path: str | None, plot_path: str | None, *,
                   resume: bool = False, points: int | None = None) -> None:
    """``curve --model aim --layers 2 --rho r1,r2 --skip c --alphas a:b:n``: the branch from the
    uninformed start, each alpha warm-started from the previous one (docs/deep_aim.md 5); CSV
    columns alpha, per layer mmse/q/q_hat with errors, phi, e_gen, perfect_recovery. Progress
    per alpha and iteration on stderr; with ``out_path`` each finished alpha goes (atomically)
    to the CSV and to the state file ``out_path`` + DEEP_CURVE_STATE, and ``resume`` reuses the
    leading alphas stored there (same options, same grid order)."""
    from .cli_common import progress_printer
    from .numerics import deep_aim_se as das

    alphas = [float(a) for a in grid]
    if any(a <= 0 for a in alphas):
        fail("--alphas", "a grid of alpha > 0 for --model aim --layers 2", alphas)
    model = deep_aim_se_model(kw, design_ok=True, small_skip_ok=True)
    m = deep_aim_points(points)
    if resume and not out_path:
        fail("--resume", "used with --out FILE (the CSV of an earlier run)", True)
    key = _deep_aim_key("curve", model, m)
    state = out_path + DEEP_CURVE_STATE if out_path else None
    done: list[dict] = []
    if resume:
        stored = read_resume_state(state, key, f"state file (--out + {DEEP_CURVE_STATE})")
        done = list((stored or {}).get("rows", []))
    reused = 0
    for d, a in zip(done, alphas):
        if d.get("alpha") != a:
            break
        reused += 1
    if model.skip < 1 and reused < len(alphas):
        _deep_aim_cost(model, m, len(alphas) - reused, "alpha")

    def store(rows: list[dict]) -> None:
        from .tables import write_csv

        write_json(state, {"options": key, "rows": rows})
        write_csv(out_path, _flat_rows(rows))

    current = {"hook": None}

    def progress(k: int, n: int, text: str) -> None:
        progress_printer(k, n, text)
        current["hook"] = _iteration_printer(k, n, text)

    rows = das.curve(model, alphas=alphas, m=m, progress=progress, done=done,
                     on_row=store if out_path else None,
                     progress_iter=lambda *a: current["hook"](*a))
    flat = _flat_rows(rows)
    if out_path:
        from .tables import write_csv

        write_csv(out_path, flat)
    if plot_path:
        from .plots import plot_curve

        plot_curve(flat, ["mmse_1", "mmse_2"], path=plot_path,
                   title=f"two tied layers, T=2, c={model.skip:g}, "
                         f"rho=({model.rho1:g}, {model.rho2:g})")
    emit({"model": "aim", "layers": 2, "skip": model.skip, "beta": model.beta,
          "rho": [model.rho1, model.rho2], "design": model.design, "rows": flat}, kw["as_json"],
         lambda o: "\n".join(
        f"alpha={r['alpha']:.6g}: mmse_1 = {r['mmse_1']:.5g} +- {r['mmse_1_error']:.1e}, "
        f"mmse_2 = {r['mmse_2']:.5g} +- {r['mmse_2_error']:.1e}" for r in o["rows"]))


#: trapezoid step of the e_gen rule along the tabulated hardmax curve (in units of sqrt V / the
#: whitened scale; measured: steps 0.6 and 1.2 agree to 1e-12 at q/V = 50 and 500)
EGEN_STEP = 1.2


def hardmax_egen_row(row: dict, rho: float) -> dict:
    """e_gen at a tabulated fixed point (THEORY 1.5): the rule's error plus |de_gen/dmmse| times
    the fixed point's mmse error (one-sided difference)."""
    from .numerics import hardmax_se as hse

    Q0, v, dv = 1.0 + rho, row["mmse"], max(row["error"], 1e-7)
    e = hse.generalisation_error(T=3, q=Q0 - v, V=v, step=EGEN_STEP)
    e2 = hse.generalisation_error(T=3, q=Q0 - v - dv, V=v + dv, step=EGEN_STEP)
    slope = abs(e2.value - e.value) / dv
    return {"e_gen": e.value, "e_gen_error": e.error + e2.error + slope * row["error"]}


def _egen_task(qv: tuple[float, float]) -> tuple[float, float]:
    from .numerics import hardmax_se as hse

    e = hse.generalisation_error(T=3, q=qv[0], V=qv[1], step=EGEN_STEP)
    return e.value, e.error


def hardmax_egen_rows(rows: list[dict], rho: float, *, workers: int = 2) -> list[dict]:
    """e_gen at every tabulated fixed point of a curve (THEORY 1.5): one evaluation per row,
    the most expensive (smallest mmse) first, on ``workers`` forked processes. The mmse error's
    share is |de_gen/dmmse| x error, the slope taken as twice the larger difference quotient to
    the neighbouring rows in mmse (e_gen is smooth and monotone along the curve); with fewer than
    two distinct mmse values, :func:`hardmax_egen_row`'s one-sided difference instead."""
    Q0 = 1.0 + rho
    mmses = sorted({r["mmse"] for r in rows})
    if len(mmses) < 2:
        return [hardmax_egen_row(r, rho) for r in rows]
    jobs = [(Q0 - v, v) for v in mmses]
    if workers > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(min(workers, len(jobs))) as pool:
            values = pool.map(_egen_task, jobs, chunksize=1)
    else:
        values = [_egen_task(j) for j in jobs]
    e = dict(zip(mmses, values))
    slope = {}
    for i, v in enumerate(mmses):
        quotients = [abs(e[w][0] - e[v][0]) / abs(w - v)
                     for w in (mmses[max(i - 1, 0)], mmses[min(i + 1, len(mmses) - 1)]) if w != v]
        slope[v] = 2 * max(quotients)
    return [{"e_gen": e[r["mmse"]][0],
             "e_gen_error": e[r["mmse"]][1] + slope[r["mmse"]] * r["error"]} for r in rows]


def hardmax_curve(kw: dict, grid, out_path: str | None, plot_path: str | None) -> None:
    """``curve --channel hardmax --tokens 3|4|5 --rho R --alphas a:b:n``: at each alpha the
    Bayes-optimal SE fixed point with phi and e_gen (THEORY 1.1, 1.5; docs/hardmax_se.md).
    T = 4, 5: randomised QMC curves of E_hat(r) once (hardmax_qmc_rows), q/V <= QMC_R_MAX.
    rho >= 4/9: from the shipped E_hat(s = 1/sqrt(q/V)) table, every alpha (about a second for
    the curve plus the e_gen rule, seconds per row at large alpha); smaller rho: the direct
    route per alpha (about a minute each; mmse >= Q0/3 only, an empty row with a note beyond)."""
    from .cli_common import progress_printer
    from .domains import RHO
    from .numerics import hardmax_se as hse
    from .numerics.records import ConvergenceError

    if kw["tokens"] not in (3, 4, 5):
        fail("--tokens", "2 (closed forms), 3, 4 or 5 for hardmax's curve", kw["tokens"])
    T = kw["tokens"]
    for name in ("beta", "delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), f"omitted for channel hardmax --tokens {T}",
                 kw[name])
    alphas = [float(a) for a in grid]
    if any(a <= 0 for a in alphas):
        fail("--alphas", f"a grid of alpha > 0 for hardmax --tokens {T}", alphas)
    try:
        rho = RHO.check(0.5 if kw.get("rho") is None else kw["rho"])
    except DomainError as e:
        raise relabel(e) from None
    if T in (4, 5):
        if rho >= QMC_R_MAX:
            fail("--rho", f"below {QMC_R_MAX:g} for hardmax --tokens {T}", rho)
        rows = []
        for fps in hardmax_qmc_rows(T, rho, alphas, with_egen=True):
            best = next((f for f in fps if f.get("bayes_optimal")), None)
            if best is None:
                rows.append({"alpha": fps[0]["alpha"], "note": fps[0].get("note", "")})
                continue
            rows.append({"alpha": best["alpha"], "mmse": best["mmse"], "mmse_error": best["error"],
                         "q": best["q"], "phi": best["phi"], "e_gen": best["e_gen"],
                         "e_gen_error": best["e_gen_error"], "fixed_points": len(fps),
                         "method": f"E_hat(r) by randomised QMC (hardmax_qmc, T = {T})"})
        _write_hardmax_curve(rows, T, rho, out_path, plot_path, kw)
        return
    v_min = (1.0 + rho) / (1.0 + hse.max_ratio(3))
    tabulated = rho >= 1 / hse.t3_table()["s_max"] ** 2
    rows = []
    if tabulated:
        fps = hse.se_curve_tabulated(rho=rho, alphas=alphas, table=hse.t3_table())
        progress_printer(0, len(alphas), "e_gen at every fixed point (two processes)")
        egens = hardmax_egen_rows(fps, rho)
    for k, a in enumerate(alphas):
        progress_printer(k, len(alphas), f"alpha = {a:g}")
        row = {"alpha": a}
        if tabulated:
            best = fps[k]
            row.update({"mmse": best["mmse"], "mmse_error": best["error"],
                        "q": best["q"], "q_hat": 2 * a * best["E"], "phi": best["phi"],
                        **egens[k], "fixed_points": best["n_fixed_points"],
                        "bayes_optimal": best["bayes_optimal"],
                        "method": "E_hat table in 1/sqrt(q/V) "
                                  f"({len(hse.T3_TABLE_NODES) + 1} nodes)"})
            rows.append(row)
            continue
        try:
            fps_a = hse.se_fixed_points(T=3, alpha=a, rho=rho)
        except ConvergenceError:
            row["note"] = f"no fixed point with mmse >= {v_min:.6g} (beyond the resolved range)"
            rows.append(row)
            continue
        best = next((f for f in fps_a if f["bayes_optimal"]), None)
        if best is not None:
            row.update({"mmse": best["mmse"], "mmse_error": best["error"], "q": best["q"],
                        "q_hat": best["q_hat"], "phi": best["phi"], "e_gen": best["e_gen"],
                        "e_gen_error": best["e_gen_error"]})
        row["fixed_points"] = len(fps_a)
        row["method"] = "tensor Gauss-Hermite outer rule, three orders"
        rows.append(row)
    progress_printer(len(alphas), len(alphas), "done")
    _write_hardmax_curve(rows, T, rho, out_path, plot_path, kw)


def _write_hardmax_curve(rows: list[dict], T: int, rho: float, out_path: str | None,
                         plot_path: str | None, kw: dict) -> None:
    """CSV, figure and printed rows of a hardmax curve at T >= 3."""
    if out_path:
        from .tables import write_csv

        write_csv(out_path, rows)
    if plot_path:
        from .plots import plot_curve

        plot_curve([r for r in rows if "mmse" in r], ["mmse", "e_gen"], path=plot_path,
                   title=f"AIM hardmax, T={T}, rho={rho:g}")
    emit({"model": "aim", "channel": "hardmax", "tokens": T, "rho": rho, "rows": rows},
         kw["as_json"], lambda o: "\n".join(
             f"alpha={r['alpha']:.6g}: " + (f"mmse = {r['mmse']:.8g} +- {r['mmse_error']:.1e}, "
                                             f"e_gen = {r['e_gen']:.8g}" if "mmse" in r
                                             else r.get("note", "no stable fixed point"))
             for r in o["rows"]))


def wants_piecewise_amp(kw: dict) -> bool:
    """``amp`` of hardmax at T >= 3 or of sparsemax (the piecewise AMP views of
    aim_sym.piecewise_amp; polyhedral channel files are routed by :func:`piecewise_amp` too)."""
    ch = kw.get("channel")
    return not kw.get("channel_file") and (
        (ch == "hardmax" and kw["tokens"] >= 3) or ch == "sparsemax")


def piecewise_amp(kw: dict, *, alpha: float, damping, out_path: str | None, dim: int,
                  seeds: int, max_iter: int, rng_seed: int, model=None) -> None:
    """``amp --channel hardmax --tokens 3..5``, ``--channel sparsemax [--tokens 3] [--beta B]``
    and ``--channel-file F`` of a polyhedral file (``model``: its AIM): GAMP-RIE against the
    channel's own SE, with AMP's test error beside e_gen (docs/amp_piecewise.md)."""
    from .cli_common import progress_printer
    from .domains import RHO
    from .piecewise_amp import run_piecewise_amp

    if model is not None:
        channel, tokens, beta = "file", None, None
        rho = model.rho
    else:
        channel, tokens = kw["channel"], kw["tokens"]
        allowed = (3, 5) if channel == "hardmax" else (2, 3)
        if not allowed[0] <= tokens <= allowed[1]:
            fail("--tokens", f"{allowed[0]}..{allowed[1]} for amp --channel {channel}"
                 + (" (T = 2: the symbolic route)" if channel == "hardmax" else ""), tokens)
        banned = ("beta", "delta_out", "epsilon") if channel == "hardmax" else ("delta_out",
                                                                              "epsilon")
        for name in banned:
            if kw.get(name) is not None:
                fail("--" + name.replace("_", "-"), f"omitted for amp --channel {channel}",
                     kw[name])
        if kw.get("params"):
            fail("--param", f"omitted for amp --channel {channel}", kw["params"])
        beta = kw.get("beta")
        rho = RHO.check(0.5 if kw.get("rho") is None else kw["rho"])
    r = run_piecewise_amp(channel=channel, tokens=tokens, beta=beta, polyhedral=model, rho=rho,
                          alpha=alpha, dim=dim, seeds=seeds, max_iter=max_iter,
                          damping=damping, rng_seed=rng_seed, progress=progress_printer,
                          out=out_path)
    d = r.details
    out = {"alpha": float(alpha), "dim": dim, "mean": r.value, "stderr": r.error,
           "se_prediction": d["se_prediction"], "per_seed": d["per_seed"],
           "per_iteration": d["per_iteration"], "converged": d["converged"],
           "dampings": d["dampings"], "interrupted": d["interrupted"], "dg_form": d["dg_form"],
           **{k: d[k] for k in ("test_error", "test_error_stderr", "test_error_plugin",
                                "test_error_plugin_stderr", "e_gen_se", "e_gen_se_error",
                                "e_gen_se_plugin", "e_gen_se_plugin_error") if k in d}}

    def text(o):
        line = (f"alpha={o['alpha']:.6g} D={dim}: AMP {o['mean']:.6g} +- "
                f"{(o['stderr'] or 0):.2g}  SE {o['se_prediction']:.6g}")
        if o.get("test_error") is not None and o.get("e_gen_se") is not None:
            line += (f"\n  test error {o['test_error']:.6g} +- {(o['test_error_stderr'] or 0):.2g}"
                     f"  SE e_gen {o['e_gen_se']:.6g} +- {(o['e_gen_se_error'] or 0):.2g}")
        return line

    emit(out, kw["as_json"], text)
