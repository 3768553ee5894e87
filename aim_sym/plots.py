"""Figures (matplotlib, Agg backend, imported inside the functions): curves against alpha, the
SMI phase diagram against the skip strength (THEORY.md, deep attention), AMP against SE.

Every figure is written by :func:`save_figure`: the format follows the suffix of the path
(.png, .pdf or .svg) and the file appears atomically (a temporary file, then ``os.replace``).
"""

from __future__ import annotations

import math
import os
import tempfile

from .numerics.records import new_file_mode
from .tables import OutputError

FORMATS = (".png", ".pdf", ".svg")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot_path(path: str, option: str = "--plot") -> str:
    """The format of ``path`` from its suffix; :class:`OutputError` naming ``option`` and the
    allowed suffixes otherwise."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in FORMATS:
        raise OutputError(f"{option} must be a file name ending in {', '.join(FORMATS)}; "
                          f"got {path!r}")
    return suffix[1:]


def save_figure(fig, path: str, *, option: str = "--plot", dpi: int = 130) -> None:
    """Write ``fig`` to ``path`` in the format its suffix names, atomically, and close it."""
    plt = _pyplot()
    try:
        fmt = check_plot_path(path, option)
        folder = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix="." + fmt)
            os.close(fd)
        except OSError as e:
            raise OutputError(f"cannot write the figure {path!r}: {e.strerror or e}") from None
        try:
            fig.savefig(tmp, format=fmt, dpi=dpi)
            os.chmod(tmp, new_file_mode())
            os.replace(tmp, path)
        except BaseException as e:
            if os.path.exists(tmp):
                os.remove(tmp)
            if isinstance(e, OSError):
                raise OutputError(f"cannot write the figure {path!r}: {e.strerror or e}") from None
            raise
    finally:
        plt.close(fig)


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def plot_curve(rows: list[dict], ycols: list[str], *, title: str, path: str) -> None:
    """Columns ``ycols`` of ``rows`` against ``alpha``, with error bars where a column
    ``<col>_error`` exists (or, for a single column, ``error``)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = [_num(r["alpha"]) for r in rows]
    for c in ycols:
        y = [_num(r.get(c)) for r in rows]
        ekey = f"{c}_error" if any(f"{c}_error" in r for r in rows) else (
            "error" if len(ycols) == 1 and any("error" in r for r in rows) else None)
        if ekey is None:
            ax.plot(x, y, label=c)
        else:
            e = [_num(r.get(ekey)) for r in rows]
            e = [v if math.isfinite(v) else 0.0 for v in e]
            ax.errorbar(x, y, yerr=e, capsize=2, label=c)
    ax.set_xlabel(r"$\alpha$")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


PHASE_CURVES = (("weak_layer3", "layer 3 (weak, Q = 0)", "v-"),
                ("weak_layer2", "layer 2 (weak, Q = 0)", "o-"),
                ("sequential_layer1", "layer 1 (given layer 2)", "s-"),
                ("weak_layer1", "layer 1 (weak, Q = 0)", "^--"))


def plot_phase(rows: list[dict], path: str) -> None:
    """SMI phase diagram: the weak thresholds of each layer and the sequential threshold of
    layer 1 against the skip strength c (log alpha axis), with error bars."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: _num(r["skip"]))
    c = [_num(r["skip"]) for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    depth = 3 if any(math.isfinite(_num(r.get("weak_layer3"))) for r in rows) else 2
    for key, label, style in PHASE_CURVES:
        pts = [(ci, _num(r.get(key)), _num(r.get(key + "_error"))) for ci, r in zip(c, rows)]
        pts = [(ci, y, e if math.isfinite(e) else 0.0) for ci, y, e in pts if math.isfinite(y)]
        if pts:
            xs, ys, es = zip(*pts)
            ax.errorbar(xs, ys, yerr=es, fmt=style, ms=4, capsize=2, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("skip strength c")
    ax.set_ylabel(r"sample ratio $\alpha$")
    ax.set_title(f"deep tied attention, L = {depth}, M = 2: thresholds")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def plot_amp_vs_se(results: list[dict], curve_rows, path: str, *, title: str | None = None,
                   reference: list[dict] | None = None) -> None:
    """AMP points with error bars over the SE curve.

    ``results``: AMP results (dicts with alpha, mean, stderr; ``dim`` labels the series);
    ``curve_rows``: rows with alpha and mmse, or a pair (alphas, mmse); ``reference``: optional
    rows (alpha, mmse, mmse_std) drawn as other points (e.g. published AMP measurements)."""
    plt = _pyplot()
    if isinstance(curve_rows, tuple):
        ca, cm = curve_rows
    else:
        ca = [r["alpha"] for r in curve_rows]
        cm = [r["mmse"] for r in curve_rows]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(ca, cm, "-", color="k", lw=1.2, label="SE (Bayes-optimal)")

    def on_scale(p: dict) -> bool:
        m = _num(p["mean"])
        return math.isfinite(m) and m < 1.1

    dims = sorted({p.get("dim") for p in results}, key=lambda d: (d is None, d))
    for d, mk in zip(dims, "osD^v<>" * 4, strict=False):
        sel = [p for p in results if p.get("dim") == d and on_scale(p)]
        ax.errorbar([p["alpha"] for p in sel], [p["mean"] for p in sel],
                    yerr=[_num(p["stderr"]) if math.isfinite(_num(p["stderr"])) else 0.0
                          for p in sel],
                    fmt=mk, ms=4, capsize=2, label=f"GAMP-RIE, D = {d}")
    if reference is not None:
        ax.errorbar([r["alpha"] for r in reference], [r["mmse"] for r in reference],
                    yerr=[r.get("mmse_std", 0) for r in reference], fmt="x", ms=4, capsize=2,
                    color="gray", label="reference AMP")
    off = [p for p in results if not on_scale(p)]
    if off:  # a mean dominated by diverged seeds: marked at the top, not scaled to
        ax.plot([p["alpha"] for p in off], [1.05] * len(off), "v", color="r",
                label="diverged seeds (off scale)")
    ax.set_ylim(-0.02, 1.1)
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel(r"$\|\hat S - S\|_F^2 / D$")
    if title:
        ax.set_title(title)
    ax.legend(frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=150)


__all__ = ["FORMATS", "check_plot_path", "plot_amp_vs_se", "plot_curve", "plot_phase",
           "save_figure"]


def plot_spectrum(spec: dict, path: str, *, singular: bool = True) -> None:
    """The ERM's learned spectrum (THEORY 3): the density of singular values (or eigenvalues
    with ``singular=False``) of ``spec`` (:meth:`aim_sym.erm.ERM.spectrum` flattened); the
    atom at 0 is written in the legend."""
    plt = _pyplot()
    x = spec["singular_value"] if singular else spec["eigenvalue"]
    y = spec["singular_density"] if singular else spec["eigenvalue_density"]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(x, y, label=f"theory (rank {spec['rank']:.4f}, atom {spec['atom']:.4f} at 0)")
    ax.set_xlabel("singular value of S_hat" if singular else "eigenvalue of S_hat")
    ax.set_ylabel("density")
    ax.set_title(f"ERM kappa0={spec['kappa0']} Delta={spec['delta']} lambda={spec['lam']} "
                 f"alpha={spec['alpha']}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)

