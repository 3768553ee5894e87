"""Equation sheet of the deep AIM: two tied attention layers at T = 2 (THEORY 1.6).

``python derivations/aim_deep_attention.py`` writes derivations/sheets/aim_deep_attention_T2.md;
every reduction step is verified by sympy while the sheet is written (aim_sym.deep_aim_sheet).
"""

from aim_sym.deep_aim_sheet import deep_aim_expressions, deep_aim_sheet

SHEETS = {"aim_deep_attention_T2.md": (deep_aim_sheet, deep_aim_expressions)}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
