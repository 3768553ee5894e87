"""The output side of the AIM, derived from a channel (THEORY 1.1).

For every channel, with h ~ N(omega, V C) and C = diag(1 + delta_ab):

* Z_out(y; omega, V) = int dh P_out(y | h) N(h; omega, V C),
* g_out = d log Z_out / d omega (a vector over the pairs a <= b) and its Jacobian dg_out/domega,
* the SE output map q_hat = 2 alpha E[sum_ab (1 + delta_ab) g_ab^2] (THEORY 1.1),
* Psi_out(q) = E_omega int dy Z_out log Z_out (THEORY 1.1).

Gaussian channels give Z_out, the SE map and Psi_out in closed form. Discrete channels give
Z_out as sums of Gaussian orthant probabilities (Phi for one half-space, Phi2 for two); the
expectation over omega is left to numerics, but at q = 0 it is a finite sum over outputs,
evaluated exactly (the small-width weak-recovery threshold, THEORY 1.2). A channel with an event
of three or more half-spaces is *polyhedral* (THEORY 1.4): Z_out is a Gaussian polytope
probability, an integral without closed form; its derivation keeps the events
(``OutputDerivation.polyhedral``) for the numeric polytope engine (:mod:`aim_sym.polyhedral`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import sympy as sp

from .cache import cached
from .channels import Channel, ChannelError, DiscreteChannel, GaussianChannel
from .special import Phi, Phi2
from .symbols import V, alpha, h_symbols, omega_symbols, q, weight_matrix, weights


@dataclass(frozen=True)
class Event:
    """Intersection of half-spaces {forms[k] . h + offsets[k] > 0}, with a weight."""

    weight: sp.Expr
    forms: tuple[tuple[sp.Expr, ...], ...]
    offsets: tuple[sp.Expr, ...]


@dataclass(frozen=True)
class OutputDerivation:
    """Everything the output channel implies, as sympy expressions in omega, V and parameters.

    Discrete channels: ``Z_out``, ``g_out``, ``dg_out`` are tuples indexed like
    ``channel.outputs``. Gaussian channels: single expressions in the output symbols ``y``.
    ``basis`` (K x n) spans the linear forms of h the channel sees; Z_out depends on omega only
    through ``basis * omega`` and ``omega_of_m`` maps m = basis * omega back to a preimage.
    """

    channel: object
    omega: tuple[sp.Symbol, ...]
    y: tuple[sp.Symbol, ...]
    Z_out: object
    log_Z_out: object
    g_out: object
    dg_out: object
    basis: sp.ImmutableMatrix
    m: tuple[sp.Symbol, ...]
    omega_of_m: sp.ImmutableMatrix
    E_g2: sp.Expr | None = None  # E[sum (1+delta) g^2] in closed form (Gaussian channels)
    E_g2_at_q0: sp.Expr | None = None  # the same at q = 0 (exact finite sum; discrete channels)
    q_hat_map: sp.Expr | None = None  # 2 alpha E_g2 (Gaussian channels)
    psi_out: sp.Expr | None = None  # Psi_out(V) in closed form (Gaussian channels)
    params: tuple[sp.Symbol, ...] = field(default=())
    deterministic: bool = True  # y is a function of h (P(y|h) in {0, 1}): V = 0 is a fixed point
    # polyhedral channels (an event of >= 3 half-spaces, THEORY 1.4): the events of each output;
    # Z_out, g_out, dg_out are then integrals (empty tuples here), computed numerically
    polyhedral: tuple[tuple[Event, ...], ...] | None = None

    @property
    def discrete(self) -> bool:
        return isinstance(self.channel, DiscreteChannel)

    @property
    def is_polyhedral(self) -> bool:
        return self.polyhedral is not None


# ----------------------------------------------------------------------------- discrete
def parse_events(expr: sp.Expr, T: int) -> list[Event]:
    """Split P(y | h) into weighted intersections of half-spaces of h."""
    hs = h_symbols(T)
    events = []
    for term in sp.Add.make_args(sp.expand(expr)):
        weight, forms, offsets = sp.Integer(1), [], []
        for factor in sp.Mul.make_args(term):
            base, _ = factor.as_base_exp()
            if isinstance(base, sp.Heaviside):
                arg = sp.expand(base.args[0])
                row = [sp.diff(arg, s) for s in hs]
                if any(c.has(*hs) for c in row):
                    raise ChannelError(f"Heaviside argument {arg} is not affine in h")
                form = tuple(row)
                off = sp.simplify(arg - sum(c * s for c, s in zip(row, hs)))
                if (form, off) not in zip(forms, offsets):
                    forms.append(form)
                    offsets.append(off)
            elif factor.has(*hs):
                raise ChannelError(
                    f"factor {factor} of P(y|h) depends on h but is not a Heaviside of an "
                    "affine form; discrete channels must be polynomials in Heaviside(affine(h))"
                )
            else:
                weight *= factor
        events.append(Event(weight, tuple(forms), tuple(offsets)))
    return events


def event_probability(ev: Event, omega: tuple[sp.Symbol, ...], C: sp.Matrix) -> sp.Expr:
    """P(forms . h + offsets > 0) for h ~ N(omega, V C): Phi or Phi2 in closed form."""
    K = len(ev.forms)
    if K == 0:
        return ev.weight
    L = sp.Matrix([list(f) for f in ev.forms])
    w = sp.Matrix(omega)
    mean = L * w + sp.Matrix(ev.offsets)
    S = L * C * L.T  # covariance / V
    sd = [sp.sqrt(V * S[k, k]) for k in range(K)]
    if any(S[k, k] == 0 for k in range(K)):
        raise ChannelError(f"a Heaviside form {ev.forms} has zero variance")
    if K == 1:
        return ev.weight * Phi(mean[0] / sd[0])
    if K == 2:
        r = sp.nsimplify(S[0, 1] / sp.sqrt(S[0, 0] * S[1, 1]))
        if abs(r) == 1:
            raise ChannelError(f"two Heaviside forms of one event are parallel: {ev.forms}")
        return ev.weight * Phi2(mean[0] / sd[0], mean[1] / sd[1], r)
    raise ChannelError(
        f"an event of {K} half-spaces needs a {K}-variate normal orthant probability; the engine "
        "derives closed forms for at most 2 (Phi, Phi2)"
    )


def _basis_and_map(forms: list[tuple], T: int):
    """Basis of the channel's linear forms, chosen among the forms themselves so that the
    integrand's hyperplanes {form . omega = const} are coordinate planes of m."""
    n = T * (T + 1) // 2
    rows: list[list] = []
    for f in forms:
        cand = rows + [list(f)]
        if sp.Matrix(cand).rank() > len(rows):
            rows = cand
    if not rows:
        return sp.ImmutableMatrix(sp.zeros(0, n)), (), sp.ImmutableMatrix(sp.zeros(n, 1))
    L = sp.Matrix(rows)
    K = L.rows
    C = weight_matrix(T)
    m = tuple(sp.Symbol(f"m_{k + 1}", real=True) for k in range(K))
    P = C * L.T * (L * C * L.T).inv()
    return sp.ImmutableMatrix(L), m, sp.ImmutableMatrix(P * sp.Matrix(m))


