"""Hardmax at q = 0: outcome probabilities and first moments as ordered-cone integrals
(THEORY 1.4, small width).

At q = 0, V = 1 the pre-activations are h_ab ~ N(0, 1 + delta_ab). Write u_v (v = (a, b), a < b)
for the m = T(T - 1)/2 off-diagonal entries and d_a for the diagonal ones. The output y has
y_a = argmax_b h_ab row-wise. Conditional on u, the rows are independent and each diagonal enters
only its own row: row a's winner is decided by its largest off-diagonal M_a = max_c u_ac,

  P(y_a = a | u) = Phi(-M_a / sqrt 2),   P(y_a = c | u) = Phi(M_a / sqrt 2) 1[u_ac = M_a].

Inside one ordering of u every M_a is a single coordinate, so every integrand is a product of
one-variable factors over the cone u_(1) > u_(2) > ... > u_(m). Sweeping a threshold t down from
+infinity, the revealed set R of coordinates above t fixes which rows are settled (those touched
by R); with F_R(t) = the integral over {u_R > t} of the factors of R,

  F_S(t) = int_t^inf ds phi(s) sum_{v in S} f_{v | S \\ v}(s) F_{S \\ v}(s),   F_{} = 1,

where f_{v | R} is the product of the factors of the rows that v settles (rows of v not touched
by R). The answer is F_{all}(-infinity). The cumulative integrals are taken on a Chebyshev-Lobatto
grid of [-L, L]; the mass outside is below m Phi(-L) times the integrand's bound and is added to
the error. The first moments E[h_ab 1_y] ride along as extra channels: u_v multiplies v's factor by
s; d_a replaces row a's factor by E[d_a 1_row | M_a = s] = +- sqrt 2 phi(s / sqrt 2).

S = sum_y sum_{a<=b} E[h_ab 1_y]^2 / (P(y) (1 + delta_ab)) and alpha_bar_c = 1 / (2 S).
Token permutations act on outcomes; one representative per orbit is integrated.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import lru_cache

import numpy as np
from scipy.special import erfc

from .records import Estimate, require

SQRT2 = math.sqrt(2.0)
#: token counts the deterministic rule supports (2^m subsets, m = T(T-1)/2: 1024 at T = 5)
TOKENS_RANGE = (2, 5)
DEFAULT_L = 9.0


def settle_rows(f: np.ndarray, pair: tuple[int, int], rows_settled: int,
                row_fac: dict) -> np.ndarray | None:
    """The ordered-cone recursion's step factor for off-diagonal entry ``pair`` = (a, b): the
    entry's own factor ``f`` times the factor of each of its two rows that this step settles
    (bit r of ``rows_settled``; ``row_fac[(r, other)]``, None when the outcome forbids the row's
    winner here, which makes the whole step None). Shared by the q = 0 recursion and the
    per-omega one of :mod:`aim_sym.numerics.hardmax_se`."""
    a, b = pair
    for r, other in ((a, b), (b, a)):
        if not rows_settled >> r & 1:
            continue
        rf = row_fac[(r, other)]
        if rf is None:
            return None
        f = f * rf
    return f


def off_diagonal_pairs(T: int) -> tuple[tuple[int, int], ...]:
    """Off-diagonal index pairs (a, b), 0 <= a < b < T, in row-major order."""
    return tuple((a, b) for a in range(T) for b in range(a + 1, T))


def pairs(T: int) -> tuple[tuple[int, int], ...]:
    """All pairs (a, b), 0 <= a <= b < T, row-major (the flat order of aim_sym.symbols)."""
    return tuple((a, b) for a in range(T) for b in range(a, T))


@lru_cache(maxsize=16)
def chebyshev_tail_rule(n: int, L: float) -> tuple[np.ndarray, np.ndarray]:
    """Chebyshev-Lobatto nodes t_j of [-L, L] (n of them) and the matrix C with
    (C g)_j = int_{t_j}^{L} p(s) ds, p the degree n - 1 interpolant of g."""
    k = np.arange(n)
    theta = np.pi * k / (n - 1)
    x = np.cos(theta)  # from +1 down to -1
    # values -> Chebyshev coefficients (DCT-I as an explicit matrix)
    Tm = np.cos(np.outer(theta, k))  # Tm[j, k] = T_k(x_j)
    w = np.ones(n)
    w[0] = w[-1] = 0.5
    coef = (2.0 / (n - 1)) * (Tm.T * w[None, :])
    coef[0] *= 0.5
    coef[-1] *= 0.5
    # antiderivative in x of T_k: T_{k+1}/(2(k+1)) - T_{k-1}/(2(k-1)); evaluate U_k(x) = int_x^1 T_k
    U = np.zeros((n, n))
    Tx = np.cos(np.outer(theta, np.arange(n + 1)))  # T_0..T_n at the nodes
    for kk in range(n):
        if kk == 0:
            anti = Tx[:, 1]
            anti1 = 1.0
        elif kk == 1:
            anti = Tx[:, 2] / 4.0
            anti1 = 0.25
        else:
            anti = Tx[:, kk + 1] / (2 * (kk + 1)) - Tx[:, kk - 1] / (2 * (kk - 1))
            anti1 = 1.0 / (2 * (kk + 1)) - 1.0 / (2 * (kk - 1))
        U[:, kk] = anti1 - anti
    C = L * (U @ coef)  # ds = L dx
    return L * x, C


def outcome_orbits(T: int) -> list[tuple[tuple[int, ...], int]]:
    """One representative y (y_a = winner of row a) per orbit of the token permutations, with
    the orbit's size; outcomes of probability zero (a cycle of off-diagonal winners) are kept
    and integrate to zero."""
    perms = list(itertools.permutations(range(T)))
    seen: dict[tuple[int, ...], int] = {}
    for y in itertools.product(range(T), repeat=T):
        images = []
        for p in perms:
            z = [0] * T
            for a in range(T):
                z[p[a]] = p[y[a]]
            images.append(tuple(z))
        rep = min(images)
        seen[rep] = seen.get(rep, 0) + 1
    return sorted(seen.items())


def _phi(s: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * s * s) / math.sqrt(2 * math.pi)


def outcome_moments(y: tuple[int, ...], *, nodes: int, L: float = DEFAULT_L) -> np.ndarray:
    """[P(y), E[h_ab 1_y] for (a, b) in :func:`pairs`] at q = 0, V = 1 by the subset recursion
    of the module docstring on an ``nodes``-point Chebyshev rule of [-L, L]."""
    T = len(y)
    off = off_diagonal_pairs(T)
    m = len(off)
    flat = pairs(T)
    K = 1 + len(flat)
    chan_off = {v: 1 + flat.index(off[v]) for v in range(m)}
    chan_diag = {a: 1 + flat.index((a, a)) for a in range(T)}
    s, C = chebyshev_tail_rule(nodes, L)
    phi = _phi(s)
    win_self = 0.5 * erfc(s / 2.0)  # Phi(-s / sqrt 2): the diagonal beats M_a = s
    win_off = 0.5 * erfc(-s / 2.0)  # Phi(s / sqrt 2): the off-diagonal M_a = s beats the diagonal
    dens = SQRT2 * _phi(s / SQRT2)

    def row_factor(a: int, c: int) -> np.ndarray | None:
        """(K, n) factor of row a settled by u_ac at s, or None when it vanishes."""
        if y[a] == a:
            base, diag = win_self, dens
        elif y[a] == c:
            base, diag = win_off, -dens
        else:
            return None
        f = np.repeat(base[None, :], K, axis=0)
        f[chan_diag[a]] = diag
        return f

    row_fac = {(a, c): row_factor(a, c) for a in range(T) for c in range(T) if a != c}
    vfac = []
    for v in range(m):
        f = np.ones((K, nodes))
        f[chan_off[v]] = s
        vfac.append(f)
    touched = np.zeros(1 << m, dtype=np.int64)
    for mask in range(1 << m):
        r = 0
        for v in range(m):
            if mask >> v & 1:
                a, b = off[v]
                r |= (1 << a) | (1 << b)
        touched[mask] = r
    # cache of step factors per (v, settled-rows pattern)
    step: dict[tuple[int, int], np.ndarray | None] = {}

    def step_factor(v: int, rows_settled: int) -> np.ndarray | None:
        key = (v, rows_settled)
        if key not in step:
            step[key] = settle_rows(vfac[v] * phi[None, :], off[v], rows_settled, row_fac)
        return step[key]

    F: dict[int, np.ndarray] = {0: np.ones((K, nodes))}
    by_size: list[list[int]] = [[] for _ in range(m + 1)]
    for mask in range(1, 1 << m):
        by_size[bin(mask).count("1")].append(mask)
    for k in range(1, m + 1):
        masks, integrands = [], []
        for S in by_size[k]:
            g = None
            for v in range(m):
                if not S >> v & 1:
                    continue
                R = S ^ (1 << v)
                FR = F.get(R)
                if FR is None:
                    continue
                a, b = off[v]
                settled = ((1 << a) | (1 << b)) & ~int(touched[R])
                f = step_factor(v, settled)
                if f is None:
                    continue
                g = f * FR if g is None else g + f * FR
            if g is not None:
                masks.append(S)
                integrands.append(g)
        if not masks:
            return np.zeros(K)
        G = np.stack(integrands)  # (M, K, n)
        out = G @ C.T  # cumulative integrals from each node to L
        F = {S: out[i] for i, S in enumerate(masks)}
    full = (1 << m) - 1
    if full not in F:
        return np.zeros(K)
    return F[full][:, -1].copy()  # t = -L (the last Lobatto node)


def _S_from_moments(orbits, moments, T: int) -> float:
    weight = np.array([2.0 if a == b else 1.0 for a, b in pairs(T)])
    total = 0.0
    for (_, size), mom in zip(orbits, moments):
        P = mom[0]
        if P <= 0.0:
            continue
        total += size * float(np.sum(mom[1:] ** 2 / weight) / P)
    return total


def small_width_sum(T: int, *, nodes: int, L: float = DEFAULT_L) -> dict:
    """S(T) on one rule, with the probability sum (must be 1) and the largest |E[h_ab]|
    (must be 0) as checks."""
    orbits = outcome_orbits(T)
    moms = [outcome_moments(y, nodes=nodes, L=L) for y, _ in orbits]
    total_p = sum(size * mom[0] for (_, size), mom in zip(orbits, moms))
    return {"S": _S_from_moments(orbits, moms, T), "probability_sum": float(total_p),
            "orbits": len(orbits), "moments": moms}


def truncation_bound(T: int, L: float) -> float:
    """Bound on the dropped mass: each of the m off-diagonals outside [-L, L] has probability
    2 Phi(-L); the moment integrands are bounded by (1 + L) times the density."""
    m = T * (T - 1) // 2
    return float(m * erfc(L / SQRT2) * (1.0 + L))


def weak_threshold(T: int, *, nodes: int = 128, L: float = DEFAULT_L) -> Estimate:
    """alpha_bar_c(T) = 1 / (2 S) for hardmax at small width (THEORY 1.4), by the ordered-cone
    recursion on two Chebyshev rules: ``nodes`` points on [-L, L] and 2 ``nodes`` points on
    [-L - 1, L + 1]. error = their difference + both rules' deviation of sum_y P(y) from 1
    (a gauge of the rounding) + the truncation bound, all in alpha_bar_c."""
    require(isinstance(T, int) and not isinstance(T, bool)
            and TOKENS_RANGE[0] <= T <= TOKENS_RANGE[1], "tokens",
            f"an integer in {TOKENS_RANGE[0]}..{TOKENS_RANGE[1]}", T)
    require(isinstance(nodes, int) and 16 <= nodes <= 1024, "nodes", "an integer in 16..1024",
            nodes)
    t0 = time.perf_counter()
    coarse = small_width_sum(T, nodes=nodes, L=L)
    fine = small_width_sum(T, nodes=2 * nodes, L=L + 1.0)
    a_c, a_f = 1.0 / (2 * coarse["S"]), 1.0 / (2 * fine["S"])
    rounding = abs(coarse["probability_sum"] - 1.0) + abs(fine["probability_sum"] - 1.0)
    # S changes by at most (its integrand bound) x (dropped mass); d alpha = 2 alpha^2 dS
    n = T * (T + 1) // 2
    err = abs(a_f - a_c) + a_f * rounding + 2 * a_f ** 2 * n * truncation_bound(T, L)
    err = max(err, 2.2e-16 * a_f)
    return Estimate(
        value=a_f, error=err,
        method=(f"ordered-cone recursion over the {T * (T - 1) // 2} off-diagonals "
                f"({1 << (T * (T - 1) // 2)} subsets, {fine['orbits']} outcome orbits), "
                f"Chebyshev rules of {nodes} nodes on [-{L:g}, {L:g}] and {2 * nodes} on "
                f"[-{L + 1:g}, {L + 1:g}]; error = difference + rounding gauge + truncation bound"),
        extra={"S": fine["S"], "S_coarse": coarse["S"], "probability_sum": fine["probability_sum"],
               "orbits": fine["orbits"], "seconds": time.perf_counter() - t0, "nodes": nodes})


def monte_carlo_sum(T: int, *, samples: int, seed: int = 0, batches: int = 32,
                    chunk: int = 1 << 18) -> Estimate:
    """S(T) by seeded Monte Carlo: h ~ N(0, 1 + delta_ab), y = row-wise argmax; per batch the
    sums of 1_y and h_ab 1_y; S from all batches with the jackknife bias correction and its
    standard error over the ``batches`` leave-one-out estimates."""
    require(isinstance(T, int) and T >= 2, "tokens", "an integer >= 2", T)
    require(samples >= batches * 100, "samples", f">= {batches * 100}", samples)
    rng = np.random.default_rng(seed)
    n_out = T ** T
    flat = pairs(T)
    n = len(flat)
    weight = np.array([2.0 if a == b else 1.0 for a, b in flat])
    counts = np.zeros((batches, n_out))
    sums = np.zeros((batches, n_out, n))
    per_batch = samples // batches
    iu = np.array([a for a, _ in flat]), np.array([b for _, b in flat])
    code_w = T ** np.arange(T)[::-1]
    for bt in range(batches):
        left = per_batch
        while left > 0:
            c = min(chunk, left)
            left -= c
            x = rng.standard_normal((c, n)) * np.sqrt(weight)[None, :]
            H = np.empty((c, T, T))
            H[:, iu[0], iu[1]] = x
            H[:, iu[1], iu[0]] = x
            y = np.argmax(H, axis=2) @ code_w
            counts[bt] += np.bincount(y, minlength=n_out)
            for j in range(n):
                sums[bt, :, j] += np.bincount(y, weights=x[:, j], minlength=n_out)

    def S_of(cnt, sm, total):
        P = cnt / total
        N = sm / total
        ok = P > 0
        return float(np.sum((N[ok] ** 2 / weight[None, :]).sum(axis=1) / P[ok]))

    total = per_batch * batches
    full = S_of(counts.sum(0), sums.sum(0), total)
    loo = np.array([S_of(counts.sum(0) - counts[b], sums.sum(0) - sums[b], total - per_batch)
                    for b in range(batches)])
    jack = batches * full - (batches - 1) * loo.mean()
    se = math.sqrt((batches - 1) / batches * np.sum((loo - loo.mean()) ** 2))
    return Estimate(value=jack, error=se,
                    method=f"seeded Monte Carlo ({total} samples, seed {seed}), jackknife over "
                    f"{batches} batches; error = standard error",
                    extra={"S_plain": full, "samples": total, "seed": seed})


# ----------------------------------------------------------------------------- many digits
def _chebyshev_tail_rule_mp(n: int, L):
    """:func:`chebyshev_tail_rule` in mpmath at the working precision (nodes, C as lists)."""
    import mpmath

    theta = [mpmath.pi * k / (n - 1) for k in range(n)]
    x = [mpmath.cos(t) for t in theta]
    Tx = [[mpmath.cos(j * t) for j in range(n + 1)] for t in theta]  # T_j at node k
    w = [mpmath.mpf(1)] * n
    w[0] = w[-1] = mpmath.mpf(1) / 2
    coef = [[2 * w[j] * Tx[j][k] / (n - 1) for j in range(n)] for k in range(n)]
    coef[0] = [c / 2 for c in coef[0]]
    coef[-1] = [c / 2 for c in coef[-1]]
    U = [[mpmath.mpf(0)] * n for _ in range(n)]
    for kk in range(n):
        for i in range(n):
            if kk == 0:
                anti, anti1 = Tx[i][1], mpmath.mpf(1)
            elif kk == 1:
                anti, anti1 = Tx[i][2] / 4, mpmath.mpf(1) / 4
            else:
                anti = Tx[i][kk + 1] / (2 * (kk + 1)) - Tx[i][kk - 1] / (2 * (kk - 1))
                anti1 = mpmath.mpf(1) / (2 * (kk + 1)) - mpmath.mpf(1) / (2 * (kk - 1))
            U[i][kk] = anti1 - anti
    coefT = [list(col) for col in zip(*coef)]  # coefT[j][k] = coef[k][j]
    C = [[L * mpmath.fdot(U[i], coefT[j]) for j in range(n)] for i in range(n)]
    return [L * xi for xi in x], C


def outcome_moments_mp(y: tuple[int, ...], *, nodes: int, L, rule=None) -> list:
    """:func:`outcome_moments` in mpmath at the working precision (same recursion; lists)."""
    import mpmath

    T = len(y)
    off = off_diagonal_pairs(T)
    m = len(off)
    flat = pairs(T)
    K = 1 + len(flat)
    s, C = rule if rule is not None else _chebyshev_tail_rule_mp(nodes, L)
    r2 = mpmath.sqrt(2)
    phi = [mpmath.npdf(t) for t in s]
    win_self = [mpmath.ncdf(-t / r2) for t in s]
    win_off = [mpmath.ncdf(t / r2) for t in s]
    dens = [r2 * mpmath.npdf(t / r2) for t in s]

    def row_factor(a, c):
        if y[a] == a:
            base, diag = win_self, dens
        elif y[a] == c:
            base, diag = win_off, [-d for d in dens]
        else:
            return None
        f = [list(base) for _ in range(K)]
        f[1 + flat.index((a, a))] = list(diag)
        return f

    def touched(mask):
        r = 0
        for v in range(m):
            if mask >> v & 1:
                a, b = off[v]
                r |= (1 << a) | (1 << b)
        return r

    F = {0: [[mpmath.mpf(1)] * nodes for _ in range(K)]}
    for k in range(1, m + 1):
        new = {}
        for S in range(1, 1 << m):
            if bin(S).count("1") != k:
                continue
            g = None
            for v in range(m):
                if not S >> v & 1 or (S ^ (1 << v)) not in F:
                    continue
                R = S ^ (1 << v)
                a, b = off[v]
                settled = ((1 << a) | (1 << b)) & ~touched(R)
                f = [[phi[i] for i in range(nodes)] for _ in range(K)]
                ch = 1 + flat.index(off[v])
                f[ch] = [f[ch][i] * s[i] for i in range(nodes)]
                dead = False
                for r, other in ((a, b), (b, a)):
                    if settled >> r & 1:
                        rf = row_factor(r, other)
                        if rf is None:
                            dead = True
                            break
                        f = [[f[c][i] * rf[c][i] for i in range(nodes)] for c in range(K)]
                if dead:
                    continue
                term = [[f[c][i] * F[R][c][i] for i in range(nodes)] for c in range(K)]
                g = term if g is None else [[g[c][i] + term[c][i] for i in range(nodes)]
                                            for c in range(K)]
            if g is not None:
                new[S] = [[mpmath.fdot(C[i], g[c]) for i in range(nodes)] for c in range(K)]
        if not new:
            return [mpmath.mpf(0)] * K
        F = new
    full = (1 << m) - 1
    return [F[full][c][-1] for c in range(K)] if full in F else [mpmath.mpf(0)] * K


def weak_threshold_mp(T: int = 3, *, dps: int = 30, nodes: int = 256) -> Estimate:
    """alpha_bar_c(T) to ``dps`` digits: the recursion of :func:`outcome_moments_mp` on two rules,
    (``nodes``, L) and (``nodes`` + 64, L + 1) with L = sqrt(2 ln 10^(dps + 4)), at dps + 10 working
    digits; error = their difference + the truncation bound. Minutes at T = 3, dps = 30."""
    import mpmath

    require(isinstance(T, int) and 2 <= T <= 3, "tokens", "2 or 3 for the many-digit route", T)
    require(isinstance(dps, int) and 15 <= dps <= 60, "dps", "an integer in 15..60", dps)
    t0 = time.perf_counter()
    with mpmath.workdps(dps + 10):
        L0 = mpmath.sqrt(2 * (dps + 4) * mpmath.log(10))
        vals = []
        for n, L in ((nodes, L0), (nodes + 64, L0 + 1)):
            rule = _chebyshev_tail_rule_mp(n, L)
            S, psum = mpmath.mpf(0), mpmath.mpf(0)
            for y, size in outcome_orbits(T):
                mom = outcome_moments_mp(y, nodes=n, L=L, rule=rule)
                if mom[0] == 0:
                    continue
                psum += size * mom[0]
                S += size * mpmath.fsum((mom[1 + i] ** 2 / (2 if a == b else 1))
                                        for i, (a, b) in enumerate(pairs(T))) / mom[0]
            vals.append((1 / (2 * S), psum))
        (a0, p0), (a1, p1) = vals
        trunc = T * (T - 1) // 2 * mpmath.erfc(L0 / mpmath.sqrt(2)) * (1 + L0)
        err = abs(a1 - a0) + a1 * (abs(p0 - 1) + abs(p1 - 1)) + 2 * a1**2 * T * (T + 1) * trunc
        return Estimate(mpmath.nstr(a1, dps), float(err),
                        f"ordered-cone recursion in mpmath at {dps + 10} digits, Chebyshev rules "
                        f"of {nodes} and {nodes + 64} nodes; error = difference + rounding gauge "
                        "+ truncation bound", precision=dps,
                        extra={"seconds": time.perf_counter() - t0})
