"""aim_sym.smi_routes: one table of which engine serves deep-attention SMI at (L, M)."""

import pytest
from aim_sym.numerics import smi_branch_qmc, smi_cascade, smi_weak
from aim_sym.numerics.records import InputError

from aim_sym import smi_routes


def test_lattice_pairs_are_served_and_kernel_pairs_pass_their_checks():
    for command in smi_routes.COMMANDS:
        pairs = smi_routes.served(command)
        assert set(smi_routes.LATTICE[command]) <= set(pairs)
        for layers, tokens in pairs:
            kind = smi_routes.engine(command, layers=layers, tokens=tokens)
            if kind == "kernel":
                check = {"threshold": smi_weak.check, "se": smi_branch_qmc.check,
                         "cascade": smi_branch_qmc.check}[command]
                check(layers=layers, tokens=tokens, skip=1.0, beta=1.0)
    assert smi_routes.served("cascade") == tuple(smi_cascade.SUPPORTED)
    # the layouts of today: L = 2, 3 thresholds on the lattice, L = 4 and M = 3 on the kernel
    assert smi_routes.engine("threshold", layers=3, tokens=2) == "lattice"
    assert smi_routes.engine("threshold", layers=4, tokens=2) == "kernel"
    assert smi_routes.engine("se", layers=2, tokens=2) == "lattice"
    assert smi_routes.engine("se", layers=3, tokens=2) == "kernel"


@pytest.mark.parametrize("command, layers, tokens, name", [
    ("threshold", 9, 2, "layers"), ("se", 2, 6, "tokens"), ("cascade", 2, 2, "layers"),
    ("cascade", 4, 3, "tokens"), ("sweep", 2, 2, "command")])
def test_refusals_name_the_option(command, layers, tokens, name):
    with pytest.raises(InputError, match=rf"^{name} must be"):
        smi_routes.engine(command, layers=layers, tokens=tokens)