def tidy(e):
    """Factor the arguments of Phi and Phi2 (paper-readable, mathematically identical)."""
    return e.replace(
        lambda x: isinstance(x, (Phi, Phi2)),
        lambda x: x.func(*[sp.factor(sp.cancel(a)) for a in x.args]),
    )


#: the largest rank of an event the polyhedral route integrates by the deterministic iterated
#: rule (~1e-12); events of higher rank go to the engine's cube rule (Monte-Carlo-grade, ~1e-6)
POLYHEDRAL_DETERMINISTIC_RANK = 3
#: the largest rank of an event the polyhedral route accepts (T = 3: h has 6 entries); events of
#: rank > POLYHEDRAL_DETERMINISTIC_RANK are served by threshold and check, not by the SE
POLYHEDRAL_MAX_RANK = 6


def _derive_polyhedral(ch: DiscreteChannel, all_events: list[list[Event]],
                       deterministic: bool) -> OutputDerivation:
    """A discrete channel with an event of >= 3 half-spaces (THEORY 1.4): Z_out(y) =
    sum_k w_k P(h in polytope_k) has no closed form; keep the events for the numeric engine."""
    T = ch.tokens
    n = len(h_symbols(T))
    forms = []
    for events in all_events:
        for ev in events:
            L = sp.Matrix([list(f) for f in ev.forms]) if ev.forms else sp.zeros(0, n)
            if any(all(c == 0 for c in f) for f in ev.forms):
                raise ChannelError(f"a Heaviside form {ev.forms} has zero variance")
            r = L.rank()
            if r > POLYHEDRAL_MAX_RANK:
                raise ChannelError(
                    f"an event of {len(ev.forms)} half-spaces spans {r} directions of h; the "
                    f"polyhedral route integrates events of rank <= {POLYHEDRAL_MAX_RANK}; "
                    "write the channel with fewer independent half-spaces per term")
            forms.extend(ev.forms)
    basis, m, omega_of_m = _basis_and_map(forms, T)
    return OutputDerivation(
        channel=ch, omega=omega_symbols(T), y=(), Z_out=(), log_Z_out=(), g_out=(), dg_out=(),
        basis=basis, m=m, omega_of_m=omega_of_m, params=tuple(s for s, _ in ch.params),
        deterministic=bool(deterministic),
        polyhedral=tuple(tuple(evs) for evs in all_events),
    )


