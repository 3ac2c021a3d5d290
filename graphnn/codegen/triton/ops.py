"""Elementwise ops as Triton expressions: the table the pointwise and reduction templates use.

``lower(node, args, em)`` returns the expression of a node's result, or raises ``Unlowered``
for an op (or an operand dtype) the table has no template for (the scheduler's kernel then
runs on the host instead). ``args`` are the operands' variable names, each already holding the
operand in its *compute dtype* (``compute``): float16, bfloat16 and float32 are computed in
float32, every other dtype in itself. ``em.tmp(expr)`` binds a sub-expression to a fresh
variable (so that it is evaluated once) and ``em.cast(name, src, dst)`` converts between
compute dtypes.

Semantics follow the registry's reference implementations (NumPy), NaN and inf included:
``maximum``/``minimum``/``clamp``/``relu`` propagate NaN, comparisons with NaN are false
(``ne`` true), ``sign(nan)`` is NaN. Only ``tl.*`` maths is used (the interpreter has no
libdevice), so ``tanh`` is written with ``tl.exp``.

The source runs on Triton 3.6 as on 3.9, where 3.6 loses the sign of zero in two places (its
interpreter and its compiler alike): a float constant equal to 0 (a ``-0.0`` literal,
``tl.full(..., -0.0, ...)``) becomes +0.0, and unary minus on a float tensor is ``0 - x``, so
``-x`` of +0.0 is +0.0. Hence a float negation whose zero sign matters is ``negated(x)`` (a
product by -1.0) and a -0.0 constant is ``NEGATIVE_ZERO`` (the sign bit bitcast to float32,
which the compiled code keeps as the bits 0x80000000). 3.6's interpreter also computes
``tl.fma`` as a rounded product plus an add, so exact product errors are ``product_error``:
``tl.fma`` in the GPU form, Dekker's product in the interpreter form. The compiler (3.6 and 3.9)
contracts products and sums into fmas, which breaks error-free sums, so the GPU form of a
kernel holding pow's double-double powering asks for ``enable_fp_fusion=False`` through
``em.options``.

Division and square root are ``divide`` and ``square_root`` (``tl.div_rn``, ``tl.sqrt_rn``),
correctly rounded as the reference's: the compiler turns a float32 ``/`` into an approximate
division (``div.full.f32``, or ``div.approx.f32``, which is 0 for divisors above 2**126) and
``tl.sqrt`` into ``sqrt.approx.ftz.f32``, which flushes subnormal inputs to 0 (so 1 / sqrt of
one is inf), while the interpreter computes both exactly. ``tl.exp`` stays approximate on a
GPU (the argument times log2(e), then ``ex2.approx.f32``: a few ulps, more where a large
argument amplifies the product's rounding); ``tl.log`` compiles to libdevice's ``logf``
(Triton 3.6 and 3.9).
"""
from __future__ import annotations

import math

import numpy as np

from graphnn.ir.dtypes import DType, compute_np
from graphnn.ir.ops.shape_rules import promoted

FLOAT_COMPUTE = {"float16": "tl.float32", "bfloat16": "tl.float32", "float32": "tl.float32",
                 "float64": "tl.float64"}
INT_COMPUTE = {"bool": "tl.int1", "uint8": "tl.uint8", "int8": "tl.int8", "int16": "tl.int16",
               "int32": "tl.int32", "int64": "tl.int64"}
ROUNDED = {"float16": "tl.float16", "bfloat16": "tl.bfloat16"}  # stored in 16 bits


class Unlowered(Exception):
    """The table has no template for this node."""


def compute(dtype: DType) -> str:
    """The Triton dtype a value of ``dtype`` is held in inside a kernel."""
    return FLOAT_COMPUTE.get(dtype.name) or INT_COMPUTE[dtype.name]


NEGATIVE_ZERO = "tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)"
"""-0.0 as a float32 scalar computed from its bits: Triton 3.6 turns a ``-0.0`` constant into
+0.0 (see the module docstring)."""


def divide(a: str, b: str, dtype: str) -> str:
    """``a / b`` computed in the float ``dtype`` (``tl.float32`` or ``tl.float64``, which the
    operands already have, or Python numbers), correctly rounded on a GPU too (see the module
    docstring; float64's ``/`` compiles to div.rn.f64, and ``tl.div_rn`` takes float32 only)."""
    return f"(({a}) / ({b}))" if dtype == "tl.float64" else f"tl.div_rn({a}, {b})"


