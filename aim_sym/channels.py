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
import math
from dataclasses import dataclass, field, replace

import sympy as sp

from .domains import Domain, DomainError
from .numerics.records import InputError
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
    domains: tuple[tuple[str, Domain], ...] = field(default=(), compare=False)

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
    domains: tuple[tuple[str, Domain], ...] = field(default=(), compare=False)


Channel = GaussianChannel | DiscreteChannel


# ----------------------------------------------------------------------------- parameter domains
# Each built-in channel declares its parameters' domains here, once; the API and the CLI
# validate through them (aim_sym.domains). Keys of a channel's ``domains`` are symbol names.
TOKENS_GAUSSIAN = Domain(
    name="tokens", option="--tokens", kind="integer", low=2, high=8, default=2,
    description="tokens T of a Gaussian channel (linear, softmax): the T(T+1)/2 statistics are "
    "derived symbolically, about 30 s at T = 8 and growing steeply beyond")
TOKENS_ARGMAX = Domain(
    name="tokens", option="--tokens", kind="integer", low=2, high=2, default=2,
    note="for this command; hardmax at T = 3..5: se, curve, check, derive, amp and "
    "threshold weak --small-width",
    description="tokens T of an argmax channel (hardmax, noisy-hardmax) in the SE, curves, AMP "
    "and checks: T = 2 for the symbolic route; hardmax T = 3..5 by its own engines (se, curve, "
    "check, derive, amp, threshold weak --small-width)")
TOKENS_HARDMAX_WEAK = Domain(
    name="tokens", option="--tokens", kind="integer", low=2, high=5, default=2,
    note="the ordered-cone recursion integrates over 2^(T(T-1)/2) subsets: 1024 at T = 5",
    description="tokens T of the hardmax small-width weak-recovery threshold (THEORY 1.4): "
    "T = 2 in closed form, 3..5 by the ordered-cone recursion (under a second at T = 5)")
TOKENS_FILE = TOKENS_GAUSSIAN.with_(
    description="tokens T passed to a channel file's channel(tokens) (2..8, as for Gaussian "
    "channels; the file may accept fewer)")
BETA_DOMAIN = Domain(
    name="beta", option="--beta", low=0, low_open=True, default=1.0,
    description="inverse temperature beta of the softmax, finite > 0 (the AIM SE does not "
    "depend on it: the statistics beta (h_ab - h_aa) carry no noise)")
DELTA_OUT_DOMAIN = Domain(
    name="delta_out", option="--delta-out", low=0, high=1e8,
    description="output noise variance Delta_out of linear-noisy, in [0, 1e8]: beyond, the "
    "channel carries no information a double resolves (mmse = 1 - O(alpha / Delta_out))")
EPSILON_DOMAIN = Domain(
    name="epsilon", option="--epsilon", low=0, high=0.5, high_open=True,
    description="flip probability epsilon of noisy-hardmax, in [0, 1/2): at 1/2 the output "
    "no longer depends on h (T = 2)")
_DEPTH_ROUTES = ("the model object holds the deterministic lattice, L = 2, 3 with M = 2; depths "
                 "1-6 and M = 3: aim_sym.thresholds.smi_depth_weak, smi_depth_sequential, "
                 "smi_branch_point, or the command line")
LAYERS_DOMAIN = Domain(
    name="layers", option="--layers", kind="integer", choices=(2, 3), default=2,
    note=_DEPTH_ROUTES,
    description="depth L of SMI deep attention in the model object: 2 (SE, thresholds, AMP) "
    "or 3 (thresholds)")
SMI_TOKENS_DOMAIN = Domain(
    name="tokens", option="--tokens", kind="integer", low=2, high=2, default=2,
    note=_DEPTH_ROUTES,
    description="tokens M of SMI deep attention in the model object: 2")
SKIP_DOMAIN = Domain(
    name="skip", option="--skip", low=0, low_open=True, default=1.0,
    description="skip strength c of SMI deep attention, finite > 0: at c = 0 det A = c (1 + c) "
    "vanishes and the engines refuse it; validated ranges: L = 2 c >= 0.5 (SE, sequential), "
    "L = 3 c in [0.5, 4] with beta in [0.25, 2] (weak thresholds)")
SMI_BETA_DOMAIN = BETA_DOMAIN.with_(description="inverse temperature beta of the SMI "
                                    "attention, finite > 0")

#: API keyword -> symbol name of the built-in channel parameters
KEYWORDS = {"beta": "beta", "delta_out": "Delta_out", "epsilon": "epsilon"}


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


