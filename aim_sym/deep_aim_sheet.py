"""Symbolic derivation of the deep AIM (two tied attention layers, T = 2; THEORY 1.6).

Each step of docs/deep_aim.md's "exact reduction" is derived here from the model's definition
(A = c I + softmax_beta(H1) row-wise, M = A H2 A^T, y = softmax_beta(M) row-wise) and verified by
sympy, not assumed: the row sums of A, det A, the Jacobian of H2 -> A H2 A^T on symmetric
matrices, the fibre direction, what y fixes, the statistics z in terms of H2, the whitened
coordinates, the Gaussian density of z given H1 (the integrand of Z_out), the score form of g_out
for each index, the SE as the stationary point of Phi (checked on a two-index Gaussian channel
where Psi_out is closed form), the small-width threshold and the K = 1 limit c -> infinity.
The integrals over H1 are numeric (aim_sym.numerics.deep_aim_se).
"""

from __future__ import annotations

import sympy as sp

from .sheets import canonical_block

c = sp.Symbol("c", positive=True)
beta = sp.Symbol("beta", positive=True)
V1, V2 = sp.symbols("V1 V2", positive=True)
p, r = sp.symbols("p r", positive=True)
t = sp.Symbol("t", real=True)
H1 = sp.symbols("h1_11 h1_12 h1_22", real=True)
H2 = sp.symbols("h2_11 h2_12 h2_22", real=True)
xi1, xi2 = sp.symbols("xi1 xi2", real=True)
a1, a2, b1, b2 = sp.symbols("a1 a2 b1 b2", real=True)
z1, z2 = sp.symbols("z1 z2", real=True)
alpha, Delta = sp.symbols("alpha Delta", positive=True)
q1, q2, qh1, qh2 = sp.symbols("q1 q2 qhat1 qhat2", positive=True)
Q01, Q02 = sp.symbols("Q0_1 Q0_2", positive=True)
ONE = sp.Matrix([1, 1])
ELL = sp.Matrix([1, -1])


def sym(h) -> sp.Matrix:
    """The symmetric 2 x 2 matrix of entries (h11, h12, h22)."""
    return sp.Matrix([[h[0], h[1]], [h[1], h[2]]])


def row_softmax(M: sp.Matrix, b=beta) -> sp.Matrix:
    """softmax_beta applied to each row of M."""
    rows = []
    for i in range(M.rows):
        e = [sp.exp(b * M[i, j]) for j in range(M.cols)]
        rows.append([x / sum(e) for x in e])
    return sp.Matrix(rows)


def attention(p_=p, r_=r) -> sp.Matrix:
    """A = c I + softmax_beta(H1) with diagonal softmax weights p, r (rows sum to 1 + c)."""
    return sp.Matrix([[c + p_, 1 - p_], [1 - r_, c + r_]])


def _zero(e) -> bool:
    e = sp.Matrix(e) if isinstance(e, (list, sp.MatrixBase)) else sp.Matrix([e])
    return all(sp.simplify(x) == 0 for x in e)


