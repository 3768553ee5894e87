"""Equation sheet of the AIM with the hardmax channel, T = 2.

T = 3 is not derived: its outputs are intersections of six half-spaces (five-dimensional
orthant probabilities), beyond the engine's closed forms (Phi, Phi2).
"""

from aim_sym.channels import hardmax
from aim_sym.sheets import aim_expressions, aim_sheet

SHEETS = {
    "aim_hardmax_T2.md": (lambda: aim_sheet(hardmax(2)), lambda: aim_expressions(hardmax(2))),
}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
