"""Equation sheets of the AIM with the linear channel (noiseless and noisy), T = 2 and 3."""

from aim_sym.channels import linear
from aim_sym.sheets import aim_expressions, aim_sheet

SHEETS = {
    "aim_linear_T2.md": (lambda: aim_sheet(linear(2)), lambda: aim_expressions(linear(2))),
    "aim_linear_noisy_T2.md": (
        lambda: aim_sheet(linear(2, noisy=True)),
        lambda: aim_expressions(linear(2, noisy=True)),
    ),
}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