def verified_steps() -> dict[str, bool]:
    """Each reduction step of THEORY 1.6 / docs/deep_aim.md, True where sympy verifies it."""
    A = attention()
    mu = c + p + r - 1
    kappa = p - r
    Hm1, Hm2 = sym(H1), sym(H2)
    d1, d2 = H1[0] - H1[1], H1[2] - H1[1]
    out: dict[str, bool] = {}
    S = row_softmax(Hm1)
    out["p = expit(beta (h11 - h12)), r = expit(beta (h22 - h12))"] = _zero(
        [S[0, 0] - 1 / (1 + sp.exp(-beta * d1)), S[1, 1] - 1 / (1 + sp.exp(-beta * d2))])
    out["A 1 = (1 + c) 1"] = _zero(A * ONE - (1 + c) * ONE)
    out["l^T A = mu l^T"] = _zero(ELL.T * A - mu * ELL.T)
    out["A^T 1 = (1 + c) 1 + kappa l"] = _zero(A.T * ONE - (1 + c) * ONE - kappa * ELL)
    out["det A = (1 + c) mu"] = _zero(A.det() - (1 + c) * mu)
    G = sp.Matrix(2, 2, sp.symbols("g11 g12 g21 g22", real=True))
    M = G * Hm2 * G.T
    jac = sp.Matrix([M[0, 0], M[0, 1], M[1, 1]]).jacobian(list(H2)).det()
    out["Jacobian of (h11, h12, h22) -> (M11, M12, M22) = det(A)^3"] = _zero(jac - G.det() ** 3)
    v = G.inv() * ONE
    out["fibre direction: A (v v^T) A^T = 1 1^T, v = A^-1 1"] = _zero(G * v * v.T * G.T
                                                                    - sp.ones(2, 2))
    Mv = sp.Matrix(2, 2, sp.symbols("m11 m12 m21 m22", real=True))
    out["y(M + t 1 1^T) = y(M)"] = _zero(row_softmax(Mv + t * sp.ones(2, 2)) - row_softmax(Mv))
    M = A * Hm2 * A.T
    X, Y = (ELL.T * Hm2 * ELL)[0], (ELL.T * Hm2 * ONE)[0]
    out["z1 = l^T M l = mu^2 X"] = _zero((ELL.T * M * ELL)[0] - mu**2 * X)
    out["z2 = l^T M 1 = mu ((1 + c) Y + kappa X)"] = _zero((ELL.T * M * ONE)[0]
                                                           - mu * ((1 + c) * Y + kappa * X))
    C = sp.diag(2, 1, 2)  # Var h_ab = (1 + delta_ab) V (V = 1 here)
    L2 = sp.Matrix([[1, -2, 1], [1, 0, -1], [1, 2, 1]])  # X, Y, W
    out["Cov(X, Y, W) = diag(8, 4, 8) V2"] = _zero(L2 * C * L2.T - sp.diag(8, 4, 8))
    L1 = sp.Matrix([[1 / sp.sqrt(8), -2 / sp.sqrt(8), 1 / sp.sqrt(8)], [sp.Rational(1, 2), 0,
                   -sp.Rational(1, 2)], [1 / sp.sqrt(8), 2 / sp.sqrt(8), 1 / sp.sqrt(8)]])
    out["xi1 = (d1 + d2)/sqrt 8, xi2 = (d1 - d2)/2, unseen: white (Cov = I V1)"] = _zero(
        L1 * C * L1.T - sp.eye(3))
    return out


def _gauss2(x: sp.Matrix, m: sp.Matrix, S: sp.Matrix) -> sp.Expr:
    d = x - m
    return sp.exp(-(d.T * S.inv() * d)[0] / 2) / (2 * sp.pi * sp.sqrt(S.det()))


def z_density() -> tuple[sp.Expr, sp.Expr]:
    """The Gaussian density of z = (z1, z2) given H1's seen coordinates (xi1, xi2), for H2 with
    whitened seen mean (b1, b2) and variance V2: (generic form, fibre-point form); they agree."""
    mu, kappa = sp.symbols("mu kappa", real=True)
    B = sp.Matrix([[mu**2, 0], [mu * kappa, mu * (1 + c)]])
    D = sp.diag(8, 4)
    mean = B * sp.Matrix([sp.sqrt(8) * b1, 2 * b2])
    generic = _gauss2(sp.Matrix([z1, z2]), mean, V2 * B * D * B.T)
    x1 = z1 / mu**2 / sp.sqrt(8)
    x2 = (z2 / mu - kappa * z1 / mu**2) / (1 + c) / 2
    fibre = (sp.exp(-((x1 - b1) ** 2 + (x2 - b2) ** 2) / (2 * V2))
             / (2 * sp.pi * V2 * 4 * sp.sqrt(2) * (1 + c) * sp.Abs(mu) ** 3))
    return generic, fibre


def layer1_weights() -> tuple[sp.Expr, sp.Expr]:
    """(mu, kappa) as functions of the whitened seen coordinates of H1."""
    d1, d2 = sp.sqrt(2) * xi1 + xi2, sp.sqrt(2) * xi1 - xi2
    pp, rr = 1 / (1 + sp.exp(-beta * d1)), 1 / (1 + sp.exp(-beta * d2))
    return c + pp + rr - 1, pp - rr


def deep_aim_expressions() -> dict[str, sp.Expr]:
    """Named expressions of the deep AIM derivation at T = 2 (the sheet's canonical content)."""
    mu, kappa = layer1_weights()
    _, fibre = z_density()
    integrand = (sp.exp(-((xi1 - a1) ** 2 + (xi2 - a2) ** 2) / (2 * V1)) / (2 * sp.pi * V1)
                 * fibre.subs({sp.Symbol("mu", real=True): mu,
                               sp.Symbol("kappa", real=True): kappa}))
    lim = [(xi1, -sp.oo, sp.oo), (xi2, -sp.oo, sp.oo)]
    Z = sp.Integral(integrand, *lim)
    out: dict[str, sp.Expr] = {"mu": mu, "kappa": kappa, "Z_out": Z}
    for name, var in (("g_out[1][a1]", a1), ("g_out[1][a2]", a2), ("g_out[2][b1]", b1),
                      ("g_out[2][b2]", b2)):
        # d/d(mean) of a Gaussian factor = (variable - mean)/variance: the score form
        out[name] = sp.Integral(sp.simplify(sp.diff(integrand, var) / integrand) * integrand,
                                *lim) / Z
    out.update(se_equations())
    out["alpha_bar_c[l]"] = 1 / (2 * sp.Symbol("S_l", positive=True))
    out["K=1 limit: z1/c^2"] = sp.limit(((c + p + r - 1) ** 2) / c**2, c, sp.oo) * sp.Symbol("X")
    out["K=1 limit: z2/c^2"] = sp.limit((c + p + r - 1) * (1 + c) / c**2, c, sp.oo) * sp.Symbol("Y")
    return {k: _canonical(v) for k, v in out.items()}


