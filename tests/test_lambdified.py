"""The SMI channel pieces rebuilt from lambdify's cached source (aim_sym.lambdified)."""

import os
import subprocess
import sys

import mpmath as mp
import numpy as np
import pytest

from aim_sym import smi
from aim_sym.lambdified import SMIFunctions, smi_functions

PROBE = ("import sys; from aim_sym.lambdified import smi_functions; "
         "f = smi_functions(2, 'numpy')['attention_inverse']; "
         "print(repr([float(t) for t in f(0.3, -1.2, 0.7, 1.3)]), 'sympy' in sys.modules)")


def test_a_warm_process_needs_no_sympy(tmp_path):
    env = dict(os.environ, AIM_SYM_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("AIM_SYM_NO_CACHE", None)
    runs = [subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs[0][-1] == "True" and runs[1][-1] == "False"     # built once, then only loaded
    assert runs[0][:-1] == runs[1][:-1]
    ref = smi.compile_functions(2, "numpy")["attention_inverse"](0.3, -1.2, 0.7, 1.3)
    assert " ".join(runs[1][:-1]) == repr([float(t) for t in ref])


@pytest.mark.parametrize("name", ["attention_inverse", "forward", "h_from_y", "fibre_jacobian"])
def test_same_values_as_lambdify(name):
    f, g = smi.compile_functions(2, "numpy")[name], smi_functions(2, "numpy")[name]
    rng = np.random.default_rng(3)
    x = [rng.standard_normal(5) for _ in range(f.__code__.co_argcount)]
    with np.errstate(all="ignore"):
        a, b = np.array(f(*x), dtype=float), np.array(g(*x), dtype=float)
    assert np.array_equal(a, b, equal_nan=True)
    fm, gm = smi.compile_functions(2, "mpmath")[name], smi_functions(2, "mpmath")[name]
    with mp.workdps(40):
        xm = [mp.mpf(1) / (3 + k) for k in range(fm.__code__.co_argcount)]
        assert [str(t) for t in fm(*xm)] == [str(t) for t in gm(*xm)]
    assert set(smi_functions(2, "numpy")) == set(smi.derived_functions(2))


def test_bad_backend_is_named():
    with pytest.raises(ValueError, match="backend"):
        SMIFunctions(2, "cupy")
