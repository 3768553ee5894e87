"""Noisy polyhedral channels as data: from sympy pieces to the numbers of the polytope engine
(THEORY 1.4; docs/polyhedral.md, "Noisy outputs").

A user writes P(y | h) = sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta), y in R^p continuous, as
a list of pieces (conditions, mean): the conditions are sympy inequalities (or Heaviside factors,
Heaviside(e) meaning e > 0) in the entries of :func:`aim_sym.symbols.h_matrix`, each affine in h;
the mean is a sympy vector affine in h. :func:`noisy_piecewise` checks all of it exactly (affine
forms by differentiation, unknown symbols, a positive definite noise covariance, pieces that
tile R^n at seeded rational points) and :func:`noisy_arrays` turns it into numbers for
:mod:`aim_sym.numerics.noisy_polyhedral_se` (``noisy_output``). Nothing here integrates.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import sympy as sp

from .channels import ChannelError, parameter_domains
from .domains import Domain
from .symbols import h_symbols, weights

__all__ = ["NoisyPiecewiseChannel", "noisy_piecewise", "noisy_arrays", "with_noisy_values",
           "noisy_sheet"]


@dataclass(frozen=True)
class NoisyPiecewiseChannel:
    """y = mean_k(h) + N(0, noise) on piece k = {forms_k . h + offsets_k > 0} (THEORY 1.4):
    ``pieces`` holds per piece (forms, offsets, L, l) as sympy objects (forms (m, n), offsets
    (m,), the mean L h + l), ``noise`` the p x p covariance Delta; ``params`` maps parameter
    symbols to values."""

    name: str
    tokens: int
    pieces: tuple
    noise: sp.ImmutableMatrix
    params: tuple[tuple[sp.Symbol, object], ...] = ()
    description: str = ""
    domains: tuple[tuple[str, Domain], ...] = field(default=(), compare=False)

    @property
    def out_dim(self) -> int:
        return self.noise.rows


def _affine(expr, hs: tuple, what: str) -> tuple[list, sp.Expr]:
    """(coefficients, offset) of an expression affine in h; ChannelError otherwise."""
    e = sp.expand(sp.sympify(expr))
    coeffs = [sp.diff(e, s) for s in hs]
    rest = sp.simplify(e - sum(c * s for c, s in zip(coeffs, hs)))
    if any(c.has(*hs) for c in coeffs) or rest.has(*hs):
        raise ChannelError(f"{what} {sp.sstr(expr)} is not affine in h (entries "
                           f"{', '.join(map(str, hs))})")
    return coeffs, rest


def _conditions(cond, hs: tuple) -> list[sp.Expr]:
    """Each condition as an expression e with the condition e > 0 (boundaries have measure 0)."""
    out = []
    items = list(cond) if isinstance(cond, (list, tuple)) else [cond]
    for c in items:
        c = sp.sympify(c)
        if isinstance(c, sp.And):
            out += _conditions(list(c.args), hs)
        elif isinstance(c, sp.Mul):
            out += _conditions(list(c.args), hs)
        elif isinstance(c, sp.Heaviside):
            out.append(c.args[0])
        elif isinstance(c, (sp.StrictGreaterThan, sp.GreaterThan)):
            out.append(c.lhs - c.rhs)
        elif isinstance(c, (sp.StrictLessThan, sp.LessThan)):
            out.append(c.rhs - c.lhs)
        elif c is sp.true or c == 1:
            continue
        else:
            raise ChannelError(f"condition {sp.sstr(c)} is not an inequality or Heaviside factor "
                               "of an affine form of h")
    return out


def noisy_piecewise(*, name: str, tokens: int, pieces, noise, params: dict | None = None,
                    description: str = "") -> NoisyPiecewiseChannel:
    """A noisy piecewise-linear channel (THEORY 1.4): ``pieces`` = [(conditions, mean), ...],
    conditions a list of sympy inequalities or Heaviside factors of affine forms of h (use
    :func:`aim_sym.symbols.h_matrix`; [] for the whole space), mean a sympy vector affine in h
    (p entries, the same p for every piece); ``noise`` Delta: a p x p matrix or a scalar (times
    the identity); ``params`` parameter symbols -> default values. Raises ChannelError (one
    line) on non-affine input, unknown symbols, a noise covariance that is not positive
    definite, or pieces that do not tile R^n."""
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 2:
        raise ChannelError(f"tokens must be an integer >= 2; got {tokens!r}")
    hs = h_symbols(tokens)
    if not isinstance(pieces, (list, tuple)) or not pieces:
        raise ChannelError("pieces must be a non-empty list of (conditions, mean)")
    declared = {s for s in (params or {})}
    out, p = [], None
    for j, piece in enumerate(pieces):
        if not isinstance(piece, (list, tuple)) or len(piece) != 2:
            raise ChannelError(f"piece {j} must be a pair (conditions, mean)")
        cond, mean = piece
        forms, offsets = [], []
        for e in _conditions(cond, hs):
            f, o = _affine(e, hs, f"piece {j}: the condition form")
            forms.append(tuple(f))
            offsets.append(o)
        mean = list(sp.Matrix(mean)) if not isinstance(mean, (int, float)) else [mean]
        if p is None:
            p = len(mean)
        if len(mean) != p or p == 0:
            raise ChannelError(f"piece {j}: the mean has {len(mean)} entries; every piece needs "
                               f"the same p >= 1 ({p})")
        L, lv = [], []
        for i, m in enumerate(mean):
            f, o = _affine(m, hs, f"piece {j}: mean entry {i}")
            L.append(tuple(f))
            lv.append(o)
        out.append((tuple(forms), tuple(offsets), tuple(L), tuple(lv)))
    N = sp.Matrix(noise) if isinstance(noise, (list, tuple, sp.MatrixBase)) else (
        sp.sympify(noise) * sp.eye(p))
    if N.shape != (p, p):
        raise ChannelError(f"noise must be a {p} x {p} matrix (or a scalar); got shape {N.shape}")
    exprs = [x for pc in out for part in pc for row in part
             for x in (row if isinstance(row, tuple) else (row,))] + list(N)
    unknown = set().union(*(sp.sympify(x).free_symbols for x in exprs)) - set(hs) - declared
    if unknown:
        raise ChannelError(f"channel {name}: unknown symbol(s) {sorted(map(str, unknown))}; the "
                           f"engine knows h_ab ({', '.join(map(str, hs))}) and the declared params")
    ch = NoisyPiecewiseChannel(name=name, tokens=tokens, pieces=tuple(out),
                               noise=sp.ImmutableMatrix(N),
                               params=tuple((s, v) for s, v in (params or {}).items()),
                               description=description or name)
    _validate(ch)
    return ch


def _values(ch: NoisyPiecewiseChannel, params: dict | None) -> dict:
    """Symbol -> sympy number: ``params`` by name, else the defaults."""
    given = dict(params or {})
    out = {}
    for s, v in ch.params:
        v = given.get(s.name, v)
        if v is None:
            raise ChannelError(f"channel {ch.name}: parameter {s.name} has no value")
        out[s] = sp.Rational(str(v)) if isinstance(v, (int, float)) else sp.sympify(v)
    return out


def _number(x, sub: dict, what: str) -> float:
    v = sp.sympify(x).subs(sub)
    if v.free_symbols:
        raise ChannelError(f"{what} {v} still has symbols {sorted(map(str, v.free_symbols))}")
    f = float(sp.N(v, 20))
    if not math.isfinite(f):
        raise ChannelError(f"{what} {v} is not finite")
    return f


def noisy_arrays(ch: NoisyPiecewiseChannel, params: dict | None = None) -> dict:
    """The numbers of the channel with ``params`` (by name; else the defaults) bound: pieces as
    (A, b, L, l) float tuples with A h <= b (A = -forms, b = offsets), Delta, weights
    (1 + delta_ab, flat order a <= b) and name (for numerics.noisy_polyhedral_se.noisy_output)."""
    sub = _values(ch, params)
    pieces = []
    for forms, offsets, L, lv in ch.pieces:
        A = tuple(tuple(0.0 - _number(c, sub, "a condition coefficient") for c in f)
                  for f in forms)
        b = tuple(_number(o, sub, "a condition offset") for o in offsets)
        Lm = tuple(tuple(_number(c, sub, "a mean coefficient") for c in row) for row in L)
        lm = tuple(_number(o, sub, "a mean offset") for o in lv)
        pieces.append((A, b, Lm, lm))
    D = tuple(tuple(_number(ch.noise[i, j], sub, "a noise entry") for j in range(ch.out_dim))
              for i in range(ch.out_dim))
    return {"pieces": tuple(pieces), "Delta": D,
            "weights": tuple(float(w) for w in weights(ch.tokens)), "name": ch.name}


def _validate(ch: NoisyPiecewiseChannel, *, values: dict | None = None, samples: int = 32,
              seed: int = 0) -> None:
    """Positive definite noise at the values; exactly one piece holds at seeded random rational
    h (the pieces tile R^n)."""
    sub = _values(ch, values)
    N = ch.noise.subs(sub)
    if N.free_symbols:
        raise ChannelError(f"channel {ch.name}: the noise {sp.sstr(N)} has unbound symbols")
    if not all(m > 0 for m in (N[:k, :k].det() for k in range(1, N.rows + 1))) or N != N.T:
        raise ChannelError(f"channel {ch.name}: the noise covariance {sp.sstr(N)} is not "
                           "symmetric positive definite at the parameter values")
    hs = h_symbols(ch.tokens)
    rng = random.Random(seed)
    for _ in range(samples):
        h = {s: sp.Rational(rng.randint(-300, 300), 97) for s in hs}
        h.update(sub)
        inside = [j for j, (forms, offsets, _, _) in enumerate(ch.pieces)
                  if all((sum(c * h[s] for c, s in zip(f, hs)) + o).subs(sub) > 0
                         for f, o in zip(forms, offsets))]
        if len(inside) != 1:
            at = {str(s): str(h[s]) for s in hs}
            raise ChannelError(f"channel {ch.name}: the pieces must tile R^n; at h = {at} "
                               f"{len(inside)} pieces hold ({inside})")


def with_noisy_values(ch: NoisyPiecewiseChannel, values: dict) -> NoisyPiecewiseChannel:
    """``ch`` with parameter values bound (keys: symbol names), each checked against its domain
    (from the symbol's assumptions, :func:`aim_sym.channels.parameter_domains`), then the noise
    and tiling checks at these values."""
    domains = parameter_domains(ch)
    by_name = {s.name: s for s, _ in ch.params}
    new = dict(ch.params)
    for key, value in values.items():
        if key not in by_name:
            raise ChannelError(f"channel {ch.name} has no parameter {key!r} (its parameters: "
                               f"{', '.join(by_name) or 'none'})")
        new[by_name[key]] = domains[key].check(value)
    out = replace(ch, params=tuple(new.items()))
    _validate(out)
    return out


def noisy_sheet(ch: NoisyPiecewiseChannel) -> str:
    """The equations of a noisy polyhedral channel (markdown, what ``derive`` would print): each
    piece's half-spaces and output mean, the noise, and what is an integral (THEORY 1.1, 1.4)."""
    hs = sp.Matrix(h_symbols(ch.tokens))
    lines = [f"# Channel {ch.name} (T = {ch.tokens}): noisy polyhedral (THEORY 1.4)", "",
             f"P(y | h) = sum_k 1[h in piece k] N(y; mean_k(h), Delta), y in R^{ch.out_dim}, "
             f"Delta = {sp.sstr(ch.noise.tolist())}.", "",
             "Z_out(y; omega, V) = sum_k N(y; mean_k(omega), S_k) P_k: S_k = L_k V C L_k^T + "
             "Delta, P_k the Gaussian mass of piece k under h's law given y within it (an "
             "integral beyond two half-spaces; closed form for one).", ""]
    for j, (forms, offsets, L, lv) in enumerate(ch.pieces):
        conds = [f"{sp.sstr(sp.Matrix([f]).dot(hs) + o)} > 0" for f, o in zip(forms, offsets)]
        mean = [sp.sstr(sp.Matrix([row]).dot(hs) + o) for row, o in zip(L, lv)]
        lines.append(f"- piece {j}: {' and '.join(conds) if conds else '(every h)'}; "
                     f"mean ({', '.join(mean)})")
    lines += ["", "SE: q_hat = 2 alpha E_omega int dy Z_out |g_out|_C^2 (an integral over omega "
              "and y); alpha_bar_c = 1 / (2 E(0, 1)) (THEORY 1.2)."]
    return "\n".join(lines) + "\n"
