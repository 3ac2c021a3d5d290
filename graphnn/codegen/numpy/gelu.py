"""The NumPy lowering of ``gelu_and_derivative``: the reference's blocked routine
(``graphnn.ir.ops.gelu``) writing both results into the kernel's scratch buffers."""
from __future__ import annotations


def lower_gelu_and_derivative(node, args, ctx):
    """``_rt.gelu_and_derivative(x, out=bK, out_derivative=bL)`` for float32/float64 (never
    over x, which the routine reads again after writing a block's results); None (the
    generic reference call, float16/bfloat16 through float32) otherwise."""
    if node.inputs[0].type.dtype.name not in ("float32", "float64"):
        return None
    return f"_rt.gelu_and_derivative({args[0]}{ctx.out_arg(node)}" \
           f"{ctx.out_arg(node, result=1, name='out_derivative')})"
