"""Polyhedral channels: from the sympy events to the numbers of the polytope engine (THEORY 1.4).

A discrete channel with an event of three or more half-spaces is derived by
:func:`aim_sym.output.derive` as *polyhedral*: Z_out(y) = sum_k w_k P(h in polytope_k) has no
closed form. :func:`polyhedral_arrays` substitutes the parameter values and turns every event
{forms . h + offsets > 0} into rows A h <= b (A = -forms, b = offsets) with a numeric weight,
per outcome; :class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput` is built from them by the
API layer. Nothing here integrates.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from .channels import Channel, ChannelError
from .output import derive, substitute_params
from .symbols import h_symbols, weights


def is_polyhedral(ch: Channel) -> bool:
    """True when the channel's derivation is polyhedral (an event of >= 3 half-spaces)."""
    return bool(getattr(derive(ch), "is_polyhedral", False))


def _number(expr, ch: Channel, params: dict, what: str) -> float:
    v = substitute_params(sp.sympify(expr), ch, params)
    if v.free_symbols:
        raise ChannelError(f"{what} {v} still has symbols {sorted(map(str, v.free_symbols))} "
                           "after substituting the parameter values")
    x = float(sp.N(v, 20))
    if not math.isfinite(x):
        raise ChannelError(f"{what} {v} is not finite")
    return x


def polyhedral_arrays(ch: Channel, params: dict | None = None) -> dict:
    """The numeric description of a polyhedral channel with ``params`` bound: a dict with
    ``outcomes``, ``terms`` (per outcome a tuple of (weight, A, b) with 1[A h <= b], A and b
    tuples of floats; A empty for a constant term), ``weights`` (1 + delta_ab, flat order of
    the pairs a <= b) and ``basis`` (rows spanning the half-space normals)."""
    d = derive(ch)
    if not getattr(d, "is_polyhedral", False):
        raise ChannelError(f"channel {ch.name} has closed-form orthant probabilities (at most two "
                           "half-spaces per term): use its symbolic derivation")
    params = dict(params or {})
    terms = []
    for evs in d.polyhedral:
        out = []
        for ev in evs:
            w = _number(ev.weight, ch, params, "the weight")
            if w == 0:
                continue
            A = tuple(tuple(-_number(c, ch, params, "a Heaviside coefficient") for c in f)
                      for f in ev.forms)
            b = tuple(_number(o, ch, params, "a Heaviside offset") for o in ev.offsets)
            out.append((w, A, b))
        terms.append(tuple(out))
    basis: list = []
    for _, A, _ in (t for ts in terms for t in ts):
        for row in A:  # rows chosen among the normals themselves, greedily independent
            if np.linalg.matrix_rank(np.array(basis + [row]), tol=1e-10) > len(basis):
                basis.append(row)
    return {"outcomes": tuple(ch.outputs), "terms": tuple(terms),
            "weights": tuple(float(w) for w in weights(ch.tokens)), "basis": tuple(basis),
            "name": ch.name}


def polyhedral_sheet(ch: Channel) -> str:
    """The equations of a polyhedral channel (markdown): what is symbolic (the half-spaces of each
    term, with their weights) and what is an integral (Z_out; THEORY 1.1, 1.4)."""
    d = derive(ch)
    T = ch.tokens
    hs = sp.Matrix(h_symbols(T))
    lines = [f"# Channel {ch.name} (T = {T}): polyhedral (THEORY 1.4)", "",
             "h ~ N(omega, V C), C = diag(1 + delta_ab). Each output's likelihood is a weighted sum "
             "of indicators of polytopes; a term of three or more half-spaces has no closed-form "
             "Gaussian probability, so Z_out is an integral computed by the Gaussian polytope "
             "engine (closed forms up to two rows, iterated Gauss-Legendre up to rank 3, error "
             "bars by refinement; g_out and dg_out by Tallis' face masses, docs/polyhedral.md).",
             ""]
    for y, evs in zip(ch.outputs, d.polyhedral):
        lines.append(f"## y = {y}")
        lines.append("")
        lines.append(f"Z_out(y = {y}; omega, V) = sum over terms of weight x P(all half-spaces):")
        lines.append("")
        for ev in evs:
            conds = [f"{sp.sstr(sp.Matrix([f]).dot(hs) + o)} > 0"
                     for f, o in zip(ev.forms, ev.offsets)]
            body = " and ".join(conds) if conds else "(every h)"
            kind = ("integral" if len(conds) >= 3 else "Phi2" if len(conds) == 2
                    else "Phi" if conds else "constant")
            lines.append(f"- weight {sp.sstr(ev.weight)}: {body}  [{kind}]")
        lines.append("")
    lines.append("g_out = d log Z_out / d omega, dg_out = d g_out / d omega: Gaussian face masses "
                 "of the same polytopes (integrals). SE output map q_hat = 2 alpha E[sum (1 + "
                 "delta_ab) g_ab^2]; at q = 0 one evaluation at omega = 0 gives alpha_bar_c = "
                 "1 / (2 E(0, 1)) (THEORY 1.2).")
    return "\n".join(lines) + "\n"


__all__ = ["is_polyhedral", "polyhedral_arrays", "polyhedral_sheet"]
