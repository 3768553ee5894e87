"""Bad input across every command: one line naming the option and its allowed range, exit 2.

Each case runs the real entry point (``aim_sym.cli.main``) in-process with a time limit, so a
value that is not refused and starts a long computation fails the test instead of hanging it.
Accepted outcomes: exit 2 with exactly one line on stderr, ``aim-sym: error: ...``, naming the
option; never a traceback, a NaN on stdout, or a silently ignored option.
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from aim_sym.cli import main

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples", "channels")
HARDMAX_FILE = os.path.join(EXAMPLES, "noisy_hardmax.py")
GAUSS_FILE = os.path.join(EXAMPLES, "noisy_projection.py")
SMI_FILE = os.path.join(EXAMPLES, "smi", "sign_product.py")
RELU_FILE = os.path.join(EXAMPLES, "polyhedral", "noisy_relu.py")
NOISY_SIGN_FILE = os.path.join(EXAMPLES, "polyhedral", "noisy_sign.py")

SE = ["se", "--model", "aim"]
SMI_SE = ["se", "--model", "smi"]
AIM_A = ["--alpha", "0.1"]
ERM_SE = ["se", "--model", "erm"]
ERM_K = ["--kappa0", "0.5"]
ERM_CURVE = ["curve", "--model", "erm", "--kappa0", "0.5", "--delta", "0.5", "--lam", "0"]

# (case id, arguments, option the message must name)
CASES = [
    # se, AIM
    ("alpha-negative", SE + ["--alpha", "-1"], "--alpha"),
    ("alpha-nan", SE + ["--alpha", "nan"], "--alpha"),
    ("alpha-inf", SE + ["--alpha", "inf"], "--alpha"),
    ("alpha-text", SE + ["--alpha", "abc"], "--alpha"),
    ("rho-zero", SE + AIM_A + ["--rho", "0"], "--rho"),
    ("rho-negative", SE + AIM_A + ["--rho", "-1"], "--rho"),
    ("rho-inf", SE + AIM_A + ["--rho", "inf"], "--rho"),
    ("rho-nan", SE + AIM_A + ["--rho", "nan"], "--rho"),
    ("beta-inf", SE + AIM_A + ["--channel", "softmax", "--beta", "inf"], "--beta"),
    ("beta-nan", SE + AIM_A + ["--channel", "softmax", "--beta", "nan"], "--beta"),
    ("beta-zero", SE + AIM_A + ["--channel", "softmax", "--beta", "0"], "--beta"),
    ("beta-with-hardmax", SE + AIM_A + ["--channel", "hardmax", "--beta", "2"], "--beta"),
    ("beta-with-linear", SE + AIM_A + ["--channel", "linear", "--beta", "2"], "--beta"),
    ("tokens-one", SE + AIM_A + ["--channel", "softmax", "--tokens", "1"], "--tokens"),
    ("tokens-hundred", SE + AIM_A + ["--channel", "softmax", "--tokens", "100"], "--tokens"),
    ("tokens-negative", SE + AIM_A + ["--channel", "linear", "--tokens", "-3"], "--tokens"),
    ("channel-bogus", SE + AIM_A + ["--channel", "bogus"], "--channel"),
    ("model-bogus", ["se", "--model", "bogus"] + AIM_A, "--model"),
    ("delta-out-missing", SE + AIM_A + ["--channel", "linear-noisy"], "--delta-out"),
    ("delta-out-negative", SE + AIM_A + ["--channel", "linear-noisy", "--delta-out", "-1"],
     "--delta-out"),
    ("delta-out-huge", SE + AIM_A + ["--channel", "linear-noisy", "--delta-out", "1e300"],
     "--delta-out"),
    ("delta-out-nan", SE + AIM_A + ["--channel", "linear-noisy", "--delta-out", "nan"],
     "--delta-out"),
    ("delta-out-with-softmax", SE + AIM_A + ["--channel", "softmax", "--delta-out", "0.1"],
     "--delta-out"),
    ("epsilon-half", SE + AIM_A + ["--channel", "noisy-hardmax", "--epsilon", "0.5"],
     "--epsilon"),
    ("epsilon-nan", SE + AIM_A + ["--channel", "noisy-hardmax", "--epsilon", "nan"],
     "--epsilon"),
    ("epsilon-with-hardmax", SE + AIM_A + ["--channel", "hardmax", "--epsilon", "0.1"],
     "--epsilon"),
    ("layers-3-with-aim", SE + AIM_A + ["--layers", "3"], "--layers"),
    ("skip-with-aim", SE + AIM_A + ["--skip", "1"], "--skip"),
    ("digits-too-few", SE + AIM_A + ["--channel", "softmax", "--digits", "3"], "--digits"),
    ("digits-too-many", SE + AIM_A + ["--channel", "softmax", "--digits", "5000"], "--digits"),
    ("digits-discrete", SE + AIM_A + ["--channel", "hardmax", "--digits", "20"], "--digits"),
    ("small-width-with-rho", SE + ["--alpha", "0.5", "--small-width", "--rho", "0.5"], "--rho"),
    # channel files
    ("channel-file-missing", SE + AIM_A + ["--channel-file", "no_such_file.py"],
     "--channel-file"),
    ("param-nan", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--param", "eps=nan"], "--param"),
    ("param-inf", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--param", "eps=inf"], "--param"),
    ("param-unknown", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--param", "bogus=1"],
     "--param"),
    ("param-text", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--param", "eps=abc"], "--param"),
    ("param-negative-probability", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--param",
                                                 "eps=-0.2"], "--param"),
    ("param-negative-noise", SE + AIM_A + ["--channel-file", GAUSS_FILE, "--param",
                                           "Delta=-1"], "--param"),
    ("channel-and-file", SE + AIM_A + ["--channel-file", HARDMAX_FILE, "--channel", "hardmax"],
     "--channel"),
    ("param-without-file", SE + AIM_A + ["--param", "eps=0.1"], "--param"),
    # se, SMI
    ("smi-rho", SMI_SE + ["--alpha", "0.5", "--rho", "0.5"], "--rho"),
    ("smi-layers", SMI_SE + ["--alpha", "0.5", "--layers", "7"], "--layers"),
    ("smi-skip-negative", SMI_SE + ["--alpha", "0.5", "--skip", "-1"], "--skip"),
    ("smi-skip-inf", SMI_SE + ["--alpha", "0.5", "--skip", "inf"], "--skip"),
    ("smi-skip-nan", SMI_SE + ["--alpha", "0.5", "--skip", "nan"], "--skip"),
    ("smi-tokens", SMI_SE + ["--alpha", "0.5", "--tokens", "4"], "--tokens"),
    ("smi-branch-alpha", SMI_SE + ["--layers", "4", "--alpha", "-1"], "--alpha"),
    ("smi-branch-skip", SMI_SE + ["--layers", "4", "--alpha", "0.5", "--skip", "0.1"],
     "--skip"),
    ("smi-small-width", SMI_SE + ["--alpha", "0.5", "--small-width"], "--small-width"),
    ("smi-channel", SMI_SE + ["--alpha", "0.5", "--channel", "hardmax"], "--channel"),
    ("smi-beta-inf", SMI_SE + ["--alpha", "0.5", "--beta", "inf"], "--beta"),
    # general SMI channels (channel as data)
    ("smi-noise-negative", SMI_SE + ["--alpha", "0.5", "--channel", "noisy-attention",
                                     "--noise", "-1"], "--noise"),
    ("smi-file-in-amp", ["amp", "--model", "smi", "--channel-file", SMI_FILE, "--alpha",
                         "0.5"], "--channel-file"),
    ("smi-file-curve-negative-alpha", ["curve", "--model", "smi", "--channel-file", SMI_FILE,
                                       "--alphas", "-1:1:3"], "--alphas"),
    ("smi-rows-plain", ["threshold", "weak", "--model", "smi", "--rows", "2"], "--rows"),
    ("smi-general-digits", ["threshold", "weak", "--model", "smi", "--channel", "sign-product",
                            "--digits", "5"], "--digits"),
    ("smi-attention-skip", ["threshold", "weak", "--model", "smi", "--channel",
                            "noisy-attention", "--noise", "0.1", "--skip", "1"], "--skip"),
    ("smi-sign-beta", ["threshold", "weak", "--model", "smi", "--channel", "sign-product",
                       "--beta", "2"], "--beta"),
    ("smi-file-and-channel", ["threshold", "weak", "--model", "smi", "--channel-file", SMI_FILE,
                              "--channel", "sign-product"], "--channel"),
    ("noise-with-erm", ERM_SE + ERM_K + ["--alpha", "0.5", "--noise", "0.1"], "--noise"),
    # ERM (THEORY 3)
    ("erm-kappa0-missing", ERM_SE + ["--alpha", "0.5"], "--kappa0"),
    ("erm-kappa0-negative", ERM_SE + ["--alpha", "0.5", "--kappa0", "-1"], "--kappa0"),
    ("erm-delta-negative", ERM_SE + ERM_K + ["--alpha", "0.5", "--delta", "-1"], "--delta"),
    ("erm-lam-nan", ERM_SE + ERM_K + ["--alpha", "0.5", "--lam", "nan"], "--lam"),
    ("erm-lam-below-se-floor", ERM_SE + ERM_K + ["--alpha", "0.5", "--lam", "1e-4"], "--lam"),
    ("erm-alpha-zero", ERM_SE + ERM_K + ["--alpha", "0"], "--alpha"),
    ("erm-sigma-with-alpha", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e4", "--alpha", "0.2"],
     "--sigma"),
    ("erm-sigma-lam-nonzero", ERM_SE + ERM_K + ["--lam", "0.1", "--sigma", "1e4"], "--sigma"),
    ("erm-sigma-lam-default", ERM_SE + ERM_K + ["--sigma", "1e4"], "--sigma"),
    ("erm-sigma-tokens-3", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e4", "--tokens", "3"],
     "--sigma"),
    ("erm-sigma-direct", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e4", "--direct"],
     "--sigma"),
    ("erm-sigma-zero", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "0"], "--sigma"),
    ("erm-sigma-negative", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "-5"], "--sigma"),
    ("erm-sigma-nan", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "nan"], "--sigma"),
    ("erm-sigma-inf", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "inf"], "--sigma"),
    ("erm-sigma-above-checked", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e7"], "--sigma"),
    ("sigma-with-aim", ["se", "--alpha", "0.5", "--rho", "0.5", "--sigma", "100"], "--sigma"),
    ("se-alpha-missing", ERM_SE + ERM_K + ["--lam", "0.1"], "--alpha"),
    ("erm-sigma-starts", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e4", "--starts", "informed"],
     "--starts"),
    ("erm-sigma-small-width", ERM_SE + ERM_K + ["--lam", "0", "--sigma", "1e4", "--small-width"],
     "--small-width"),
    # curve --model erm --lam 0 --sigmas (the fixed-Sigma SE along a log-spaced grid)
    ("erm-sigmas-with-alphas", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--alphas", "0.2:0.3:3"],
     "--sigmas"),
    ("erm-sigmas-lam-default", ["curve", "--model", "erm", *ERM_K, "--sigmas", "1e3:1e4:3"],
     "--sigmas"),
    ("erm-sigmas-lam-nonzero", ["curve", "--model", "erm", *ERM_K, "--lam", "0.01", "--sigmas",
                                "1e3:1e4:3"], "--sigmas"),
    ("erm-sigmas-tokens-3", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--tokens", "3"], "--sigmas"),
    ("erm-sigmas-direct", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--direct"], "--sigmas"),
    ("erm-sigmas-cross-validate", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--cross-validate"],
     "--sigmas"),
    ("erm-sigmas-tol", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--tol", "1e-8"], "--sigmas"),
    ("erm-sigmas-below-checked", ERM_CURVE + ["--sigmas", "10:1e4:3"], "--sigmas"),
    ("erm-sigmas-above-checked", ERM_CURVE + ["--sigmas", "1e3:1e7:3"], "--sigmas"),
    ("erm-sigmas-negative", ERM_CURVE + ["--sigmas", "-5:1e4:3"], "--sigmas"),
    ("erm-sigmas-inf", ERM_CURVE + ["--sigmas", "1e3:inf:3"], "--sigmas"),
    ("erm-sigmas-two-parts", ERM_CURVE + ["--sigmas", "1e3:1e4"], "--sigmas"),
    ("erm-sigmas-zero-points", ERM_CURVE + ["--sigmas", "1e3:1e4:0"], "--sigmas"),
    ("erm-sigmas-with-aim", ["curve", "--model", "aim", "--sigmas", "1e3:1e4:3"], "--sigmas"),
    ("erm-sigmas-resume-without-out", ERM_CURVE + ["--sigmas", "1e3:1e4:3", "--resume"],
     "--resume"),
    ("curve-no-grid", ERM_CURVE, "--alphas"),
    ("erm-sigmas-kappa0-unchecked", ["curve", "--model", "erm", "--kappa0", "0.2", "--delta",
                                     "0.5", "--lam", "0", "--sigmas", "1e3:1e4:3"], "--sigmas"),
    ("erm-sigma-kappa0-unchecked", ERM_SE + ["--kappa0", "0.2", "--delta", "0.5", "--lam", "0",
                                             "--sigma", "1e3"], "--sigma"),
    ("erm-sigma-off-centre-above-checked", ERM_SE + ["--kappa0", "0.3", "--delta", "0.5", "--lam",
                                                     "0", "--sigma", "1e5"], "--sigma"),
    ("erm-sigma-delta-unchecked", ERM_SE + ["--kappa0", "0.5", "--delta", "1.5", "--lam", "0",
                                            "--sigma", "1e3"], "--sigma"),
    ("erm-lam0-kappa0-unchecked", ERM_SE + ["--kappa0", "0.2", "--delta", "0.5", "--lam", "0",
                                            "--alpha", "0.5"], "--kappa0"),
    ("erm-tokens-7", ERM_SE + ERM_K + ["--alpha", "0.5", "--tokens", "7"], "--tokens"),
    ("erm-rho", ERM_SE + ERM_K + ["--alpha", "0.5", "--rho", "0.5"], "--rho"),
    ("erm-skip", ERM_SE + ERM_K + ["--alpha", "0.5", "--skip", "1"], "--skip"),
    ("erm-channel", ERM_SE + ERM_K + ["--alpha", "0.5", "--channel", "softmax"], "--channel"),
    ("erm-small-width", ERM_SE + ERM_K + ["--alpha", "0.5", "--small-width"], "--small-width"),
    ("erm-kind-weak", ["threshold", "weak", "--model", "erm"] + ERM_K, "KIND"),
    ("erm-interp-lam", ["threshold", "interpolation", "--model", "erm", "--lam", "0.1"] + ERM_K,
     "--lam"),
    ("erm-perfect-delta", ["threshold", "perfect", "--model", "erm", "--delta", "0.5"] + ERM_K,
     "--delta"),
    ("se-direct-with-aim", SE + AIM_A + ["--direct"], "--direct"),
    ("erm-direct-with-aim", ["threshold", "perfect", "--direct", "--rho", "0.5"], "--direct"),
    ("erm-check", ["check", "--model", "erm"] + ERM_K, "--model"),
    ("kappa0-with-aim", SE + AIM_A + ["--kappa0", "0.5"], "--kappa0"),
    ("spectrum-without-erm", ["spectrum", "--alpha", "1"], "--model"),
    ("spectrum-alpha-zero", ["spectrum", "--model", "erm", "--alpha", "0"] + ERM_K, "--alpha"),
    # gd (finite-size training)
    ("gd-model", ["gd", "--model", "smi", "--alpha", "0.3"], "--model"),
    ("gd-kappa0-missing", ["gd", "--alpha", "0.3"], "--kappa0"),
    ("gd-rho-with-erm", ["gd", "--alpha", "0.3", "--rho", "0.5"] + ERM_K, "--rho"),
    ("gd-dim-huge", ["gd", "--alpha", "0.3", "--dim", "100000"] + ERM_K, "--dim"),
    ("gd-alpha-zero", ["gd", "--alpha", "0"] + ERM_K, "--alpha"),
    ("gd-se-with-aim", ["gd", "--model", "aim", "--rho", "0.5", "--alpha", "0.1", "--se"], "--se"),
    ("gd-kappa0-with-aim", ["gd", "--model", "aim", "--rho", "0.5", "--alpha", "0.1"] + ERM_K,
     "--kappa0"),
    ("gd-aim-channel", ["gd", "--model", "aim", "--rho", "0.5", "--alpha", "0.1", "--channel",
                        "hardmax"], "--channel"),
    # curve
    ("alphas-two-parts", ["curve", "--alphas", "0:1"], "--alphas"),
    ("alphas-text", ["curve", "--alphas", "a:b:c"], "--alphas"),
    ("alphas-zero-points", ["curve", "--alphas", "0:1:0"], "--alphas"),
    ("alphas-huge-grid", ["curve", "--alphas", "0:1:1000000000"], "--alphas"),
    ("alphas-negative", ["curve", "--alphas", "-1:1:3"], "--alphas"),
    ("alphas-inf", ["curve", "--alphas", "0:inf:3"], "--alphas"),
    ("tol-zero", ["curve", "--alphas", "0:0.1:3", "--tol", "0"], "--tol"),
    ("tol-one", ["curve", "--alphas", "0:0.1:3", "--tol", "1"], "--tol"),
    ("tol-with-smi", ["curve", "--model", "smi", "--alphas", "0:0.1:3", "--tol", "1e-3"],
     "--tol"),
    ("method-with-smi", ["curve", "--model", "smi", "--alphas", "0:0.1:3", "--method",
                         "per-alpha"], "--method"),
    ("plot-suffix", ["curve", "--alphas", "0:0.1:3", "--plot", "x.jpg2"], "--plot"),
    # threshold
    ("weak-without-small-width", ["threshold", "weak", "--model", "aim"], "--small-width"),
    ("threshold-digits-zero", ["threshold", "weak", "--small-width", "--digits", "0"],
     "--digits"),
    ("threshold-digits-huge", ["threshold", "weak", "--small-width", "--digits", "1001"],
     "--digits"),
    ("threshold-kind-bogus", ["threshold", "bogus"], "KIND"),
    ("smi-perfect", ["threshold", "perfect", "--model", "smi"], "KIND"),
    ("smi-certified", ["threshold", "weak", "--model", "smi", "--certified"], "--certified"),
    ("smi-digits-10", ["threshold", "weak", "--model", "smi", "--digits", "10"], "--digits"),
    ("aim-no-sequential", ["threshold", "weak", "--small-width", "--no-sequential"],
     "--no-sequential"),
    # amp
    ("amp-max-iter-zero", ["amp", "--alpha", "0.1", "--max-iter", "0"], "--max-iter"),
    ("amp-rng-seed-negative", ["amp", "--alpha", "0.1", "--rng-seed", "-1"], "--rng-seed"),
    ("amp-dim-small", ["amp", "--alpha", "0.1", "--dim", "5"], "--dim"),
    ("amp-seeds-zero", ["amp", "--alpha", "0.1", "--seeds", "0"], "--seeds"),
    ("amp-damping-one", ["amp", "--alpha", "0.1", "--damping", "1"], "--damping"),
    ("amp-damping-text", ["amp", "--alpha", "0.1", "--damping", "abc"], "--damping"),
    ("amp-no-alpha", ["amp"], "--alpha"),
    ("design-one-layer", ["se", "--alpha", "0.1", "--design", "independent"], "--design"),
    ("design-deep-amp", ["amp", "--layers", "2", "--alpha", "0.1", "--design", "shared"],
     "--design"),
    ("design-deep-threshold", ["threshold", "weak", "--small-width", "--layers", "2",
                               "--design", "shared"], "--design"),
    ("design-bad-value", ["se", "--layers", "2", "--alpha", "0.1", "--design", "mixed"],
     "--design"),
    ("amp-hardmax-t6", ["amp", "--channel", "hardmax", "--tokens", "6", "--alpha", "0.1"],
     "--tokens"),
    ("amp-hardmax-t3-alphas", ["amp", "--channel", "hardmax", "--tokens", "3", "--alphas",
                               "0.1:0.2:2"], "--alpha"),
    ("amp-sparsemax-epsilon", ["amp", "--channel", "sparsemax", "--epsilon", "0.1", "--alpha",
                               "0.1"], "--epsilon"),
    ("amp-sparsemax-t4", ["amp", "--channel", "sparsemax", "--tokens", "4", "--alpha", "0.1"],
     "--tokens"),
    ("amp-alpha-zero", ["amp", "--alpha", "0"], "--alpha"),
    ("amp-smi-max-iter-zero", ["amp", "--model", "smi", "--alpha", "0.5", "--max-iter", "0"],
     "--max-iter"),
    ("amp-smi-rng-seed", ["amp", "--model", "smi", "--alpha", "0.5", "--rng-seed", "-1"],
     "--rng-seed"),
    # mmse
    ("mmse-rho-zero", ["mmse", "--rho", "0", "--delta", "0.1"], "--rho"),
    ("mmse-rho-text", ["mmse", "--rho", "abc", "--delta", "0.1"], "--rho"),
    ("mmse-rho-inf", ["mmse", "--rho", "inf", "--delta", "0.1"], "--rho"),
    ("mmse-rho-nan", ["mmse", "--rho", "nan", "--delta", "0.1"], "--rho"),
    ("mmse-delta-negative", ["mmse", "--rho", "0.5", "--delta", "-1"], "--delta"),
    ("mmse-digits", ["mmse", "--rho", "0.5", "--delta", "0.1", "--digits", "3"], "--digits"),
    # check, derive
    ("check-channel", ["check", "--channel", "bogus"], "--channel"),
    ("check-smi-layers", ["check", "--model", "smi", "--layers", "9"], "--layers"),
    # the SMI identity checks' fixed rules hold for c in [1, 4] only: at c = 0.5 and 10 they
    # printed FAIL (Nishimori residual 2e-2 and 8 %) for a model that is right there
    ("check-smi-skip-small", ["check", "--model", "smi", "--skip", "0.5"], "skip"),
    ("check-smi-skip-large", ["check", "--model", "smi", "--skip", "10"], "skip"),
    ("derive-format", ["derive", "--format", "bogus"], "--format"),
    ("derive-file", ["derive", "--channel-file", "no_such_file.py"], "--channel-file"),
    # sweep
    ("sweep-channel-bogus", ["sweep", "grid", "--channel", "bogus", "--alphas", "0.1", "--out",
                             "{tmp}/s.csv"], "--channel"),
    ("sweep-huge-grid", ["sweep", "grid", "--alphas", "0:1:1000000000", "--out", "{tmp}/s.csv"],
     "--alphas"),
    ("sweep-rho-zero", ["sweep", "grid", "--alphas", "0.1", "--rhos", "0", "--out",
                        "{tmp}/s.csv"], "--rhos"),
    ("sweep-beta-inf", ["sweep", "grid", "--channel", "softmax", "--alphas", "0.1", "--betas",
                        "inf", "--out", "{tmp}/s.csv"], "--betas"),
    ("sweep-workers-zero", ["sweep", "grid", "--alphas", "0.1", "--workers", "0", "--out",
                            "{tmp}/s.csv"], "--workers"),
    ("sweep-skips-zero", ["sweep", "skip", "--skips", "0", "--out", "{tmp}/s.csv"], "--skips"),
    ("sweep-skips-inf", ["sweep", "skip", "--skips", "inf", "--out", "{tmp}/s.csv"], "--skips"),
    ("sweep-skip-layers", ["sweep", "skip", "--skips", "1", "--layers", "7", "--out",
                           "{tmp}/s.csv"], "--layers"),
    ("sweep-plot-suffix", ["sweep", "skip", "--skips", "1", "--no-sequential", "--plot",
                           "{tmp}/p.jpg2", "--out", "{tmp}/s.csv"], "--plot"),
    ("sweep-out-under-a-file", ["sweep", "skip", "--skips", "1", "--no-sequential", "--out",
                                "{tmp}/file/s.csv"], "--out"),
    ("curve-out-under-a-file", ["curve", "--alphas", "0.01:0.02:2", "--out",
                                "{tmp}/file/c.csv"], "--out"),
    # one data set's tokens beyond 1 GiB (alpha = 1e6 at D = 20 asked for 119 GiB: MemoryError)
    ("amp-data-too-large", ["amp", "--alpha", "1e6", "--dim", "20", "--seeds", "1"], "alpha"),
    # the double-precision prior beyond rho = 1e16 (bars 25x short at 1e30; a traceback at 1e300)
    ("mmse-rho-huge", ["mmse", "--rho", "1e300", "--delta", "0.1"], "rho"),
    # noisy polyhedral channel files (aim_sym/noisy_polyhedral_model.py)
    ("noisy-poly-param", ["threshold", "weak", "--small-width", "--channel-file", RELU_FILE,
                          "--param", "Delta=-1"], "Delta"),
    ("noisy-poly-amp-correlated", ["amp", "--channel-file", NOISY_SIGN_FILE, "--alpha", "0.5"],
     "channel-file"),
    ("noisy-poly-amp-alphas", ["amp", "--channel-file", RELU_FILE, "--alphas", "0.1:0.5:2"],
     "--alpha"),
    ("noisy-poly-digits", ["se", "--channel-file", RELU_FILE, "--alpha", "0.5", "--digits",
                           "20"], "digits"),
    ("noisy-poly-perfect", ["threshold", "perfect", "--channel-file", RELU_FILE], "kind"),
    # deep AIM with output noise (numerics/deep_aim_noisy.py)
    ("deep-noise-small", ["se", "--model", "aim", "--layers", "2", "--noise", "1e-4", "--alpha",
                          "0.1"], "--noise"),
    ("deep-noise-curve", ["curve", "--model", "aim", "--layers", "2", "--noise", "0.1",
                          "--alphas", "0.1:0.2:2"], "--noise"),
    ("deep-noise-derive", ["derive", "--model", "aim", "--layers", "2", "--noise", "0.1"],
     "--noise"),
    ("deep-noise-one-layer", ["se", "--model", "aim", "--noise", "0.1", "--alpha", "0.1"],
     "--noise"),
    # deep AIM: se and curve serve every skip c in [0, 1000] (line inner rule at c < 1); the
    # long run's options (--starts, --points, --resume)
    ("deep-se-skip-negative", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3",
                               "--skip", "-0.1"], "--skip"),
    ("deep-curve-skip-negative", ["curve", "--model", "aim", "--layers", "2", "--alphas",
                                  "0.1:0.3:3", "--skip", "-0.1"], "--skip"),
    ("deep-se-skip-nan", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3", "--skip",
                          "nan"], "--skip"),
    ("deep-noisy-skip-small", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3",
                               "--noise", "0.1", "--skip", "0.5"], "--skip"),
    # amp --model aim --layers 2 serves c in [0.5, 1000] (line inner rule below 1)
    ("deep-amp-skip-small", ["amp", "--model", "aim", "--layers", "2", "--alpha", "0.1",
                             "--skip", "0.25"], "--skip"),
    ("deep-amp-skip-negative", ["amp", "--model", "aim", "--layers", "2", "--alpha", "0.1",
                                "--skip", "-1"], "--skip"),
    ("deep-starts-bogus", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3", "--skip",
                           "0.5", "--starts", "uninformed,bogus"], "--starts"),
    ("deep-starts-twice", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3",
                           "--starts", "informed,informed"], "--starts"),
    ("deep-starts-one-layer", ["se", "--model", "aim", "--alpha", "0.3", "--starts",
                               "informed"], "--starts"),
    ("deep-points-small", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3", "--points",
                           "4"], "--points"),
    ("deep-points-large", ["curve", "--model", "aim", "--layers", "2", "--alphas", "0.1:0.2:2",
                           "--points", "13"], "--points"),
    ("deep-resume-no-out", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3",
                            "--resume"], "--resume"),
    ("deep-resume-not-json", ["se", "--model", "aim", "--layers", "2", "--alpha", "0.3",
                              "--out", "{tmp}/file", "--resume"], "--resume"),
    ("deep-curve-resume-no-out", ["curve", "--model", "aim", "--layers", "2", "--alphas",
                                  "0.1:0.2:2", "--resume"], "--resume"),
    # se --model aim --layers 2 --mmse1 V: the branch point, alpha an output (V in (0, 1];
    # exactly one of --alpha and --mmse1; deep AIM only; noiseless; one point, no starts)
    ("deep-mmse1-zero", ["se", "--model", "aim", "--layers", "2", "--mmse1", "0"], "--mmse1"),
    ("deep-mmse1-above-one", ["se", "--model", "aim", "--layers", "2", "--mmse1", "1.5"],
     "--mmse1"),
    ("deep-mmse1-negative", ["se", "--model", "aim", "--layers", "2", "--mmse1", "-0.1"],
     "--mmse1"),
    ("deep-mmse1-nan", ["se", "--model", "aim", "--layers", "2", "--mmse1", "nan"], "--mmse1"),
    ("deep-mmse1-with-alpha", ["se", "--model", "aim", "--layers", "2", "--mmse1", "0.05",
                               "--alpha", "0.3"], "--mmse1"),
    ("deep-mmse1-one-layer-aim", ["se", "--model", "aim", "--mmse1", "0.05"], "--mmse1"),
    ("deep-mmse1-smi", ["se", "--model", "smi", "--mmse1", "0.05"], "--mmse1"),
    ("deep-mmse1-erm", ["se", "--model", "erm", "--kappa0", "0.5", "--mmse1", "0.05"],
     "--mmse1"),
    ("deep-mmse1-noise", ["se", "--model", "aim", "--layers", "2", "--mmse1", "0.05", "--noise",
                          "0.1"], "--noise"),
    ("deep-mmse1-starts", ["se", "--model", "aim", "--layers", "2", "--mmse1", "0.05",
                           "--starts", "informed"], "--starts"),
    ("deep-mmse1-resume", ["se", "--model", "aim", "--layers", "2", "--mmse1", "0.05", "--out",
                           "{tmp}/x.json", "--resume"], "--resume"),
    ("deep-alpha-or-mmse1-missing", ["se", "--model", "aim", "--layers", "2"], "--mmse1"),
    # the L = 3 cascade (numerics/smi_cascade.py)
    ("cascade-layers", ["threshold", "weak", "--model", "smi", "--layers", "2", "--cascade"],
     "--cascade"),
    ("cascade-digits", ["threshold", "weak", "--model", "smi", "--layers", "3", "--cascade",
                        "--digits", "5"], "--digits"),
    ("cascade-aim", ["threshold", "weak", "--cascade", "--small-width"], "--cascade"),
    ("cascade-skip", ["threshold", "weak", "--model", "smi", "--layers", "3", "--cascade",
                      "--skip", "0.1"], "--skip"),
    ("cascade-learned-set", ["threshold", "weak", "--model", "smi", "--layers", "4", "--cascade",
                             "--learned", "2,4"], "--learned"),
    ("cascade-learned-last", ["threshold", "weak", "--model", "smi", "--layers", "4",
                              "--cascade", "--learned", "1,3"], "--learned"),
    ("cascade-learned-alone", ["threshold", "weak", "--model", "smi", "--layers", "4",
                               "--learned", "1,4"], "--learned"),
    ("cascade-layers-5", ["threshold", "weak", "--model", "smi", "--layers", "5", "--cascade"],
     "--cascade"),
    ("cascade-tokens", ["threshold", "weak", "--model", "smi", "--layers", "4", "--tokens", "3",
                        "--cascade"], "--tokens"),
]


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("the command ran on instead of refusing its input")


def run_main(args: list[str], capsys, monkeypatch, limit: int = 60) -> tuple[int, str, str]:
    """Run the console entry point in-process; return (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["aim-sym", *args])
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit)
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args,option", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_option(args, option, tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("a file, not a folder\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run_main(args, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[")]
    assert code == 2, (code, out[-500:], err[-1500:])
    assert len(lines) == 1, err
    assert lines[0].startswith("aim-sym: error:"), err
    assert option in lines[0], err
    assert "Traceback" not in err and "nan" not in out.lower()


def test_at_least_sixty_cases():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


def test_mmse_at_tiny_rho_is_in_range_or_refused(capsys, monkeypatch):
    # mmse(Delta) of the Wishart prior lies in [0, Delta] (the estimator 0 has error <= the
    # noise's own; THEORY 1.1); at rho = 1e-12 it was printed negative with exit 0.
    import json

    code, out, err = run_main(["mmse", "--rho", "1e-12", "--delta", "0.01", "--json"], capsys,
                              monkeypatch)
    if code == 0:
        v = float(json.loads(out)["value"])
        assert 0 <= v <= 0.01, v
    else:
        assert code == 2 and "--rho" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", [["threshold", "weak"], ["se", "--alpha", "0.3"]])
def test_smi_layers_zero_names_the_served_depths(command, capsys, monkeypatch):
    # --layers 0 was read as "not given" by one branch and refused with the L = 2, 3 lattice's
    # range ("one of 2, 3") by another: the message must list the depths the command serves
    from aim_sym import smi_routes

    which = "threshold" if command[0] == "threshold" else "se"
    depths = sorted({L for L, _ in smi_routes.served(which)})
    code, out, err = run_main([*command, "--model", "smi", "--layers", "0"], capsys, monkeypatch)
    assert code == 2 and f"one of {depths}" in err and "got 0" in err, err


def test_alpha_beyond_double_precision_exits_3_without_nan(capsys, monkeypatch):
    # hardmax at alpha = 1e9: the fixed point V ~ 1e-19 lies below the scan's V_MIN
    code, out, err = run_main(["se", "--alpha", "1e9"], capsys, monkeypatch)
    assert code == 3 and "beyond double precision" in err, err
    assert "nan" not in (out + err).lower() and "Traceback" not in err
