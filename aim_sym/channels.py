"""Output channels P_out(y | h) of the attention-indexed model, as data (THEORY 1).

A channel is a sympy description, not a code path. Two families cover the papers' channels and
user channels alike; :mod:`aim_sym.output` derives everything else from them.

* :class:`GaussianChannel`: the observation carries linear statistics u = A h of the
  pre-activations, seen through additive Gaussian noise of covariance ``noise`` (zero for a
  noiseless channel). Built-ins: ``linear`` (y = h, optionally noisy) and ``softmax`` (y =
  softmax(beta h) row-wise), whose statistics are *derived* from the sympy formula of y as the
  row-wise log-ratios log(y_ab / y_aa), checked to be linear in h and reduced to a basis.
* :class:`DiscreteChannel`: finitely many outputs y, each with P(y | h) a polynomial in
  Heaviside functions of affine forms of h (argmax, sign, their noisy mixtures). Built-ins:
  ``hardmax`` and ``noisy_hardmax``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import sympy as sp

from .symbols import h_matrix, h_symbols, weight_matrix

BETA = sp.Symbol("beta", positive=True)
DELTA_OUT = sp.Symbol("Delta_out", nonnegative=True)
EPS = sp.Symbol("epsilon", nonnegative=True)


class ChannelError(ValueError):
    """A channel description the engine cannot use; the message says which part and why."""


@dataclass(frozen=True)
class GaussianChannel:
    """u = A h + noise, noise ~ N(0, ``noise``); ``statistics`` is A (K x n, full row rank)."""

    name: str
    tokens: int
    statistics: sp.ImmutableMatrix
    noise: sp.ImmutableMatrix
    observation: sp.ImmutableMatrix | None = None
    params: tuple[tuple[sp.Symbol, object], ...] = ()
    description: str = ""
    noiseless: bool = True

    @property
    def n_stats(self) -> int:
        return self.statistics.rows


@dataclass(frozen=True)
class DiscreteChannel:
    """Finite outputs; ``likelihood[i]`` is P(outputs[i] | h), polynomial in Heaviside(affine(h))."""

    name: str
    tokens: int
    outputs: tuple
    likelihood: tuple[sp.Expr, ...]
    params: tuple[tuple[sp.Symbol, object], ...] = ()
    description: str = ""
    observation: object = field(default=None, compare=False)


Channel = GaussianChannel | DiscreteChannel


def _require_tokens(T: int) -> None:
    if not isinstance(T, int) or T < 2:
        raise ChannelError(f"tokens (T) must be an integer >= 2; got {T!r}")


def row_basis(A: sp.Matrix) -> sp.ImmutableMatrix:
    """A basis of the row space of A (rows of its reduced echelon form)."""
    R, pivots = A.rref()
    return sp.ImmutableMatrix(R[: len(pivots), :])


def coefficients(exprs, T: int) -> sp.Matrix:
    """Coefficient matrix of expressions that must be linear (homogeneous) in h."""
    hs = h_symbols(T)
    rows = []
    for e in exprs:
        e = sp.expand(e)
        row = [sp.diff(e, s) for s in hs]
        if any(c.has(*hs) for c in row) or sp.simplify(e - sum(c * s for c, s in zip(row, hs))) != 0:
            raise ChannelError(f"statistic {e} is not a linear form of h")
        rows.append(row)
    return sp.Matrix(rows)


def linear(T: int, *, noisy: bool = False) -> GaussianChannel:
    """y_ab = h_ab (+ sqrt((1 + delta_ab) Delta_out) xi_ab when ``noisy``) (THEORY 1)."""
    _require_tokens(T)
    n = T * (T + 1) // 2
    noise = DELTA_OUT * weight_matrix(T) if noisy else sp.zeros(n, n)
    return GaussianChannel(
        name="linear-noisy" if noisy else "linear",
        tokens=T,
        statistics=sp.ImmutableMatrix(sp.eye(n)),
        noise=sp.ImmutableMatrix(noise),
        observation=sp.ImmutableMatrix(h_matrix(T)),
        params=((DELTA_OUT, None),) if noisy else (),
        description="y = h" + (" + Gaussian noise of variance Delta_out (1 + delta_ab)" if noisy else ""),
        noiseless=not noisy,
    )


def softmax_observation(T: int) -> sp.Matrix:
    """y = softmax(beta h) row-wise, as a sympy matrix."""
    H = h_matrix(T)
    return sp.Matrix(
        T, T, lambda i, j: sp.exp(BETA * H[i, j]) / sum(sp.exp(BETA * H[i, k]) for k in range(T))
    )


def log_ratio_statistics(Y: sp.Matrix) -> list[sp.Expr]:
    """Row-wise log-ratios log(y_ab / y_aa), simplified: sufficient statistics of a softmax."""
    stats = []
    for a in range(Y.rows):
        for b in range(Y.cols):
            if a != b:
                s = sp.expand_log(sp.log(sp.simplify(Y[a, b] / Y[a, a])), force=True)
                stats.append(sp.expand(sp.simplify(s)))
    return stats


def softmax(T: int) -> GaussianChannel:
    """y = softmax(beta h) row-wise, noiseless, any beta > 0 (THEORY 1).

    The statistics are derived from the formula of y: each log-ratio is beta (h_ab - h_aa),
    linear in h; their span has dimension T(T+1)/2 - 1 (one shift is lost).
    """
    _require_tokens(T)
    Y = softmax_observation(T)
    A = coefficients(log_ratio_statistics(Y), T) / BETA
    A = A.applyfunc(sp.simplify)
    if any(c.has(BETA) for c in A):
        raise ChannelError("softmax log-ratios are not proportional to beta")
    basis = row_basis(A)
    k = basis.rows
    return GaussianChannel(
        name="softmax",
        tokens=T,
        statistics=basis,
        noise=sp.ImmutableMatrix(sp.zeros(k, k)),
        observation=sp.ImmutableMatrix(Y),
        params=((BETA, None),),
        description="y = softmax(beta h) row-wise (noiseless, any beta > 0)",
        noiseless=True,
    )


def argmax_likelihood(T: int) -> tuple[tuple, tuple[sp.Expr, ...]]:
    """Outputs (argmax of each row) and P(y | h) = prod_a prod_{c != b_a} H(h_{a b_a} - h_{a c})."""
    H = h_matrix(T)
    outputs = tuple(itertools.product(range(1, T + 1), repeat=T))
    like = []
    for y in outputs:
        p = sp.Integer(1)
        for a, b in enumerate(y):
            for c in range(T):
                if c != b - 1:
                    p *= sp.Heaviside(H[a, b - 1] - H[a, c])
        like.append(p)
    return outputs, tuple(like)


def hardmax(T: int) -> DiscreteChannel:
    """y_a. = one-hot(argmax_b h_ab) row-wise, the beta -> infinity limit of softmax."""
    _require_tokens(T)
    outputs, like = argmax_likelihood(T)
    return DiscreteChannel(
        name="hardmax",
        tokens=T,
        outputs=outputs,
        likelihood=like,
        description="y_a = one-hot(argmax_b h_ab) row-wise; outputs are the argmax of each row",
    )


def noisy_hardmax(T: int = 2) -> DiscreteChannel:
    """Hardmax whose argmax in each row is replaced, with probability epsilon, by a uniformly
    chosen other token."""
    _require_tokens(T)
    outputs, _ = argmax_likelihood(T)
    H = h_matrix(T)

    def row_event(a: int, b: int) -> sp.Expr:
        return sp.Mul(*[sp.Heaviside(H[a, b - 1] - H[a, c]) for c in range(T) if c != b - 1])

    like = []
    for y in outputs:
        p = sp.Integer(1)
        for a, b in enumerate(y):
            others = [row_event(a, c) for c in range(1, T + 1) if c != b]
            p *= (1 - EPS) * row_event(a, b) + EPS / (T - 1) * sum(others)
        like.append(p)
    return DiscreteChannel(
        name="noisy-hardmax",
        tokens=T,
        outputs=outputs,
        likelihood=tuple(like),
        params=((EPS, None),),
        description="hardmax with each row's argmax flipped, with probability epsilon, "
        "to a uniformly chosen other token",
    )


BUILTIN = {
    "linear": lambda T: linear(T),
    "linear-noisy": lambda T: linear(T, noisy=True),
    "softmax": softmax,
    "hardmax": hardmax,
    "noisy-hardmax": noisy_hardmax,
}


def builtin(name: str, T: int) -> Channel:
    """A built-in channel by name."""
    if name not in BUILTIN:
        raise ChannelError(f"channel must be one of {', '.join(BUILTIN)}; got {name!r}")
    return BUILTIN[name](T)


# ----------------------------------------------------------------------------- user builders
def discrete(*, name: str, tokens: int, likelihood: dict, params: dict | None = None,
             description: str = "") -> DiscreteChannel:
    """A channel with finitely many outputs: ``likelihood`` maps each output label to P(y | h),
    a sympy polynomial in Heaviside functions of affine forms of h (use :func:`h_matrix`).
    ``params`` maps parameter symbols to default values (e.g. {epsilon: 0.1})."""
    _require_tokens(tokens)
    outputs = tuple(likelihood)
    like = tuple(sp.sympify(likelihood[y]) for y in outputs)
    ch = DiscreteChannel(
        name=name, tokens=tokens, outputs=outputs, likelihood=like,
        params=tuple((s, v) for s, v in (params or {}).items()), description=description or name,
    )
    validate(ch)
    return ch


def gaussian(*, name: str, tokens: int, statistics, noise=None, params: dict | None = None,
             description: str = "") -> GaussianChannel:
    """u = A h + noise: ``statistics`` is a list of linear forms of h (sympy), reduced to a
    basis; ``noise`` their noise covariance (None: noiseless)."""
    _require_tokens(tokens)
    A = coefficients(list(statistics), tokens)
    basis = row_basis(A)
    if basis.rows < A.rows and noise is not None:
        raise ChannelError("noisy statistics must be linearly independent")
    k = basis.rows
    N = sp.zeros(k, k) if noise is None else sp.Matrix(noise)
    if N.shape != (k, k):
        raise ChannelError(f"noise must be a {k} x {k} matrix; got shape {N.shape}")
    ch = GaussianChannel(
        name=name, tokens=tokens, statistics=basis, noise=sp.ImmutableMatrix(N),
        params=tuple((s, v) for s, v in (params or {}).items()), description=description or name,
        noiseless=noise is None,
    )
    validate(ch)
    return ch


def sign_channel(*, name: str, tokens: int, forms, description: str = "") -> DiscreteChannel:
    """y = (sign(form_1 . h), ..., sign(form_k . h)) for linear forms of h; outputs are the
    sign patterns."""
    forms = [sp.sympify(f) for f in forms]
    like = {}
    for signs in itertools.product((1, -1), repeat=len(forms)):
        like[signs if len(signs) > 1 else signs[0]] = sp.Mul(
            *[sp.Heaviside(s * f) for s, f in zip(signs, forms)]
        )
    return discrete(name=name, tokens=tokens, likelihood=like, description=description)


def validate(ch: Channel, *, samples: int = 16, seed: int = 0) -> None:
    """Reject channels the engine cannot use, saying which part is wrong.

    Unknown symbols (anything but h_ab and declared parameters); discrete likelihoods that are
    negative or do not sum to 1 (checked exactly at random rational h and parameter values).
    """
    import random

    hs = set(h_symbols(ch.tokens))
    declared = {s for s, _ in ch.params}
    exprs = (list(ch.likelihood) if isinstance(ch, DiscreteChannel)
             else list(ch.statistics) + list(ch.noise))
    for e in exprs:
        unknown = sp.sympify(e).free_symbols - hs - declared
        if unknown:
            raise ChannelError(
                f"channel {ch.name}: unknown symbol(s) {sorted(map(str, unknown))}; the engine "
                f"knows h_ab ({', '.join(sorted(map(str, hs)))}) and the declared params"
            )
    if not isinstance(ch, DiscreteChannel):
        return
    rng = random.Random(seed)
    for _ in range(samples):
        sub = {s: sp.Rational(rng.randint(-300, 300), 97) for s in hs}
        sub.update({s: sp.Rational(str(v if v is not None else "0.1")) for s, v in ch.params})
        vals = [sp.nsimplify(p.subs(sub)) for p in ch.likelihood]
        for y, v in zip(ch.outputs, vals):
            if v.is_negative:
                raise ChannelError(f"channel {ch.name}: P(y={y} | h) = {v} < 0 at h = {sub}")
        total = sp.nsimplify(sum(vals))
        if total != 1:
            raise ChannelError(
                f"channel {ch.name}: probabilities sum to {total}, not 1, at h = "
                f"{ {str(k): str(v) for k, v in sub.items()} }"
            )