def derive_discrete(ch: DiscreteChannel) -> OutputDerivation:
    T = ch.tokens
    omega = omega_symbols(T)
    C = weight_matrix(T)
    all_events = [parse_events(p, T) for p in ch.likelihood]
    deterministic = all(len(evs) == 1 and evs[0].weight == 1 for evs in all_events)
    if any(len(ev.forms) >= 3 for evs in all_events for ev in evs):
        return _derive_polyhedral(ch, all_events, deterministic)
    Zs, forms = [], []
    for events in all_events:
        Z = sp.Add(*[event_probability(ev, omega, C) for ev in events])
        Zs.append(Z)
        for ev in events:
            forms.extend(ev.forms)
    logZ = tuple(sp.log(Z) for Z in Zs)
    g = tuple(sp.ImmutableMatrix([tidy(sp.diff(lz, w)) for w in omega]) for lz in logZ)
    dg = tuple(sp.ImmutableMatrix(sp.Matrix(gi).jacobian(omega)) for gi in g)
    basis, m, omega_of_m = _basis_and_map(forms, T)
    # q = 0: omega = 0, the expectation is a finite sum over outputs (exact)
    at0 = {w: 0 for w in omega}
    wts = weights(T)
    E0 = sp.Integer(0)
    for Z in Zs:
        Z0 = Z.subs(at0)
        grads = [sp.diff(Z, w).subs(at0) for w in omega]
        E0 += sum(c * gr**2 for c, gr in zip(wts, grads)) / Z0
    E0 = sp.simplify(E0)
    return OutputDerivation(
        channel=ch,
        omega=omega,
        y=(),
        Z_out=tuple(Zs),
        log_Z_out=logZ,
        g_out=g,
        dg_out=dg,
        basis=basis,
        m=m,
        omega_of_m=omega_of_m,
        E_g2_at_q0=E0,
        params=tuple(s for s, _ in ch.params),
        deterministic=bool(deterministic),
    )