def _canonical(e: sp.Expr) -> sp.Expr:
    """``e`` re-read from its printed form: ``subs`` can leave a product unevaluated, which
    would make the stored sheet differ structurally from a fresh derivation of the same thing."""
    return sp.sympify(sp.sstr(e), locals={s.name: s for s in e.atoms(sp.Symbol)})


def se_equations() -> dict[str, sp.Expr]:
    """Stationarity of Phi = sum_l [-q_l qhat_l/4 + Psi_S(qhat_l; rho_l)] + alpha Psi_out(q1, q2):
    q_l = 4 Psi_S'(qhat_l), qhat_l = 4 alpha dPsi_out/dq_l (THEORY 1.1, 1.6)."""
    PsiS = sp.Function("Psi_S")
    PsiOut = sp.Function("Psi_out")
    Phi = (-q1 * qh1 / 4 - q2 * qh2 / 4 + PsiS(qh1) + PsiS(qh2) + alpha * PsiOut(q1, q2))
    return {"Phi": Phi,
            "q_1": sp.solve(sp.diff(Phi, qh1), q1)[0],
            "qhat_1": sp.solve(sp.diff(Phi, q1), qh1)[0],
            "qhat_2": sp.solve(sp.diff(Phi, q2), qh2)[0]}


def gaussian_check() -> bool:
    """On the two-index Gaussian channel y_ab = H1_ab + H2_ab + noise (variance (1 + delta_ab)
    Delta), Psi_out is closed form: 4 dPsi_out/dq_l = 2 E sum_{a<=b} (1 + delta_ab) (g^l_ab)^2,
    i.e. Phi's stationarity gives THEORY 1.6's qhat_l = 2 alpha E sum (1 + delta) (g^l)^2."""
    W = (Q01 - q1) + (Q02 - q2) + Delta
    # given omega, y_ab - omega1_ab - omega2_ab ~ N(0, (1 + delta_ab) W): E log Z per entry
    psi = sum(-sp.log(2 * sp.pi * w * W) / 2 - sp.Rational(1, 2) for w in (2, 1, 2))
    # g^l_ab = (y - omega1 - omega2)_ab / ((1 + delta_ab) W) for both l: E (1 + d) g^2 = 1 / W
    weighted = sum(w * (w * W) / (w * W) ** 2 for w in (2, 1, 2))
    return all(sp.simplify(4 * sp.diff(psi, q) - 2 * weighted) == 0 for q in (q1, q2))