def square_root(x: str, dtype: str) -> str:
    """The square root of ``x`` computed in the float ``dtype``, correctly rounded (subnormals
    kept) on a GPU too (float64's ``tl.sqrt`` is sqrt.rn.f64; ``tl.sqrt_rn`` is float32's)."""
    return f"tl.sqrt({x})" if dtype == "tl.float64" else f"tl.sqrt_rn({x})"


def negated(x: str) -> str:
    """``-x`` for a float ``x``, the sign of zero included (Triton 3.6's ``-x`` is ``0 - x``)."""
    return f"({x} * -1.0)"


def number(value) -> str:
    """A Python number as Triton source (``float("inf")`` for infinities, ``NEGATIVE_ZERO``
    for -0.0)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return repr(value)
    value = float(value)
    if math.isnan(value):
        raise Unlowered("NaN literal")
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    if value == 0 and math.copysign(1.0, value) < 0:
        return NEGATIVE_ZERO
    return repr(value)


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's factor for float64


def _halves(x: str, em) -> tuple:
    """Veltkamp's split of a float64 ``x`` with ``|x| < 1.3e300`` (so that ``_SPLIT * x`` is
    finite) into ``hi + lo == x``, each with at most 26 significant bits, so products of halves
    are exact."""
    c = em.tmp(f"{_SPLIT} * {x}")
    hi = em.tmp(f"{c} - ({c} - {x})")
    return hi, em.tmp(f"{x} - {hi}")


def product_error(a: str, b: str, p: str, em) -> str:
    """``a * b - p`` exactly, for float64 ``a``, ``b`` and their rounded product ``p``, as long
    as ``|a|, |b| < 1.3e300`` and no partial product underflows. The GPU form is ``tl.fma`` (one
    fused instruction). The interpreter form is Dekker's exact product from Veltkamp halves,
    since Triton 3.6's interpreter rounds ``tl.fma``'s product; the GPU form cannot take it,
    as the compiler may contract its products and sums into fmas, which breaks the split."""
    if not em.interpreter_form:
        return f"tl.fma({a}, {b}, -{p})"  # -p: 0 - p on 3.6, equal to p's negation but for zeros
    ah, al = _halves(a, em)
    bh, bl = (ah, al) if b == a else _halves(b, em)
    return em.tmp(f"(({ah} * {bh} - {p}) + {ah} * {bl} + {al} * {bh}) + {al} * {bl}")


def _common(node) -> str:
    """The compute dtype of a comparison's or logical op's operands: their promoted dtype
    (0-d operands promote as in PyTorch), as the reference implementation computes."""
    return compute(promoted([v.type for v in node.inputs]))


def _out(node) -> str:
    return compute(node.outputs[0].type.dtype)


def _operands(node, args, em, dst) -> list:
    return [em.cast(a, compute(v.type.dtype), dst) for a, v in zip(args, node.inputs)]


def _arith(symbol, bool_symbol=None):
    def lower(node, args, em):
        out = _out(node)
        if out == "tl.int1" and bool_symbol is None:
            raise Unlowered(f"{node.op} on bool")
        a, b = _operands(node, args, em, out)
        return f"({a} {bool_symbol if out == 'tl.int1' else symbol} {b})"
    return lower


def _div(node, args, em):
    out = _out(node)
    if out not in ("tl.float32", "tl.float64"):
        raise Unlowered("integer division")
    a, b = _operands(node, args, em, out)
    return divide(a, b, out)


def _float_unary(template):
    def lower(node, args, em):
        out = _out(node)
        if out not in ("tl.float32", "tl.float64"):
            raise Unlowered(f"{node.op} with a {out} result")
        return template(em.tmp(_operands(node, args, em, out)[0]), out, em)
    return lower


def _tanh(x, out, em):
    """-m / (2 + m) with m = expm1(-2|x|), computed in float64 and rounded once (the float32
    formula is ~1.5 ulp off, which 1 - tanh(x)**2, its gradient, amplifies near +-1). Where
    u = exp(-2|x|) is below 0.5, m is u - 1 (the formula (1 - u) / (1 + u)); above, u - 1
    cancels (to 0 for |x| below 1e-17), so m is Kahan's ``(u - 1) * y / log(u)``. Below
    1.35e-8 (about the cube root of 3 * 2**-80), where tanh(x) = x - x**3 / 3 + ... rounds to x
    in float64 (so in every float dtype), the result is x itself.
    Within 2 float64 ulps (float32 results correctly rounded on the tests' grid); exact at
    +-inf, NaN for NaN, the sign (of -0.0 too) from the sign bit."""
    wide = em.tmp(f"{x}.to(tl.float64)")
    y = em.tmp(f"-2.0 * tl.abs({wide})")
    u = em.tmp(f"tl.exp({y})")
    # u - 1 is -1 for x = inf; NaN stays NaN in Kahan's branch; u = 1 (|x| below 1e-17, where
    # the result is x) divides by 1, not by log(1) = 0 (no 0/0 in the branch not taken)
    log_u = em.tmp(f"tl.where({u} == 1.0, 1.0, tl.log({u}))")
    m = em.tmp(f"tl.where({u} < 0.5, {u} - 1.0, ({u} - 1.0) * {y} / {log_u})")
    t = em.tmp(f"{m} / (-2.0 - {m})")
    signed = f"tl.where({wide}.to(tl.int64, bitcast=True) < 0, {negated(t)}, {t})"
    return f"tl.where(tl.abs({wide}) < 1.35e-08, {wide}, {signed}).to({out})"


def _gelu(node, args, em):
    out = _out(node)
    if out not in ("tl.float32", "tl.float64"):
        raise Unlowered("gelu on integers")
    x = em.tmp(_operands(node, args, em, out)[0])
    if node.attrs.get("approximate", "none") == "tanh":
        inner = em.tmp(f"0.7978845608028654 * ({x} + 0.044715 * ({x} * {x} * {x}))")
        return f"0.5 * {x} * (1.0 + {em.tmp(_tanh(inner, out, em))})"
    # the division as the reference rounds it
    return f"0.5 * {x} * (1.0 + tl.erf({divide(x, '1.4142135623730951', out)}))"


def _extremum(fn):
    def lower(node, args, em):
        out = _out(node)
        a, b = (em.tmp(x) for x in _operands(node, args, em, out))
        if out not in ("tl.float32", "tl.float64"):
            return f"tl.{fn}({a}, {b})"
        return f"tl.where({a} != {a}, {a}, tl.where({b} != {b}, {b}, tl.{fn}({a}, {b})))"
    return lower


def _relu(node, args, em):
    (x,) = _operands(node, args, em, _out(node))
    x = em.tmp(x)
    return f"tl.where({x} < 0, 0, {x})"


def _clamp(node, args, em):
    out = _out(node)
    x = em.tmp(_operands(node, args, em, out)[0])
    dtype = compute_np(node.outputs[0].type.dtype.np)
    for bound, test in ((node.attrs.get("min"), "<"), (node.attrs.get("max"), ">")):
        if bound is not None:  # in the result's dtype, wrapping as the reference converts it
            b = number(np.asarray(bound).astype(dtype).item())
            x = em.tmp(f"tl.where({x} {test} {b}, {b}, {x}).to({out})")
    return x


def _compare(symbol):
    def lower(node, args, em):
        a, b = _operands(node, args, em, _common(node))
        return f"({a} {symbol} {b})"
    return lower


def _logical(symbol):
    def lower(node, args, em):
        common = _common(node)
        a, b = (em.cast(x, common, "tl.int1") for x in _operands(node, args, em, common))
        return f"({a} {symbol} {b})"
    return lower


def _logical_not(node, args, em):
    (a,) = _operands(node, args, em, "tl.int1")
    return f"({a} == 0)"


def _where(node, args, em):
    out = _out(node)
    c = em.cast(args[0], compute(node.inputs[0].type.dtype), "tl.int1")
    a, b = (em.cast(x, compute(v.type.dtype), out) for x, v in zip(args[1:], node.inputs[1:]))
    return f"tl.where({c}, {a}, {b})"


def known_scalar(value):
    """The number a value is known to hold everywhere at generation time (a one-element
    constant, or a ``full`` node's fill), else None."""
    if value.kind == "const" and value.data is not None and np.size(value.data) == 1:
        return np.asarray(value.data).item()
    producer = value.producer
    if producer is not None and producer.op == "full":
        return producer.attrs["value"]
    return None


# x ** e for a known exponent e: the expression of the variable x in the compute dtype out
_POWERS = {1.0: lambda x, out: x, 2.0: lambda x, out: f"({x} * {x})",
           3.0: lambda x, out: f"({x} * {x} * {x})", 0.5: lambda x, out: square_root(x, out),
           -1.0: lambda x, out: divide("1.0", x, out),
           -0.5: lambda x, out: divide("1.0", square_root(x, out), out)}


def _integer_power(a: str, e: str, em) -> str:
    """``a ** e`` for float64 ``a`` and integer-valued ``e`` with ``|e| < 2**32`` (other lanes
    give garbage), by binary powering in double-double arithmetic (exact products through
    ``product_error``: a relative error near ``|e| * 2**-100`` before the final rounding, so
    the reference's correctly rounded values come out bit for bit) as long as no power of ``a``
    it forms overflows or underflows. The loop takes one step per bit of the block's largest
    ``|e|`` (a scalar bound from ``tl.max``: 1 to 32 steps; a step count below 2**k takes k);
    lanes with fewer bits only square their base in the later steps, so each lane's result is
    that of a 32-step loop. In a pointwise kernel's GPU form a 0-d value is a scalar, so a 0-d
    power (an optimizer step's bias corrections) runs the loop once per thread."""
    if not em.interpreter_form:  # contraction would fuse the error-free sums into fmas
        em.options["enable_fp_fusion"] = False
    n = em.tmp(f"tl.where(tl.abs({e}) < 4294967296.0, tl.abs({e}), 0.0).to(tl.int64)")
    # the largest n of the block (n plus a block of one, so that a scalar n reduces too); a
    # while loop on it: Triton 3.6's interpreter holds scalars as 1-element arrays, which
    # range() refuses (NumPy 2 converts only 0-d arrays to int)
    top = em.tmp(f"tl.max({n} + tl.zeros([1], tl.int64), axis=None)")
    zero = f"({a} * 0.0 + {e} * 0.0)"  # of the broadcast shape, as the loop carries it
    rh, rl, sh, sl = (em.tmp(v) for v in (f"{zero} + 1.0", zero, f"{a} + {zero}", zero))
    em.emit(f"while {top} != 0:")
    em.indent += 1
    bit = em.tmp(f"({n} & 1) != 0")
    ph = em.tmp(f"{rh} * {sh}")
    pl = em.tmp(f"{product_error(rh, sh, ph, em)} + ({rh} * {sl} + {rl} * {sh})")
    th = em.tmp(f"{ph} + {pl}")
    em.emit(f"{rl} = tl.where({bit}, {pl} - ({th} - {ph}), {rl})")
    em.emit(f"{rh} = tl.where({bit}, {th}, {rh})")
    qh = em.tmp(f"{sh} * {sh}")
    ql = em.tmp(f"{product_error(sh, sh, qh, em)} + 2.0 * {sh} * {sl}")
    em.emit(f"{sh} = {qh} + {ql}")
    em.emit(f"{sl} = {ql} - ({sh} - {qh})")
    em.emit(f"{n} = {n} >> 1")
    em.emit(f"{top} = {top} >> 1")
    em.indent -= 1
    inv = em.tmp(f"1.0 / {rh}")
    if em.interpreter_form:  # 1 - rh * inv: unit is within an ulp of 1, so 1 - unit is exact
        unit = em.tmp(f"{rh} * {inv}")
        residual = em.tmp(f"(1.0 - {unit}) - {product_error(rh, inv, unit, em)}")
    else:
        residual = em.tmp(f"tl.fma(-{rh}, {inv}, 1.0)")
    return f"tl.where({e} < 0, {inv} + ({residual} - {rl} * {inv}) * {inv}, {rh} + {rl})"


def _float_pow(x: str, y: str, out: str, em) -> str:
    """``x ** y`` for floats ``x`` and ``y`` (variables in the compute dtype ``out``) as the
    reference's ``np.power``. The magnitude is ``exp(y * log|x|)`` in float64, with the
    product's rounding error (exact through ``product_error``) put back as a factor
    ``1 + err``, rounded once to ``out``: float32 results are within one ulp of the reference,
    float64 ones within a few ulps times ``|y * log|x||`` (the error of ``log``). A float64
    result by an integer exponent (``|y| < 2**32``) whose magnitude lies in [1e-300, 1e300]
    takes ``_integer_power`` instead: the reference's value bit for bit. Then C's special
    cases: ``x ** 0`` and ``1 ** y`` are 1 (NaN included), ``(+-1) ** +-inf`` is 1, a negative
    base to an odd integer is negative (-0.0 and -inf too, by the sign bit), a finite negative
    base to a finite non-integer is NaN; zero and infinite bases follow from ``log 0 = -inf``."""
    b, e = (em.tmp(v if out == "tl.float64" else f"{v}.to(tl.float64)") for v in (x, y))
    a = em.tmp(f"tl.abs({b})")
    log = em.tmp(f"tl.log({a})")
    p = em.tmp(f"{e} * {log}")
    # |e| >= 1e300 (past product_error's domain) makes p zero (exact) or |p| >= 1e284, whose
    # exp is 0 or inf whatever err is
    err = em.tmp(f'tl.where((tl.abs({p}) < float("inf")) & (tl.abs({e}) < 1e300), '
                 f'{product_error(e, log, p, em)}, 0.0)')
    m = em.tmp(f"tl.exp({p}) * (1.0 + {err})")
    whole = em.tmp(f"tl.floor({e}) == {e}")
    if out == "tl.float64":
        exact = _integer_power(a, e, em)
        m = em.tmp(f"tl.where({whole} & (tl.abs({e}) < 4294967296.0) & ({m} > 1e-300) & "
                   f"({m} < 1e300), {exact}, {m})")
    odd = em.tmp(f"{whole} & (tl.floor({e} * 0.5) != {e} * 0.5)")
    r = em.tmp(f"tl.where(({b}.to(tl.int64, bitcast=True) < 0) & {odd}, {negated(m)}, {m})")
    r = em.tmp(f'tl.where(({b} < 0) & ({b} > -float("inf")) & ({whole} == 0), float("nan"), '
               f'{r})')
    one = f'({e} == 0) | ({b} == 1.0) | (({a} == 1.0) & (tl.abs({e}) == float("inf")))'
    r = f"tl.where({one}, 1.0, {r})"
    return r if out == "tl.float64" else f"({r}).to({out})"


def _pow(node, args, em):
    """Float powers: by a known exponent in ``_POWERS``, that expression (x * x is NumPy's
    x ** 2 exactly), else ``_float_pow``; integer powers have no template."""
    out = _out(node)
    if out not in ("tl.float32", "tl.float64"):
        raise Unlowered("pow of integers")
    exponent = known_scalar(node.inputs[1])
    x, y = _operands(node, args, em, out)
    if exponent is not None and float(exponent) in _POWERS:
        return _POWERS[float(exponent)](em.tmp(x), out)
    return _float_pow(em.tmp(x), em.tmp(y), out, em)


def _cast(node, args, em):
    return em.cast(args[0], compute(node.inputs[0].type.dtype), _out(node))


def _neg(node, args, em):
    out = _out(node)
    if out == "tl.int1":
        raise Unlowered("neg on bool")
    x = _operands(node, args, em, out)[0]
    return negated(x) if out in ("tl.float32", "tl.float64") else f"(-{x})"


def _abs(node, args, em):
    if _out(node) == "tl.int1":
        return args[0]
    return f"tl.abs({_operands(node, args, em, _out(node))[0]})"


def _sign(node, args, em):
    """(x > 0) - (x < 0): 0 for NaN and both zeros, as the reference."""
    out = _out(node)
    if out == "tl.int1":
        return args[0]
    x = em.tmp(_operands(node, args, em, out)[0])
    return f"(({x} > 0).to({out}) - ({x} < 0).to({out}))"


TABLE = {
    "add": _arith("+", "|"), "sub": _arith("-"), "mul": _arith("*", "&"), "div": _div,
    "neg": _neg, "abs": _abs, "sign": _sign,
    "exp": _float_unary(lambda x, out, em: f"tl.exp({x})"),
    "log": _float_unary(lambda x, out, em: f"tl.log({x})"),
    "sqrt": _float_unary(lambda x, out, em: square_root(x, out)),
    "rsqrt": _float_unary(lambda x, out, em: divide("1.0", square_root(x, out), out)),
    "erf": _float_unary(lambda x, out, em: f"tl.erf({x})"),
    "sin": _float_unary(lambda x, out, em: f"tl.sin({x})"),
    "cos": _float_unary(lambda x, out, em: f"tl.cos({x})"),
    "sigmoid": _float_unary(lambda x, out, em: divide("1.0", f"1.0 + tl.exp(-{x})", out)),
    "tanh": _float_unary(_tanh), "gelu": _gelu, "relu": _relu, "clamp": _clamp,
    "maximum": _extremum("maximum"), "minimum": _extremum("minimum"),
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "logical_and": _logical("&"), "logical_or": _logical("|"), "logical_xor": _logical("^"),
    "logical_not": _logical_not, "where": _where, "cast": _cast, "pow": _pow,
}


def lower(node, args, em) -> str:
    """The Triton expression of ``node``'s result in its compute dtype (see the module
    docstring); ``Unlowered`` when the table cannot express it."""
    fn = TABLE.get(node.op)
    if fn is None or len(node.outputs) != 1:
        raise Unlowered(node.op)
    return fn(node, args, em)


ELEMENTWISE_OPS = frozenset(TABLE)