# ----------------------------------------------------------------------------- gaussian
def derive_gaussian(ch: GaussianChannel) -> OutputDerivation:
    T = ch.tokens
    omega = omega_symbols(T)
    C = weight_matrix(T)
    A = sp.Matrix(ch.statistics)
    K = A.rows
    y = tuple(sp.Symbol(f"y_{k + 1}", real=True) for k in range(K))
    M = V * A * C * A.T + sp.Matrix(ch.noise)
    Minv = M.inv().applyfunc(sp.factor)
    r = sp.Matrix(y) - A * sp.Matrix(omega)
    detM = sp.factor(M.det())
    quad = sp.expand((r.T * Minv * r)[0, 0])
    logZ = -quad / 2 - sp.log((2 * sp.pi) ** K * detM) / 2
    Z = sp.exp(logZ)
    g = sp.ImmutableMatrix([sp.simplify(sp.diff(logZ, w)) for w in omega])
    dg = sp.ImmutableMatrix(sp.Matrix(g).jacobian(omega).applyfunc(sp.simplify))
    # E over y ~ N(A omega, M) of g g^T: g is affine in y and vanishes at y = A omega
    G = sp.Matrix(g).jacobian(y)
    if any(sp.simplify(e) != 0 for e in sp.Matrix(g).subs(dict(zip(y, A * sp.Matrix(omega))))):
        raise ChannelError("g_out does not vanish at the mean of y: not a Gaussian channel")
    E = sp.simplify(sp.factor((C * G * M * G.T).trace()))
    psi = sp.simplify(-sp.Rational(K, 2) - sp.log((2 * sp.pi) ** K * detM) / 2)
    return OutputDerivation(
        channel=ch,
        omega=omega,
        y=y,
        Z_out=Z,
        log_Z_out=logZ,
        g_out=g,
        dg_out=dg,
        basis=sp.ImmutableMatrix(A),
        m=(),
        omega_of_m=sp.ImmutableMatrix(sp.zeros(len(omega), 1)),
        E_g2=E,
        E_g2_at_q0=E,
        q_hat_map=2 * alpha * E,
        psi_out=psi,
        params=tuple(s for s, _ in ch.params),
        deterministic=bool(ch.noiseless),
    )


@lru_cache(maxsize=64)
def derive(ch) -> OutputDerivation:
    """Derive Z_out, g_out, dg_out and the SE output map of a channel (THEORY 1.1).

    Cached in memory and on disk (:mod:`aim_sym.cache`), keyed by the channel's data."""
    if isinstance(ch, GaussianChannel):
        build = derive_gaussian
    elif isinstance(ch, DiscreteChannel):
        build = derive_discrete
    else:
        raise ChannelError(f"not a channel: {ch!r}")
    key = sp.srepr((type(ch).__name__, ch.name, ch.tokens,
                    [getattr(ch, f) for f in ("statistics", "noise", "outputs", "likelihood")
                     if hasattr(ch, f)], [s for s, _ in ch.params]))
    return cached("derive", key, lambda: build(ch), expect=OutputDerivation)


def substitute_params(expr, ch: Channel, values: dict):
    """Replace channel parameters by exact Rationals of the given values."""
    subs = {}
    for sym, _ in ch.params:
        name = sym.name
        if name not in values or values[name] is None:
            if expr_has(expr, sym):
                raise ChannelError(f"channel parameter {name} needs a value")
            continue
        subs[sym] = sp.Rational(str(values[name]))
    return expr.subs(subs) if subs else expr


def expr_has(expr, sym) -> bool:
    if isinstance(expr, (list, tuple)):
        return any(expr_has(e, sym) for e in expr)
    return expr.has(sym)


def stationarity_residual(d: OutputDerivation) -> sp.Expr:
    """4 alpha dPsi_out/dq - q_hat_map with V = Q0 - q: zero iff free-entropy stationarity
    reproduces the SE output map (THEORY 1.1). Gaussian channels only (closed form)."""
    if d.psi_out is None:
        raise ChannelError("Psi_out has no closed form for this channel; check it numerically")
    dpsi_dq = -sp.diff(d.psi_out, V)  # V = Q0 - q
    return sp.simplify(4 * alpha * dpsi_dq - d.q_hat_map)


__all__ = ["derive", "OutputDerivation", "Event", "parse_events", "stationarity_residual", "q",
           "substitute_params", "expr_has"]