def _tokens(T, tokens, domain: Domain) -> int:
    """The positional T (symbolic use: any T >= 2) or the keyword ``tokens`` (checked against
    the channel's domain: the numeric engines' range)."""
    if T is not None and tokens is not None:
        raise InputError(f"tokens must be given once (T or tokens=); got T={T!r}, tokens={tokens!r}")
    if tokens is not None:
        return domain.check(tokens)
    _require_tokens(T)
    return T


def _bind(ch: Channel, **values) -> Channel:
    """``ch`` with the given (non-None) keyword values bound to its parameters."""
    given = {k: v for k, v in values.items() if v is not None}
    return with_values(ch, given) if given else ch


def linear(T: int | None = None, *, noisy: bool = False, tokens: int | None = None,
           delta_out: float | None = None) -> GaussianChannel:
    """y_ab = h_ab (+ sqrt((1 + delta_ab) Delta_out) xi_ab when ``noisy`` or ``delta_out`` is
    given) (THEORY 1)."""
    T = _tokens(T, tokens, TOKENS_GAUSSIAN)
    noisy = noisy or delta_out is not None
    n = T * (T + 1) // 2
    noise = DELTA_OUT * weight_matrix(T) if noisy else sp.zeros(n, n)
    ch = GaussianChannel(
        name="linear-noisy" if noisy else "linear",
        tokens=T,
        statistics=sp.ImmutableMatrix(sp.eye(n)),
        noise=sp.ImmutableMatrix(noise),
        observation=sp.ImmutableMatrix(h_matrix(T)),
        params=((DELTA_OUT, None),) if noisy else (),
        description="y = h" + (" + Gaussian noise of variance Delta_out (1 + delta_ab)" if noisy else ""),
        noiseless=not noisy,
        domains=(("tokens", TOKENS_GAUSSIAN),) + ((("Delta_out", DELTA_OUT_DOMAIN),) if noisy else ()),
    )
    return _bind(ch, Delta_out=delta_out)


def linear_noisy(T: int | None = None, *, tokens: int | None = None,
                 delta_out: float | None = None) -> GaussianChannel:
    """y_ab = h_ab + sqrt((1 + delta_ab) Delta_out) xi_ab (the channel ``linear-noisy``)."""
    return linear(T, noisy=True, tokens=tokens, delta_out=delta_out)


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


def softmax(T: int | None = None, *, tokens: int | None = None,
            beta: float | None = None) -> GaussianChannel:
    """y = softmax(beta h) row-wise, noiseless, any beta > 0 (THEORY 1).

    The statistics are derived from the formula of y: each log-ratio is beta (h_ab - h_aa),
    linear in h; their span has dimension T(T+1)/2 - 1 (one shift is lost). ``beta`` may stay
    unbound: the AIM SE does not depend on it.
    """
    T = _tokens(T, tokens, TOKENS_GAUSSIAN)
    Y = softmax_observation(T)
    A = coefficients(log_ratio_statistics(Y), T) / BETA
    A = A.applyfunc(sp.simplify)
    if any(c.has(BETA) for c in A):
        raise ChannelError("softmax log-ratios are not proportional to beta")
    basis = row_basis(A)
    k = basis.rows
    ch = GaussianChannel(
        name="softmax",
        tokens=T,
        statistics=basis,
        noise=sp.ImmutableMatrix(sp.zeros(k, k)),
        observation=sp.ImmutableMatrix(Y),
        params=((BETA, None),),
        description="y = softmax(beta h) row-wise (noiseless, any beta > 0)",
        noiseless=True,
        domains=(("tokens", TOKENS_GAUSSIAN), ("beta", BETA_DOMAIN)),
    )
    return _bind(ch, beta=beta)


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


def hardmax(T: int | None = None, *, tokens: int | None = None) -> DiscreteChannel:
    """y_a. = one-hot(argmax_b h_ab) row-wise, the beta -> infinity limit of softmax."""
    T = _tokens(T, tokens, TOKENS_ARGMAX)
    outputs, like = argmax_likelihood(T)
    return DiscreteChannel(
        name="hardmax",
        tokens=T,
        outputs=outputs,
        likelihood=like,
        description="y_a = one-hot(argmax_b h_ab) row-wise; outputs are the argmax of each row",
        domains=(("tokens", TOKENS_ARGMAX),),
    )


