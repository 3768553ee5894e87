"""Equation sheets: Markdown + LaTeX renderings of a derivation, with a canonical block.

A sheet shows, in paper notation, Z_out, g_out, dg_out/domega, the SE output map, the
free-entropy term and the stability (weak-recovery) expression. Its last block records every
expression as a sympy string so a test can regenerate the sheet and compare the *mathematics*
(canonical sympy forms), not the strings (:func:`compare_canonical`).
"""

from __future__ import annotations

import json
import re

import sympy as sp

from .channels import DiscreteChannel
from .output import derive
from .special import Phi, Phi2
from .symbols import V, alpha, latex_names, q

CANON_START = "<!-- canonical sympy forms, used by tests/test_sheets.py -->"


def _tex(e, T: int) -> str:
    return sp.latex(e, symbol_names=latex_names(T))


def aim_expressions(ch) -> dict[str, sp.Expr]:
    """Named expressions of an AIM channel's derivation (the sheet's content)."""
    d = derive(ch)
    out: dict[str, sp.Expr] = {}
    if d.discrete:
        for y, Z, g in zip(ch.outputs, d.Z_out, d.g_out):
            tag = "".join(str(v) for v in (y if isinstance(y, tuple) else (y,)))
            out[f"Z_out[{tag}]"] = Z
            for w, gi in zip(d.omega, g):
                out[f"g_out[{tag}][{w.name}]"] = gi
        for y, dg in zip(ch.outputs, d.dg_out):
            tag = "".join(str(v) for v in (y if isinstance(y, tuple) else (y,)))
            for i, wi in enumerate(d.omega):
                out[f"dg_out[{tag}][{wi.name}]"] = dg[i, i]
        out["E_q0"] = d.E_g2_at_q0
    else:
        out["Z_out"] = d.Z_out
        for w, gi in zip(d.omega, d.g_out):
            out[f"g_out[{w.name}]"] = gi
        for i, wi in enumerate(d.omega):
            for j, wj in enumerate(d.omega):
                if j >= i:
                    out[f"dg_out[{wi.name},{wj.name}]"] = d.dg_out[i, j]
        out["q_hat"] = d.q_hat_map
        out["Psi_out"] = d.psi_out
    e0 = d.E_g2_at_q0.subs(V, 1)
    out["alpha_bar_c"] = sp.simplify(1 / (2 * e0)) if e0 != 0 else sp.oo
    return out


