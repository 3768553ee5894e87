"""Equation sheets of the SMI deep tied-attention channel, L = 2 and L = 3 (M = 2, P_l = 1)."""

from aim_sym.sheets import smi_expressions, smi_sheet

SHEETS = {
    f"smi_deep_attention_L{L}.md": ((lambda L=L: smi_sheet(L)), (lambda L=L: smi_expressions(L)))
    for L in (2, 3)
}

if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