def noisy_hardmax(T: int | None = None, *, tokens: int | None = None,
                  epsilon: float | None = None) -> DiscreteChannel:
    """Hardmax whose argmax in each row is replaced, with probability epsilon, by a uniformly
    chosen other token."""
    T = _tokens(2 if T is None and tokens is None else T, tokens, TOKENS_ARGMAX)
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
    ch = DiscreteChannel(
        name="noisy-hardmax",
        tokens=T,
        outputs=outputs,
        likelihood=tuple(like),
        params=((EPS, None),),
        description="hardmax with each row's argmax flipped, with probability epsilon, "
        "to a uniformly chosen other token",
        domains=(("tokens", TOKENS_ARGMAX), ("epsilon", EPSILON_DOMAIN)),
    )
    return _bind(ch, epsilon=epsilon)


BUILTIN = {
    "linear": lambda T: linear(T),
    "linear-noisy": lambda T: linear(T, noisy=True),
    "softmax": softmax,
    "hardmax": hardmax,
    "noisy-hardmax": noisy_hardmax,
}
_BUILDERS = {"linear": linear, "linear-noisy": linear_noisy, "softmax": softmax,
             "hardmax": hardmax, "noisy-hardmax": noisy_hardmax}
CHANNEL_DOMAIN = Domain(name="channel", option="--channel", choices=tuple(BUILTIN),
                        default="hardmax", description="a built-in AIM channel")


def builtin(name: str, T: int | None = None, *, tokens: int | None = None, **values) -> Channel:
    """A built-in channel by name: ``builtin("softmax", 2)`` (symbolic) or
    ``builtin("softmax", tokens=2, beta=2.0)`` (checked against its domains, values bound)."""
    if name not in BUILTIN:
        if tokens is None:
            raise ChannelError(f"channel must be one of {', '.join(BUILTIN)}; got {name!r}")
        CHANNEL_DOMAIN.check(name)
    if tokens is None and not values:
        return BUILTIN[name](T)
    builder = _BUILDERS[name]
    accepted = {"linear": ("delta_out",), "linear-noisy": ("delta_out",), "softmax": ("beta",),
                "hardmax": (), "noisy-hardmax": ("epsilon",)}[name]
    for key, value in values.items():
        if key not in accepted and value is not None:
            raise not_a_parameter(name, key, value, accepted)
    return builder(T, tokens=tokens, **{k: v for k, v in values.items() if k in accepted})


def not_a_parameter(channel: str, key: str, value, accepted) -> DomainError:
    """The error for a parameter the channel does not have (``--beta`` with hardmax)."""
    domain = {"beta": BETA_DOMAIN, "delta_out": DELTA_OUT_DOMAIN, "epsilon": EPSILON_DOMAIN,
              "Delta_out": DELTA_OUT_DOMAIN}.get(key)
    if domain is None:
        domain = Domain(name=key, option=f"--param {key}")
    names = ", ".join(accepted) if accepted else "none"
    return DomainError(domain, value, domain.name,
                       allowed=f"omitted for channel {channel} (its parameters: {names})")


# ----------------------------------------------------------------------------- values
def _assumed_domain(sym: sp.Symbol) -> Domain:
    """The domain of a user channel's parameter, from its sympy assumptions."""
    if sym.is_positive:
        low, low_open = 0, True
    elif sym.is_nonnegative:
        low, low_open = 0, False
    else:
        low, low_open = None, False
    return Domain(name=sym.name, option=f"--param {sym.name}", low=low, low_open=low_open,
                  description=f"parameter {sym.name} of a user channel (range from its "
                  "sympy assumptions)")


def parameter_domains(ch: Channel) -> dict[str, Domain]:
    """Symbol name -> domain of each parameter of ``ch`` (declared, or from assumptions)."""
    declared = dict(ch.domains)
    return {s.name: declared.get(s.name) or _assumed_domain(s) for s, _ in ch.params}


def tokens_domain(ch: Channel) -> Domain:
    return dict(ch.domains).get("tokens", TOKENS_FILE)


def values_of(ch: Channel) -> dict:
    """Symbol name -> bound value (parameters without a value left out)."""
    return {s.name: v for s, v in ch.params if v is not None}


def with_values(ch: Channel, values: dict) -> Channel:
    """``ch`` with parameter values bound (keys: symbol names, or the built-ins' keywords
    ``beta``, ``delta_out``, ``epsilon``), each checked against its domain; then the channel as a
    whole: a Gaussian noise covariance must be positive semidefinite and discrete likelihoods
    non-negative at these values. Raises :class:`DomainError` naming the parameter."""
    domains = parameter_domains(ch)
    new = dict(ch.params)
    by_name = {s.name: s for s, _ in ch.params}
    for key, value in values.items():
        name = KEYWORDS.get(key, key) if KEYWORDS.get(key, key) in by_name else key
        if name not in by_name:
            raise not_a_parameter(ch.name, key, value, tuple(by_name))
        new[by_name[name]] = domains[name].check(value)
    out = replace(ch, params=tuple(new.items()))
    check_values(out)
    return out