def aim_sheet(ch, *, title: str | None = None) -> str:
    """Markdown + LaTeX equation sheet of an AIM channel (THEORY 1.1, 1.2)."""
    d = derive(ch)
    T = ch.tokens
    ex = aim_expressions(ch)
    L = [f"# {title or f'AIM, {ch.name} channel, T = {T}'}", ""]
    L += [f"Channel: {ch.description}.", "",
          "Conventions (THEORY 1.1): $h_{ab} \\sim \\mathcal N(\\omega_{ab}, (1+\\delta_{ab}) V)$, "
          "$V = Q_0 - q$, $g_{ab} = \\partial_{\\omega_{ab}} \\log Z_{\\rm out}$, "
          "$\\hat q = 2\\alpha\\,\\mathbb E[\\sum_{a\\le b}(1+\\delta_{ab}) g_{ab}^2]$. "
          "$\\Phi$ is the standard normal CDF, $\\Phi_2(a, b; r)$ the bivariate one.", ""]
    if isinstance(ch, DiscreteChannel):
        L += ["## Likelihood", ""]
        for y, p in zip(ch.outputs, ch.likelihood):
            L.append(f"- $P(y = {y} \\mid h) = {_tex(p, T)}$")
        L += ["", "## Partition functions and denoisers", ""]
        for y in ch.outputs:
            tag = "".join(str(v) for v in (y if isinstance(y, tuple) else (y,)))
            L.append(f"### y = {y}")
            L.append(f"$$Z_{{\\rm out}} = {_tex(ex[f'Z_out[{tag}]'], T)}$$")
            for w in d.omega:
                L.append(f"$$g_{{{w.name[6:]}}} = {_tex(ex[f'g_out[{tag}][{w.name}]'], T)}$$")
            for w in d.omega:
                L.append(f"$$\\partial_{{\\omega_{{{w.name[6:]}}}}} g_{{{w.name[6:]}}} = "
                         f"{_tex(ex[f'dg_out[{tag}][{w.name}]'], T)}$$")
            L.append("")
        L += ["## SE output map", "",
              "$$\\hat q = 2\\alpha\\,\\mathbb E_{\\omega}\\sum_y \\frac{|\\nabla_\\omega Z_y|_C^2}"
              "{Z_y},\\quad \\omega \\sim \\mathcal N(0, q C)$$",
              "computed by quadrature; at $q = 0$ it is the finite sum",
              f"$$\\hat q\\big|_{{q=0}} = 2\\alpha \\cdot {_tex(ex['E_q0'], T)}$$", "",
              "## Free-entropy term", "",
              "$$\\Psi_{\\rm out}(q) = \\mathbb E_\\omega \\sum_y Z_y \\log Z_y$$", ""]
    else:
        L += ["## Sufficient statistics", "",
              f"$u = A h$, $A = {_tex(sp.Matrix(ch.statistics), T)}$, noise covariance "
              f"${_tex(sp.Matrix(ch.noise), T)}$.", "",
              "## Partition function and denoiser", "",
              f"$$Z_{{\\rm out}} = {_tex(ex['Z_out'], T)}$$"]
        for w in d.omega:
            L.append(f"$$g_{{{w.name[6:]}}} = {_tex(ex[f'g_out[{w.name}]'], T)}$$")
        L.append(f"$$\\partial g / \\partial \\omega = {_tex(sp.Matrix(d.dg_out), T)}$$")
        L += ["", "## SE output map", "", f"$$\\hat q = {_tex(ex['q_hat'], T)}$$", "",
              "## Free-entropy term", "",
              f"$$\\Psi_{{\\rm out}} = {_tex(ex['Psi_out'], T)}$$", ""]
    L += ["## Stability of the uninformative fixed point (small width)", "",
          "With $\\alpha = \\bar\\alpha\\rho$, $\\rho \\to 0$: $q/Q_0 = \\max(1 - \\rho/\\hat q, 0)^2$; "
          "$q = 0$ loses stability at",
          f"$$\\bar\\alpha_c = {_tex(ex['alpha_bar_c'], T)} \\approx "
          f"{sp.N(ex['alpha_bar_c'], 16) if ex['alpha_bar_c'].is_number else ''}$$", ""]
    return "\n".join(L) + "\n" + canonical_block(ex)


def strip_canonical(text: str) -> str:
    """The sheet without its canonical block (what a reader sees)."""
    return text.split(CANON_START)[0].rstrip() + "\n"


def latex_document(ex: dict[str, sp.Expr], T: int) -> str:
    """The named expressions as one LaTeX align* environment."""
    rows = []
    for k, v in ex.items():
        name = k.replace("_", r"\_")
        rows.append(rf"\text{{{name}}} &= {_tex(v, T)}")
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}\n"


def canonical_block(ex: dict[str, sp.Expr]) -> str:
    data = {k: sp.sstr(v) for k, v in ex.items()}
    return f"{CANON_START}\n<!--\n{json.dumps(data, indent=1, sort_keys=True)}\n-->\n"


def read_canonical(text: str) -> dict[str, str]:
    m = re.search(re.escape(CANON_START) + r"\n<!--\n(.*)\n-->", text, re.S)
    if not m:
        raise ValueError("sheet has no canonical block")
    return json.loads(m.group(1))


