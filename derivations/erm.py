"""Equation sheet of the ERM of one tied attention layer (THEORY 3): the SE equations derived as
the stationarity conditions of the training-loss potential Phi.

J(delta, eps) and the output-side Moreau envelope E(q, m, Sigma) are kept as undefined
functions; delta = sqrt(q_hat)/m_hat, eps = 2 lambda/m_hat enter by the chain rule.  The prior
side (d Phi / d hats = 0) is solved for (q, m, Sigma); the output side (d Phi / d (q, m, Sigma) = 0)
gives the hats as derivatives of E, which Stein's lemma turns into the moments of
numerics/erm_output.py (stated in the sheet, checked numerically in tests/test_erm_se.py).
"""

import sympy as sp

from aim_sym.sheets import canonical_block

q, Sigma, q_hat, m_hat, Sigma_hat, lam, alpha = sp.symbols(
    "q Sigma q_hat m_hat Sigma_hat lam alpha", positive=True)
m = sp.Symbol("m", real=True)
delta, eps = sp.symbols("delta epsilon", real=True)
J = sp.Function("J")(delta, eps)
E = sp.Function("Envelope")(q, m, Sigma)
DELTA = sp.sqrt(q_hat) / m_hat
EPS = 2 * lam / m_hat


def potential() -> sp.Expr:
    """Phi(q, m, Sigma, q_hat, m_hat, Sigma_hat) with J(delta, eps), delta and eps free."""
    return ((q_hat * Sigma - Sigma_hat * q) / 4 + m_hat * m / 2 + alpha * E
            - m_hat**2 * J / (4 * Sigma_hat))


def _d(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """d/dx with delta = sqrt(q_hat)/m_hat and eps = 2 lambda/m_hat (chain rule), then the
    substitution delta, eps -> their values kept symbolic as delta, eps."""
    return (sp.diff(expr, x) + sp.diff(expr, delta) * sp.diff(DELTA, x)
            + sp.diff(expr, eps) * sp.diff(EPS, x))


def expressions() -> dict[str, sp.Expr]:
    phi = potential()
    prior = sp.solve([_d(phi, v) for v in (q_hat, m_hat, Sigma_hat)], [q, m, Sigma], dict=True)
    assert len(prior) == 1
    output = sp.solve([_d(phi, v) for v in (q, m, Sigma)], [q_hat, m_hat, Sigma_hat], dict=True)
    assert len(output) == 1
    # the prior side in the delta, eps of the sheet: sqrt(q_hat) = delta m_hat
    sub = {sp.sqrt(q_hat): delta * m_hat}
    out = {"Phi": phi}
    for name, sym in (("q", q), ("m", m), ("Sigma", Sigma)):
        out[name] = sp.simplify(prior[0][sym].subs(sub))
    for name, sym in (("q_hat", q_hat), ("m_hat", m_hat), ("Sigma_hat", Sigma_hat)):
        out[name] = sp.simplify(output[0][sym])
    return out


def sheet() -> str:
    ex = expressions()
    t = sp.latex
    L = ["# ERM, one tied attention layer (THEORY 3)", "",
         "Student $\\hat S = W^T W/\\sqrt{pd}$, square loss on all $T^2$ softmax outputs, weight "
         "decay $\\lambda\\, d\\,\\|S\\|_*$.  $J(\\delta, \\epsilon) = \\int_\\epsilon^\\infty "
         "(x - \\epsilon)^2 d\\mu_\\delta$ with $\\mu_\\delta = \\mu_{S_0} \\boxplus$ semicircle "
         "of variance $\\delta^2$; $\\delta = \\sqrt{\\hat q}/\\hat m$, $\\epsilon = 2\\lambda/\\hat m$.  "
         "$\\mathrm{Envelope}(q, m, \\Sigma) = E$ is the expected Moreau envelope "
         "$\\mathbb E \\min_u [\\sum_{a \\le b} (u_{ab} - z_{ab})^2/(2\\Sigma) + \\ell(y, u)]$.", "",
         "## Training-loss potential", "", f"$$\\Phi = {t(ex['Phi'])}$$", "",
         "## Prior side: $\\partial \\Phi / \\partial(\\hat q, \\hat m, \\hat\\Sigma) = 0$", ""]
    L += [f"$${name} = {t(ex[name])}$$" for name in ("q", "m", "Sigma")]
    L += ["", "## Output side: $\\partial \\Phi / \\partial(q, m, \\Sigma) = 0$", ""]
    L += [f"$${name} = {t(ex[name])}$$" for name in ("q_hat", "m_hat", "Sigma_hat")]
    L += ["", "With $z = (m/Q_0') z_0' + \\sqrt{q - m^2/Q_0'}\\,\\xi$ ($z_0'$ the noisy teacher "
          "field, $Q_0' = Q_0 + \\Delta/2$) and $\\partial_z \\min_u = -(p - z)/\\Sigma$, Stein's lemma "
          "gives $\\partial_q E = -\\mathbb E[\\sum (p - z)(Q_0' z - m z_0')]/(2\\Sigma(Q_0' q - m^2))$, "
          "$\\partial_m E = -\\mathbb E[\\sum (p - z)(q z_0' - m z)]/(\\Sigma(Q_0' q - m^2))$, "
          "$\\partial_\\Sigma E = -\\mathbb E[\\sum (p - z)^2]/(2\\Sigma^2)$: the moments of "
          "numerics/erm_output.py.", ""]
    return "\n".join(L) + "\n" + canonical_block(ex)


SHEETS = {"erm_T2.md": (sheet, expressions)}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