def check_values(ch: Channel) -> None:
    """The channel is a probability model at its bound values: PSD noise covariance (Gaussian),
    non-negative likelihoods (discrete user channels; built-ins are covered by their domains)."""
    bound = {s: sp.Rational(str(v)) for s, v in ch.params if v is not None}
    if not bound:
        return
    domains = parameter_domains(ch)
    first = next(iter(sorted(s.name for s in bound)))
    if isinstance(ch, GaussianChannel):
        N = sp.Matrix(ch.noise).subs(bound)
        if N.free_symbols or not N.rows:
            return
        eig = [complex(e) for e in sp.Matrix(N).evalf(30).eigenvals(multiple=True)]
        scale = max([1.0] + [abs(e) for e in eig])
        if any(e.real < -1e-12 * scale or not math.isfinite(e.real) for e in eig):
            involved = sorted(s.name for s in ch.noise.free_symbols & set(bound)) or [first]
            raise DomainError(domains[involved[0]], dict(ch.params)[_sym(ch, involved[0])],
                              involved[0], allowed="a value at which the noise covariance is "
                              "positive semidefinite")
        return
    if all(s.name in dict(ch.domains) for s in bound):
        return
    try:
        validate(ch, values={s.name: v for s, v in bound.items()})
    except ChannelError:
        raise DomainError(domains[first], dict(ch.params)[_sym(ch, first)], first,
                          allowed="a value at which every P(y | h) is a probability (>= 0, "
                          "summing to 1 over y)") from None


def _sym(ch: Channel, name: str) -> sp.Symbol:
    return next(s for s, _ in ch.params if s.name == name)


# ----------------------------------------------------------------------------- SMI deep attention
@dataclass(frozen=True, kw_only=True)
class DeepAttention:
    """SMI deep attention (THEORY 2): ``layers`` tied softmax attention layers with skip
    strength ``skip`` and inverse temperature ``beta`` over ``tokens`` tokens. Validated when
    built; the symbolic derivation is :mod:`aim_sym.smi`."""

    layers: int = 2
    tokens: int = 2
    skip: float = 1.0
    beta: float = 1.0
    name: str = "deep-attention"

    def __post_init__(self) -> None:
        for key, dom in self.domains().items():
            object.__setattr__(self, key, dom.check(getattr(self, key)))
        if self.name != "deep-attention":
            raise InputError(f"name must be deep-attention; got {self.name!r}")

    @staticmethod
    def domains() -> dict[str, Domain]:
        return {"layers": LAYERS_DOMAIN, "tokens": SMI_TOKENS_DOMAIN, "skip": SKIP_DOMAIN,
                "beta": SMI_BETA_DOMAIN}

    def as_dict(self) -> dict:
        return {"layers": self.layers, "tokens": self.tokens, "skip": self.skip, "beta": self.beta}


def deep_attention(*, layers: int = 2, tokens: int = 2, skip: float = 1.0,
                   beta: float = 1.0) -> DeepAttention:
    """The SMI deep-attention channel (every argument checked against its domain)."""
    return DeepAttention(layers=layers, tokens=tokens, skip=skip, beta=beta)


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
    """u = A h + noise: ``statistics`` is a list of linear forms of h (sympy); ``noise`` their
    noise covariance (None: noiseless). Noiseless statistics are reduced to a basis of their row
    space (the same information); noisy ones are kept as given, since a change of basis T would
    turn the noise N into T N T^T."""
    _require_tokens(tokens)
    A = coefficients(list(statistics), tokens)
    basis = row_basis(A)
    if basis.rows < A.rows and noise is not None:
        raise ChannelError("noisy statistics must be linearly independent")
    if noise is not None:
        basis = sp.ImmutableMatrix(A)
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


def validate(ch: Channel, *, samples: int = 16, seed: int = 0, values: dict | None = None) -> None:
    """Reject channels the engine cannot use, saying which part is wrong.

    Unknown symbols (anything but h_ab and declared parameters); discrete likelihoods that are
    negative or do not sum to 1 (checked exactly at random rational h, at the parameters'
    ``values`` by name, else their defaults, else 0.1).
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
        sub.update({s: sp.Rational(str((values or {}).get(s.name, v if v is not None else "0.1")))
                    for s, v in ch.params})
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
