"""Deep-AIM GAMP-RIE at skip c < 1 (line inner rule) against the SE (docs/deep_aim.md section 6,
"c = 0.5 with the line inner rule"; THEORY 1.6, check 7 of THEORY 4).

Prints each seed's final errors as it finishes and then one JSON line: per layer the last
iterate's mean, the tail mean and the control-variate estimate (each +- one standard error over
seeds), the failed seeds, the last iterate's V and A (mean over seeds). Run from the repository
root, e.g.

    python benchmarks/deep_aim_amp_small_skip.py --alpha 0.1 --dim 50 --seeds 0:8
"""

from __future__ import annotations

import argparse
import json
import time

from aim_sym.numerics.deep_aim_amp import run_deep_amp


def main() -> None:
    """Command line: --alpha, --dim, --seeds a:b, --skip (0.5), --max-iter (30)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha", type=float, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--seeds", default="0:8", help="a:b, seeds a .. b-1")
    ap.add_argument("--skip", type=float, default=0.5)
    ap.add_argument("--max-iter", type=int, default=30)
    a = ap.parse_args()
    s0, s1 = (int(v) for v in a.seeds.split(":"))
    t0 = time.time()
    r = run_deep_amp(alpha=a.alpha, rho1=0.5, rho2=0.5, skip=a.skip, dim=a.dim,
                     seeds=range(s0, s1), max_iter=a.max_iter, tail=min(10, a.max_iter),
                     progress=lambda k, n, txt: print(txt, f"{time.time() - t0:.0f} s", flush=True))
    keys = [f"{k}{i}" for i in (1, 2) for k in ("mean_ok", "stderr_ok", "tail_mean_ok",
                                                "tail_stderr_ok", "cv_mean", "cv_stderr",
                                                "initial_per_seed", "tail_per_seed")]
    out = {k: r[k] for k in keys + ["failed_seeds", "dampings", "time_s"]}
    out.update({f"{k}{i}": r[f"{k}{i}"][-1] for k in ("V", "A") for i in (1, 2)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
