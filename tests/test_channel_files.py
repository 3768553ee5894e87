"""Channel files: the examples load and derive; bad files fail clearly (issue: new channels)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import sympy as sp

from aim_sym.channel_file import load_channel_file
from aim_sym.channels import ChannelError
from aim_sym.codegen import compile_expr, numpy_source
from aim_sym.output import derive
from aim_sym.symbols import V
from aim_sym.thresholds import small_width_weak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples", "channels")


def write(tmp_path, text, name="ch.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.slow
def test_examples_load_and_check():
    from aim_sym.checks import run_checks

    for f in sorted(os.listdir(EX)):
        if f.endswith(".py"):
            ch = load_channel_file(os.path.join(EX, f), tokens=2)
            params = {s.name: v for s, v in ch.params}
            res = run_checks(ch, params=params)
            assert all(r["passed"] for r in res), (f, res)


def test_sign_channel_threshold_is_pi_over_4():
    # oracle: one sign of u = h12 - h11 (variance 3 at V = 1): E = 2/pi, alpha_bar_c = pi/4
    ch = load_channel_file(os.path.join(EX, "sign_similarity.py"), tokens=2)
    assert small_width_weak(ch).expr == sp.pi / 4


def test_file_noisy_hardmax_equals_builtin():
    from aim_sym.channels import noisy_hardmax

    ch = load_channel_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2)
    a = small_width_weak(ch, params={"eps": "0.1"}).expr
    b = small_width_weak(noisy_hardmax(2), params={"epsilon": "0.1"}).expr
    assert sp.simplify(a - b) == 0


def test_generated_python_matches_compiled(tmp_path):
    ch = load_channel_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2)
    d = derive(ch)
    src = numpy_source(d, {"eps": "0.1"}, ch)
    ns = {}
    exec(compile(src, "generated", "exec"), ns)
    from aim_sym.compiled import substitute_params

    om = (0.3, -0.4, 0.8)
    for y, g in zip(ch.outputs, d.g_out):
        f = compile_expr(substitute_params(g, ch, {"eps": "0.1"}), list(d.omega) + [V])
        np.testing.assert_allclose(np.ravel(ns["g_out"](y, *om, 0.6)), np.ravel(f(*om, 0.6)),
                                   rtol=1e-13)


@pytest.mark.parametrize(
    "text,match",
    [
        ("def channel(T)\n    return 1\n", r"ch.py:1: syntax error"),
        ("x = 1\n", "must define channel"),
        ("from aim_sym.channels import h_matrix, discrete\nimport sympy as sp\n"
         "def channel(T):\n    h = h_matrix(T)\n"
         "    return discrete(name='bad', tokens=T, likelihood={1: sp.Heaviside(h[0,1]-h[0,0]),"
         " 2: sp.Heaviside(h[0,1]-h[0,0])})\n", "probabilities sum to"),
        ("from aim_sym.channels import h_matrix, discrete\nimport sympy as sp\n"
         "def channel(T):\n    h = h_matrix(T)\n    k = sp.Symbol('kappa')\n"
         "    return discrete(name='bad', tokens=T, likelihood={1: k*sp.Heaviside(h[0,1]),"
         " 2: 1 - k*sp.Heaviside(h[0,1])})\n", "unknown symbol.*kappa"),
        ("def channel(T):\n    return 1 / 0\n", r"ch.py:2: ZeroDivisionError"),
        # sys.exit() in the file ended the command silently with the file's exit code
        ("import sys\nsys.exit(5)\n", r"ch.py:2: the file called sys.exit\(5\)"),
    ],
)
def test_bad_files_fail_clearly(tmp_path, text, match):
    path = write(tmp_path, text)
    with pytest.raises(ChannelError, match=match):
        load_channel_file(path, tokens=2)


def test_output_of_zero_probability(tmp_path):
    text = (
        "from aim_sym.channels import h_matrix, discrete\nimport sympy as sp\n"
        "def channel(T):\n    h = h_matrix(T)\n    H = sp.Heaviside(h[0,1]-h[0,0])\n"
        "    return discrete(name='z0', tokens=T, likelihood={1: H, 2: 1 - H, 3: H - H*1})\n"
    )
    with pytest.raises(ChannelError, match="output 3 has probability zero"):
        load_channel_file(write(tmp_path, text), tokens=2)


def test_cli_with_channel_file():
    p = subprocess.run([sys.executable, "-m", "aim_sym", "derive", "--channel-file",
                        os.path.join(EX, "sign_similarity.py"), "--tokens", "2", "--format",
                        "latex"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "\\begin{align*}" in p.stdout
    p = subprocess.run([sys.executable, "-m", "aim_sym", "se", "--channel-file",
                        os.path.join(EX, "sign_similarity.py"), "--alpha", "0.1", "--rho", "0.5",
                        "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def test_cli_refuses_negative_parameters_of_a_channel_file():
    for f, param in (("noisy_projection.py", "Delta=-1"), ("noisy_hardmax.py", "eps=2"),
                     ("noisy_hardmax.py", "eps=nan")):
        p = subprocess.run([sys.executable, "-m", "aim_sym", "se", "--channel-file",
                            os.path.join(EX, f), "--param", param, "--alpha", "0.1"],
                           capture_output=True, text=True, timeout=300)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "--param" in lines[0], p.stderr


def test_from_file_binds_values():
    from aim_sym.channel_file import from_file

    ch = from_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2, eps=0.2)
    a = small_width_weak(ch, params={"eps": 0.2}).expr
    b = small_width_weak(load_channel_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2),
                         params={"eps": "0.2"}).expr
    assert sp.simplify(a - b) == 0 and dict((s.name, v) for s, v in ch.params) == {"eps": 0.2}


def test_noisy_statistics_keep_the_basis_their_noise_is_given_in():
    """u = A h + N(0, Delta I): re-basing A to its echelon form T A would need noise T N T^T; the
    builder keeps A as given (a noiseless channel may be re-based: same information)."""
    from aim_sym.channels import gaussian, h_matrix

    h = h_matrix(2)
    D = sp.Symbol("Delta", positive=True)
    ch = gaussian(name="g", tokens=2, statistics=[h[0, 0], h[0, 0] + h[0, 1]],
                  noise=sp.eye(2) * D, params={D: 0.5})
    assert ch.statistics == sp.ImmutableMatrix([[1, 0, 0], [1, 1, 0]])
    free = gaussian(name="g0", tokens=2, statistics=[h[0, 0], h[0, 0] + h[0, 1]])
    assert free.statistics.rank() == 2