def deep_aim_sheet() -> str:
    """Markdown + LaTeX equation sheet of the deep AIM at T = 2 (THEORY 1.6)."""
    steps = verified_steps()
    generic, fibre = z_density()
    density_ok = _same_density(generic, fibre)
    if not all(steps.values()) or not density_ok or not gaussian_check():  # pragma: no cover
        raise AssertionError("a step of the deep AIM derivation failed its symbolic check")
    ex = deep_aim_expressions()
    tx = sp.latex
    L = ["# Deep AIM, two tied attention layers, T = 2", "",
         "THEORY 1.6: $A = cI + \\mathrm{softmax}_\\beta(H_1)$ row-wise, $M = A H_2 A^T$, "
         "$y = \\mathrm{softmax}_\\beta(M)$ row-wise; $h^l_{ab} \\sim \\mathcal N(\\omega^l_{ab}, "
         "(1+\\delta_{ab}) V_l)$, $V_l = Q_{0,l} - q_l$.", "",
         "## Reduction steps (each verified by sympy when this sheet is written)", "",
         "| step | verified |", "|---|---|"]
    L += [f"| {k} | {'yes' if v else 'NO'} |" for k, v in steps.items()]
    L += ["", "Here $\\mu = c + p + r - 1$, $\\kappa = p - r$, $l = (1, -1)$, "
          "$X = l^T H_2 l$, $Y = l^T H_2 \\mathbf 1$, $W = \\mathbf 1^T H_2 \\mathbf 1$ "
          "($W$, the fibre direction, never enters). $y$ fixes $M$ up to $t\\mathbf 1\\mathbf 1^T$, "
          "hence exactly $z = (l^T M l, l^T M \\mathbf 1)$ "
          "($z_1 = s_1 + s_2$, $z_2 = s_1 - s_2$, $s_a = \\mathrm{logit}(y_{aa})/\\beta$: a "
          "$y$-only Jacobian).", "",
          "## Layer-1 weights in H1's whitened seen coordinates", "",
          f"$$\\mu = {tx(ex['mu'])},\\qquad \\kappa = {tx(ex['kappa'])}$$", "",
          "## Density of z given H1 (verified equal to the generic bivariate Gaussian "
          "$\\mathcal N(z; B m, V_2 B\\,\\mathrm{diag}(8,4) B^T)$, "
          "$B = [[\\mu^2, 0], [\\mu\\kappa, \\mu(1+c)]]$)", "",
          f"$$p(z \\mid \\xi) = {tx(fibre)}$$", "",
          "## Partition function and denoisers (integrals over H1's seen coordinates)", "",
          f"$$Z_{{\\rm out}} = {tx(ex['Z_out'])}$$", "",
          "$g^1 = \\nabla_a \\log Z_{\\rm out}$, $g^2 = \\nabla_b \\log Z_{\\rm out}$ in the "
          "whitened seen coordinates ($a$, $b$: the whitened means of $H_1$, $H_2$; the unseen "
          "coordinates have zero gradient):",
          f"$$g^1_{{a_1}} = {tx(ex['g_out[1][a1]'])}$$",
          f"$$g^2_{{b_1}} = {tx(ex['g_out[2][b1]'])}$$", "",
          "## State evolution: the stationary point of Phi", "",
          f"$$\\Phi = {tx(ex['Phi'])}$$",
          f"$$q_1 = {tx(ex['q_1'])},\\qquad \\hat q_1 = {tx(ex['qhat_1'])},\\qquad "
          f"\\hat q_2 = {tx(ex['qhat_2'])}$$",
          "On the two-index Gaussian channel (closed-form $\\Psi_{\\rm out}$) sympy verifies "
          "$4\\,\\partial_{q_l}\\Psi_{\\rm out} = 2\\,\\mathbb E\\sum_{a\\le b}(1+\\delta_{ab})"
          "(g^l_{ab})^2$: Phi's stationarity is THEORY 1.6's "
          "$\\hat q_l = 2\\alpha\\,\\mathbb E\\sum(1+\\delta)(g^l)^2$.", "",
          "## Small width and the K = 1 limit", "",
          f"$$\\bar\\alpha_{{c,l}} = {tx(ex['alpha_bar_c[l]'])},\\quad S_l = \\mathbb E_{{q=0,"
          "V=1}}\\sum_{a\\le b}(1+\\delta_{ab})(g^l_{ab})^2 \\le 2$$",
          "(`aim-sym threshold weak --model aim --layers 2 --small-width`). As "
          "$c \\to \\infty$: "
          f"$z_1/c^2 \\to {tx(ex['K=1 limit: z1/c^2'])}$, $z_2/c^2 \\to "
          f"{tx(ex['K=1 limit: z2/c^2'])}$: layer 1 drops out and layer 2 is the one-layer "
          "softmax AIM.", ""]
    return "\n".join(L) + "\n" + canonical_block(ex)


def _same_density(generic: sp.Expr, fibre: sp.Expr) -> bool:
    """The two forms of p(z | xi) agree: equal exponents and equal normalisations (the
    determinant squared; |mu|^3 against sqrt(mu^6))."""
    parts = []
    for e in (generic, fibre):
        e = sp.powsimp(sp.expand_power_base(e, force=True), combine="exp")
        expo = [f.args[0] for f in sp.Mul.make_args(e) if isinstance(f, sp.exp)]
        rest = sp.Mul(*[f for f in sp.Mul.make_args(e) if not isinstance(f, sp.exp)])
        parts.append((sp.Add(*expo), rest))
    (eg, ng), (ef, nf) = parts
    mu = sp.Symbol("mu", real=True)
    m = sp.Symbol("m", positive=True)
    same_norm = all(sp.simplify((ng**2 - nf**2).subs(mu, s * m)) == 0 for s in (1, -1))
    return sp.simplify(eg - ef) == 0 and same_norm
