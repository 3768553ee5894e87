"""aim-sym from Python: what a theorist runs in a notebook (docs/api.md). About 10-20 s.

Run it as ``python docs/example_api.py``; each block prints one line (or a small table).
"""

import numpy as np

import aim_sym as am

# AIM with the hardmax channel, T = 2 tokens, width ratio rho = 0.5 (THEORY 1)
m = am.AIM(am.channels.hardmax(tokens=2), rho=0.5)

# all SE fixed points at alpha = 0.2, the Bayes-optimal one flagged
fps = m.fixed_points(alpha=0.2)
print(fps.to_frame()[["value", "error", "q", "q_hat", "phi", "stable", "bayes_optimal"]])
best = next(r for r in fps if r.details["bayes_optimal"])
print(f"mmse(alpha=0.2) = {best.value:.12f} +- {best.error:.1e}")

# the small-width weak-recovery threshold, exact, to 30 digits
t = m.threshold("weak", small_width=True, digits=30)
print(f"alpha_bar_c = {t.value}  ({t.details['sympy']})")

# a 5-point SE curve as a pandas DataFrame
curve = m.curve(alphas=np.linspace(0.05, 0.5, 5)).to_frame()
print(curve[["alpha", "mmse", "error"]].to_string(index=False))

# SMI deep attention, L = 2 layers: the weak-recovery thresholds of each layer
s = am.SMI(am.channels.deep_attention(layers=2, tokens=2, skip=1.0))
for r in s.thresholds(sequential=False):
    print(f"layer {r.details['layer']} weak threshold = {r.value:.10f} +- {r.error:.1e}")

# the Wishart prior alone: mmse(Delta) to 30 digits
p = am.mmse(rho=0.2, delta=0.01, digits=30)
print(f"mmse(Delta=0.01; rho=0.2) = {p.value}")
