"""SMI output channels as data (THEORY 2, 2.5): a sympy description of y given z in R^{P x M}.

z is a P x M matrix of sympy symbols (:func:`z_matrix`); token column z_m ~ N(0, I_P). A channel
is one of two kinds, each a frozen :class:`SMIChannel`:

* ``noisy``: y = g(z) + sqrt(Delta) xi, xi ~ N(0, I_K); ``output`` is the vector g of the K free
  outputs (sympy expressions of z), ``noise`` the variance Delta (a parameter symbol, > 0);
* ``discrete``: y takes finitely many values ``labels``; ``output[i]`` is P(y = labels[i] | z),
  sympy Heaviside / indicator expressions of z (as on the AIM side, :mod:`aim_sym.channels`).

``layers`` (optional) names which rows of z belong to which layer (deep attention): the weak
threshold is then reported per layer block of the stability operator (THEORY 2.2).

A channel file for the SMI (``--model smi --channel-file F``) defines ``smi_channel(tokens)``
returning an :class:`SMIChannel`, built with :func:`noisy` or :func:`discrete` and
:func:`z_matrix` (examples/channels/smi/*.py). Built-ins: :func:`sign_product` (the sequence
single-index model y = sign(z_1 . z_2)), :func:`noisy_attention` (one softmax attention layer
seen through Gaussian noise) and :func:`noisy_deep_attention` (THEORY 2, L = 2, M = 2, P_l = 1,
with output noise).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import sympy as sp

from .domains import Domain
from .numerics.records import InputError

BETA = sp.Symbol("beta", positive=True)
SKIP = sp.Symbol("c", positive=True)
DELTA = sp.Symbol("Delta", positive=True)

KINDS = ("noisy", "discrete")

# ----------------------------------------------------------------------------- domains
TOKENS = Domain(name="tokens", option="--tokens", kind="integer", low=2, high=4, default=2,
                description="tokens M of an SMI channel (2..4: the quadrature's inner "
                "dimension P M grows with M)")
ROWS = Domain(name="rows", option="--rows", kind="integer", low=1, high=2, default=1,
              description="rows P of the sequence single-index model (1..2)")
BETA_DOMAIN = Domain(name="beta", option="--beta", low=0, low_open=True, high=10, default=1.0,
                     description="inverse temperature beta of the softmax, in (0, 10]")
SKIP_DOMAIN = Domain(name="skip", option="--skip", low=0.05, high=100, default=1.0,
                     description="skip strength c of deep attention, in [0.05, 100] (the "
                     "quadrature does not resolve the width-sqrt(c) features of smaller c)")
NOISE_DOMAIN = Domain(name="noise", option="--noise", low=1e-3, high=1e4, default=0.1,
                      description="output noise variance Delta, in [1e-3, 1e4] (below, the "
                      "posterior is narrower than the Gauss-Hermite inner rule resolves)")


class SMIChannelError(InputError):
    """A channel description the SMI engine cannot use; the message says which part and why."""


def z_symbols(P: int, M: int) -> list[sp.Symbol]:
    """z_{p,m} row by row (p = 1..P rows, m = 1..M tokens): the flat order of the engine."""
    return [sp.Symbol(f"z_{p}_{m}", real=True) for p in range(1, P + 1) for m in range(1, M + 1)]


def z_matrix(P: int, M: int) -> sp.Matrix:
    """The P x M matrix of pre-activations; column m is token z_m ~ N(0, I_P)."""
    return sp.Matrix(P, M, z_symbols(P, M))


def softmax_rows(S: sp.Matrix, beta=BETA) -> sp.Matrix:
    """Row-wise softmax(beta S)."""
    return sp.Matrix(S.rows, S.cols, lambda a, b: sp.exp(beta * S[a, b])
                     / sum(sp.exp(beta * S[a, k]) for k in range(S.cols)))


def free_entries(Y: sp.Matrix) -> list[sp.Expr]:
    """The M (M - 1) free entries of a row-stochastic M x M matrix: the off-diagonal ones (each
    row's diagonal is one minus the rest), row by row."""
    return [Y[a, b] for a in range(Y.rows) for b in range(Y.cols) if a != b]


@dataclass(frozen=True, kw_only=True)
class SMIChannel:
    """An SMI output channel y | z, z in R^{P x M} (THEORY 2.5). See the module docstring."""

    name: str
    P: int
    M: int
    kind: str
    output: tuple[sp.Expr, ...]
    noise: sp.Expr | None = None
    labels: tuple = ()
    params: tuple[tuple[sp.Symbol, object], ...] = ()
    layers: tuple[tuple[int, ...], ...] = ()
    description: str = ""
    domains: tuple[tuple[str, Domain], ...] = field(default=(), compare=False)

    @property
    def z(self) -> sp.Matrix:
        return z_matrix(self.P, self.M)

    @property
    def K(self) -> int:
        """Number of free outputs (noisy) or of output values (discrete)."""
        return len(self.output)

    def values(self) -> dict[str, float]:
        """Symbol name -> bound value."""
        return {s.name: v for s, v in self.params if v is not None}

    def unbound(self) -> list[str]:
        return [s.name for s, v in self.params if v is None]

    def layer_blocks(self) -> tuple[tuple[int, ...], ...]:
        """Rows of each layer (0-based); one block of all rows when ``layers`` is not given."""
        return self.layers or (tuple(range(self.P)),)


def _check_shape(P: int, M: int) -> None:
    if not (isinstance(P, int) and P >= 1 and isinstance(M, int) and M >= 1):
        raise SMIChannelError(f"P and M must be integers >= 1; got P={P!r}, M={M!r}")


def _check_symbols(ch: SMIChannel) -> None:
    known = set(z_symbols(ch.P, ch.M)) | {s for s, _ in ch.params}
    exprs = list(ch.output) + ([ch.noise] if ch.noise is not None else [])
    for e in exprs:
        unknown = sp.sympify(e).free_symbols - known
        if unknown:
            raise SMIChannelError(
                f"channel {ch.name}: unknown symbol(s) {sorted(map(str, unknown))}; the engine "
                f"knows z_p_m (p = 1..{ch.P}, m = 1..{ch.M}) and the declared params")
    if not any(sp.sympify(e).free_symbols & set(z_symbols(ch.P, ch.M)) for e in ch.output):
        raise SMIChannelError(f"channel {ch.name}: the output does not depend on z")


def _check_layers(layers, P: int) -> tuple[tuple[int, ...], ...]:
    layers = tuple(tuple(int(r) for r in block) for block in layers or ())
    if layers:
        rows = sorted(r for block in layers for r in block)
        if rows != list(range(P)):
            raise SMIChannelError(f"layers must partition the rows 0..{P - 1}; got {layers}")
    return layers


def noisy(*, name: str, P: int, M: int, output, noise=DELTA, params: dict | None = None,
          layers=(), description: str = "", domains: dict | None = None) -> SMIChannel:
    """y = g(z) + sqrt(noise) xi: ``output`` lists the free outputs g_k(z) (sympy, in the symbols
    of :func:`z_matrix`), ``noise`` the variance (a positive symbol listed in ``params`` or a
    positive number)."""
    _check_shape(P, M)
    params = dict(params or {})
    noise = sp.sympify(noise)
    if isinstance(noise, sp.Symbol) and noise not in params:
        params[noise] = None
    ch = SMIChannel(name=name, P=P, M=M, kind="noisy",
                    output=tuple(sp.sympify(e) for e in output), noise=noise,
                    params=tuple(params.items()), layers=_check_layers(layers, P),
                    description=description or name, domains=tuple((domains or {}).items()))
    if not ch.output:
        raise SMIChannelError(f"channel {name}: output must list at least one expression")
    _check_symbols(ch)
    if noise.is_number and not noise > 0:
        raise SMIChannelError(f"channel {name}: the noise variance must be > 0; got {noise}")
    if not noise.is_number and not noise.is_positive:
        raise SMIChannelError(f"channel {name}: the noise variance {noise} must be declared "
                              "positive (sp.Symbol(..., positive=True))")
    return ch


def discrete(*, name: str, P: int, M: int, likelihood: dict, params: dict | None = None,
             layers=(), description: str = "", domains: dict | None = None,
             samples: int = 16, seed: int = 0) -> SMIChannel:
    """Finitely many outputs: ``likelihood`` maps each label to P(y | z), a sympy expression in
    Heaviside functions of z. Checked exactly at random rational z: non-negative, summing to 1."""
    _check_shape(P, M)
    labels = tuple(likelihood)
    ch = SMIChannel(name=name, P=P, M=M, kind="discrete",
                    output=tuple(sp.sympify(likelihood[y]) for y in labels), labels=labels,
                    params=tuple((params or {}).items()), layers=_check_layers(layers, P),
                    description=description or name, domains=tuple((domains or {}).items()))
    _check_symbols(ch)
    rng = random.Random(seed)
    zs = z_symbols(P, M)
    for _ in range(samples):
        sub = {s: sp.Rational(rng.randint(-300, 300), 97) for s in zs}
        sub.update({s: sp.Rational(str(v if v is not None else "0.1")) for s, v in ch.params})
        vals = [sp.nsimplify(p.subs(sub)) for p in ch.output]
        for y, v in zip(labels, vals):
            if v.is_negative:
                raise SMIChannelError(f"channel {name}: P(y={y} | z) = {v} < 0 at z = {sub}")
        if sp.nsimplify(sum(vals)) != 1:
            raise SMIChannelError(f"channel {name}: probabilities sum to {sum(vals)}, not 1")
    return ch


def sign_channel(*, name: str, P: int, M: int, form, description: str = "",
                 layers=()) -> SMIChannel:
    """y = sign(form(z)) for a sympy expression ``form``: labels +1 and -1."""
    form = sp.sympify(form)
    return discrete(name=name, P=P, M=M, layers=layers, description=description or name,
                    likelihood={1: sp.Heaviside(form), -1: sp.Heaviside(-form)})


# ----------------------------------------------------------------------------- values
def parameter_domains(ch: SMIChannel) -> dict[str, Domain]:
    """Symbol name -> domain (declared, else from the symbol's sympy assumptions)."""
    declared = dict(ch.domains)
    out = {}
    for s, _ in ch.params:
        if s.name in declared:
            out[s.name] = declared[s.name]
            continue
        low, low_open = (0, True) if s.is_positive else ((0, False) if s.is_nonnegative
                                                         else (None, False))
        out[s.name] = Domain(name=s.name, option=f"--param {s.name}", low=low, low_open=low_open,
                             description=f"parameter {s.name} of an SMI channel (range from "
                             "its sympy assumptions)")
    return out


def with_values(ch: SMIChannel, values: dict) -> SMIChannel:
    """``ch`` with parameter values bound (keys: symbol names), each checked by its domain."""
    domains = parameter_domains(ch)
    new = dict(ch.params)
    by_name = {s.name: s for s, _ in ch.params}
    for key, value in values.items():
        if value is None:
            continue
        if key not in by_name:
            names = ", ".join(by_name) or "none"
            raise SMIChannelError(f"{key} is not a parameter of channel {ch.name} (its "
                                  f"parameters: {names})")
        new[by_name[key]] = domains[key].check(value)
    return replace(ch, params=tuple(new.items()))


def bound(ch: SMIChannel) -> SMIChannel:
    """``ch`` itself; InputError naming the first parameter without a value."""
    missing = ch.unbound()
    if missing:
        raise SMIChannelError(f"channel {ch.name}: parameter {missing[0]} has no value "
                              f"(give it, e.g. {missing[0]}=0.1)")
    return ch


def substituted(ch: SMIChannel) -> tuple[list[sp.Expr], sp.Expr | None]:
    """The output expressions and the noise with every parameter's value substituted exactly."""
    bound(ch)
    sub = {s: sp.Rational(str(v)) for s, v in ch.params}
    out = [sp.sympify(e).subs(sub) for e in ch.output]
    noise = None if ch.noise is None else sp.sympify(ch.noise).subs(sub)
    return out, noise


def flip_symmetric(ch: SMIChannel, rows: tuple[int, ...] | None = None) -> bool:
    """True if the channel is invariant under z_p -> -z_p for the given rows (default: all):
    then E[z_rows | y] = 0 under the Gaussian prior (THEORY 2.2), proved symbolically."""
    rows = tuple(range(ch.P)) if rows is None else rows
    Z = ch.z
    flip = {Z[p, m]: -Z[p, m] for p in rows for m in range(ch.M)}
    for e in ch.output:
        e = sp.sympify(e)
        if sp.simplify(e.xreplace(flip) - e) != 0:
            return False
    return True


# ----------------------------------------------------------------------------- built-ins
def sign_product(*, rows: int = 1) -> SMIChannel:
    """The sequence single-index model y = sign(z_1 . z_2), tokens z_1, z_2 in R^P (P = ``rows``);
    P = 1: y = sign(z_11 z_12)."""
    P = ROWS.check(rows, label="rows")
    Z = z_matrix(P, 2)
    form = sum(Z[p, 0] * Z[p, 1] for p in range(P))
    return sign_channel(name="sign-product", P=P, M=2, form=form,
                        description=f"y = sign(z_1 . z_2), tokens in R^{P}")


def noisy_attention(*, tokens: int = 2, beta: float | None = 1.0,
                    noise: float | None = 0.1) -> SMIChannel:
    """One softmax attention layer, P = 1: y = softmax_rows(beta z^T z) (scores z_a z_b), its
    M (M - 1) free entries seen through Gaussian noise of variance Delta."""
    M = TOKENS.check(tokens)
    Z = z_matrix(1, M)
    S = sp.Matrix(M, M, lambda a, b: Z[0, a] * Z[0, b])
    ch = noisy(name="noisy-attention", P=1, M=M, output=free_entries(softmax_rows(S)),
               noise=DELTA, params={BETA: None, DELTA: None},
               description="y = free entries of softmax_rows(beta z_a z_b) + N(0, Delta)",
               domains={"beta": BETA_DOMAIN, "Delta": NOISE_DOMAIN})
    return with_values(ch, {"beta": beta, "Delta": noise})


def noisy_deep_attention(*, skip: float | None = 1.0, beta: float | None = 1.0,
                         noise: float | None = 0.1) -> SMIChannel:
    """Deep tied attention, L = 2, M = 2, P_l = 1 (THEORY 2): h = A(z_1) z_2 with
    A = softmax_rows(beta z_1 z_1^T) + c I, y = softmax_rows(beta h h^T); its two free entries
    seen through Gaussian noise of variance Delta. Row 1 is layer 1, row 2 layer 2."""
    Z = z_matrix(2, 2)
    z1, z2 = Z[0, :].T, Z[1, :].T
    A = softmax_rows(z1 * z1.T) + SKIP * sp.eye(2)
    h = A * z2
    ch = noisy(name="noisy-deep-attention", P=2, M=2, output=free_entries(softmax_rows(h * h.T)),
               noise=DELTA, params={BETA: None, SKIP: None, DELTA: None}, layers=((0,), (1,)),
               description="L = 2 deep tied attention (skip c), free entries + N(0, Delta)",
               domains={"beta": BETA_DOMAIN, "c": SKIP_DOMAIN, "Delta": NOISE_DOMAIN})
    return with_values(ch, {"beta": beta, "c": skip, "Delta": noise})


BUILTIN = {"sign-product": sign_product, "noisy-attention": noisy_attention,
           "noisy-deep-attention": noisy_deep_attention}


__all__ = ["SMIChannel", "SMIChannelError", "z_matrix", "z_symbols", "softmax_rows",
           "free_entries", "noisy", "discrete", "sign_channel", "with_values", "bound",
           "substituted", "flip_symmetric", "sign_product", "noisy_attention",
           "noisy_deep_attention", "BUILTIN", "BETA", "SKIP", "DELTA", "load_smi_channel_file"]


# ----------------------------------------------------------------------------- channel files
def load_smi_channel_file(path: str, *, tokens: int = 2) -> SMIChannel:
    """Execute the file at ``path`` (RUNS THE USER'S OWN CODE; only when named on the command
    line) and call its ``smi_channel(tokens)``, which must return an :class:`SMIChannel`.
    Errors name the file and, where possible, the line."""
    from .channel_file import call_file_function

    TOKENS.check(tokens)
    ch = call_file_function(path, "smi_channel", tokens, error=SMIChannelError,
                            hint=" returning an SMIChannel (aim_sym.smi_channels.noisy or "
                            ".discrete)")
    if not isinstance(ch, SMIChannel):
        raise SMIChannelError(f"{path}: smi_channel(tokens) returned {type(ch).__name__}, not "
                              "an SMIChannel")
    return ch