def smi_expressions(layers: int) -> dict[str, sp.Expr]:
    """Named expressions of the deep tied-attention channel (THEORY 2, 2.3)."""
    from . import smi

    z, h, y = smi.forward(layers)
    out: dict[str, sp.Expr] = {}
    for k in range(2):
        out[f"h[{k}]"] = h[k]
    for i in range(2):
        for j in range(2):
            out[f"y[{i}{j}]"] = y[i, j]
    u, v, h0, h1 = smi.inversion()
    out["inversion u"], out["inversion v"] = u, v
    out["inversion h0"], out["inversion h1"] = h0, h1
    _, Ainv, detA, det_s = smi.attention_inverse()
    for i in range(2):
        for j in range(2):
            out[f"A^-1[{i}{j}]"] = Ainv[i, j]
    out["det A (s_a, s_b)"] = det_s
    params, zL, jac = smi.fibre(layers)
    out["z_L[0]"], out["z_L[1]"] = zL
    out["fibre jacobian"] = jac
    return out


def smi_sheet(layers: int) -> str:
    """Equation sheet of the deep tied-attention channel, M = 2 tokens, P_l = 1."""
    from . import smi

    ex = smi_expressions(layers)
    z, h, y = smi.forward(layers)
    t = sp.latex
    L = [f"# SMI, deep tied attention, L = {layers}, M = 2, P_l = 1", "",
         "THEORY 2: $h^{(1)} = z_1$, $A_l = \\mathrm{softmax}(\\beta h^{(l)} h^{(l)T}) + c I$, "
         "$h^{(l+1)} = A_l \\cdots A_1 z_{l+1}$, $y = \\mathrm{softmax}(\\beta h^{(L)} h^{(L)T})$.",
         "", "## Forward map", ""]
    L += [f"$$h^{{(L)}}_{k} = {t(ex[f'h[{k}]'])}$$" for k in range(2)]
    L += [f"$$y = {t(y)}$$", "", "## Inversion y -> h (up to a global sign)", "",
          f"$$u = {t(ex['inversion u'])},\\quad v = {t(ex['inversion v'])}$$",
          f"$$h_0 = {t(ex['inversion h0'])},\\quad h_1 = {t(ex['inversion h1'])}$$", "",
          "## Attention inverse", "",
          f"$$\\det A = {t(ex['det A (s_a, s_b)'])} \\ge c(1+c)$$", "",
          "## Fibre parametrisation", "",
          "$z_L = (A_{L-1}\\cdots A_1)^{-1}(\\pm h)$, parametrised by $z_1..z_{L-1}$:",
          f"$$z_L = \\begin{{pmatrix}} {t(ex['z_L[0]'])} \\\\ {t(ex['z_L[1]'])} \\end{{pmatrix}}$$",
          f"$$|J| = {t(ex['fibre jacobian'])}$$", "",
          "Z_out, g_out and Cov[z | y] are integrals over this fibre (numerics/smi.py); "
          "the stability operator F at Q = 0 is THEORY 2.2.", ""]
    return "\n".join(L) + "\n" + canonical_block(ex)


def compare_canonical(stored: dict[str, str], fresh: dict[str, sp.Expr]) -> list[str]:
    """Names whose stored expression differs mathematically from the fresh derivation."""
    ns = {"Phi": Phi, "Phi2": Phi2}
    for e in fresh.values():
        # atoms, not free_symbols: an Integral's bound variables keep their assumptions too
        for sym in (e.atoms(sp.Symbol) if isinstance(e, sp.Basic) else ()):
            ns[sym.name] = sym
    bad = sorted(set(stored) ^ set(fresh))
    for k in set(stored) & set(fresh):
        old = sp.sympify(stored[k], locals=ns)
        new = sp.sympify(fresh[k])
        if old != new and sp.simplify(old - new) != 0:
            bad.append(k)
    return bad


__all__ = ["aim_sheet", "aim_expressions", "compare_canonical", "read_canonical", "q", "alpha"]
