"""Figure: the learned spectrum of the ERM (THEORY 3), theory against the authors' gradient-descent
singular values (issue 16, item 2).

Theory: singular values s = sqrt(lam) of S_hat ~ eta ReLU(S0 + delta Z - eps I) at the SE fixed
point (``aim_sym.erm.ERM.spectrum``), density (2 s/eta) mu_delta(eps + s^2/eta) of total mass
rank, plus an atom 1 - rank at 0.  Data: ``spectra/spectrum_alpha_<alpha>_kappa_0.5_lreg_0.01_
noise_0.5.csv`` of the authors' reference folder (column ``eigenvalue`` holds singular values of
d = 200 solutions, 64 runs); the histogram is normalised by the number of all values, so that
its area is the fraction above ``--floor`` (the numerically non-zero ones).

    python benchmarks/erm_spectrum_figure.py --alpha 0.5 --reference DIR --plot docs/figures/erm_spectrum.png
"""

from __future__ import annotations

import argparse
import csv
import os

import numpy as np

from aim_sym.erm import ERM


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--reference", required=True, help="the authors' spectra/ folder")
    ap.add_argument("--floor", type=float, default=0.02)
    ap.add_argument("--plot", required=True)
    a = ap.parse_args()
    with open(os.path.join(a.reference, f"spectrum_alpha_{a.alpha:g}_kappa_0.5_lreg_0.01_"
                                        "noise_0.5.csv")) as fh:
        s_gd = np.array([float(r["eigenvalue"]) for r in csv.DictReader(fh)])
    spec = ERM(kappa0=0.5, delta=0.5, lam=0.01).spectrum(alpha=a.alpha, points=600)
    d = spec.details
    frac = float(np.mean(s_gd > a.floor))
    print(f"alpha = {a.alpha}: theory rank {spec.value:.5f} +- {spec.error:.1e}, "
          f"GD fraction of singular values > {a.floor:g}: {frac:.5f} ({s_gd.size} values)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.5))
    nz = s_gd[s_gd > a.floor]
    ax.hist(nz, bins=60, weights=np.full(nz.size, 1.0 / s_gd.size) / ((nz.max() - nz.min()) / 60),
            alpha=0.45, label=f"GD, d = 200 (fraction > {a.floor:g}: {frac:.3f})")
    ax.plot(d["singular_value"], d["singular_density"],
            label=f"SE theory (rank {spec.value:.3f})", color="k")
    ax.set_xlabel("singular value of $\\hat S$")
    ax.set_ylabel("density")
    ax.set_title(f"ERM, kappa0 = 0.5, Delta = 0.5, lambda = 0.01, alpha = {a.alpha:g}",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
