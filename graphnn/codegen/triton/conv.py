"""The ``@triton.jit`` source of convolution kernels: ``conv2d``, ``conv2d_epilogue`` and the two
gradients ``conv2d_input_grad`` and ``conv2d_weight_grad`` (``graphnn/ir/ops/conv.py``).

Each is an implicit GEMM per group: no im2col matrix is built, the loads compute each element's
input coordinates from the tile's row and column indices (so the ``layout`` and ``columns``
attributes, the NumPy backend's im2col choices, are ignored here). With ``C = C_in / groups``
and ``O = C_out / groups``:

- ``conv2d``: rows are the ``N * Ho * Wo`` output positions, columns the group's ``O`` output
  channels, the contraction runs over ``(c, i, j)`` (``C * kh * kw``, the weight's own layout).
  Input row ``oy * stride - padding + i * dilation`` (likewise for columns); taps in the padding
  are masked to 0, as the reference's zero padding.
- ``conv2d_input_grad`` (a transposed convolution): rows are the ``N * H * W`` input positions,
  columns the group's ``C`` input channels, the contraction runs over ``(o, i, j)``. Position
  ``y`` takes tap ``i`` from output row ``(y + padding - i * dilation) / stride`` when that is
  a whole number inside ``[0, Ho)``; other taps (all but one in ``stride`` when stride > 1)
  are masked to 0.
- ``conv2d_weight_grad``: rows are the group's ``O`` output channels, columns ``(c, i, j)``, the
  contraction runs over the ``N * Ho * Wo`` output positions.

One program per ``BLOCK_M x BLOCK_N`` tile of one group's result (the tile, warps and stages
``autotune.choose``'s among the GEMM template's candidates, timed on a GPU as the GEMM's are,
else the ``Blocks`` tile); it loops over the contraction
in ``BLOCK_K`` steps of masked tiles (ragged edges add 0) and accumulates ``tl.dot`` in float32
(float64 for float64), with ``gemm.dot_precision``'s ``input_precision`` (float32 products
follow ``set_float32_matmul_precision`` as the matmuls do). The forward's epilogue adds the bias
(per output channel) and the residual and applies the activation through the elementwise table
(``gemm._activate``), then stores once, rounded to 16 bits for 16-bit results as the reference
rounds them. Operands are C-contiguous (the wrapper makes them so) and shapes are literals,
or with symbolic sizes (batch, image) expressions in the kernel's size arguments
(``kernels.size_text``), with a tile chosen without timing, as a symbolic GEMM's.
``interpreter_form`` upcasts 16-bit loads (the interpreter computes bfloat16 on bit patterns);
the GPU form feeds 16-bit tiles to ``tl.dot``, which accumulates in float32, so bfloat16 is
right by construction but not checked numerically here.
"""
from __future__ import annotations

import math

from .autotune import Config, choose, gpu_available, time_launch
from .gemm import _INPUT_PRECISION, _activate, _candidates, dot_precision, launch_options
from graphnn.ir.symbolic import Sym, hinted, same_size

from .kernels import DEFAULT_BLOCKS, Blocks, KernelBody, Launch, launch_of, product_text, \
    programs, size_text
from .ops import Unlowered, compute

CONV_OPS = frozenset({"conv2d", "conv2d_epilogue", "conv2d_input_grad", "conv2d_weight_grad"})


class _Geometry:
    """The sizes of one convolution: input ``(n, cin, h, w)``, weight ``(cout, cg, kh, kw)``,
    output ``(ho, wo)``, stride ``(sh, sw)``, padding ``(ph, pw)``, dilation ``(dh, dw)`` and
    ``groups`` (``og`` output channels per group)."""

    def __init__(self, x_shape, w_shape, out_hw, attrs):
        self.n, self.cin, self.h, self.w = x_shape
        self.cout, self.cg, self.kh, self.kw = w_shape
        self.ho, self.wo = out_hw
        self.sh, self.sw = attrs["stride"]
        self.ph, self.pw = attrs["padding"]
        self.dh, self.dw = attrs["dilation"]
        self.groups = attrs["groups"]
        self.og = self.cout // self.groups
        self.taps = self.kh * self.kw


def _split(body, lin: str, names, sizes) -> None:
    """Emit ``names[d] = `` the row-major index of flat index ``lin`` along each of ``sizes``."""
    for d, (name, size) in enumerate(zip(names, sizes)):
        inner = math.prod(sizes[d + 1:])
        index = lin if same_size(inner, 1) else f"{lin} // {size_text(inner)}"
        body.emit(f"{name} = {index if d == 0 else f'{index} % {size_text(size)}'}")


def _input_coordinates(body, g: _Geometry) -> None:
    """Emit the input row ``y`` and column ``x`` that output position (``oy``, ``ox``) reads
    at tap (``ti``, ``tj``): ``[rows, taps]`` tiles."""
    for name, out, tap, stride, padding, dilation in (("y", "oy", "ti", g.sh, g.ph, g.dh),
                                                       ("x", "ox", "tj", g.sw, g.pw, g.dw)):
        body.emit(f"{name} = ({out} * {size_text(stride)} - {size_text(padding)})[:, None] + "
                  f"({tap} * {size_text(dilation)})[None, :]")


def _window_mask(y: str, x: str, g: _Geometry) -> str:
    """The ``&`` terms (each with a leading `` & ``) keeping input row ``y`` and column ``x``
    inside the image; only padded sides can leave it."""
    terms = [f"({y} >= 0) & ({y} < {size_text(g.h)})"] * bool(g.ph) + \
        [f"({x} >= 0) & ({x} < {size_text(g.w)})"] * bool(g.pw)
    return "".join(f" & {t}" for t in terms)


class _Contraction:
    """One implicit GEMM's program layout: ``m x n`` tiles per group, ``k`` contracted, with
    ``config``'s tile (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``), warps and stages."""

    def __init__(self, body, m, n, k, config: Config, acc_type):
        self.body, self.m, self.n, self.k, self.acc_type = body, m, n, k, acc_type
        self.config = config
        tile = dict(config.blocks)
        self.tiles_m = programs(m, tile["BLOCK_M"])
        self.tiles_n = programs(n, tile["BLOCK_N"])

    def open(self) -> None:
        """Emit the program's group ``grp``, its ``rows``/``cols`` and their masks."""
        body, tiles = self.body, product_text(self.tiles_m, self.tiles_n)
        tiles = f"({tiles})" if isinstance(tiles, str) else tiles
        body.emit(f"pid = {body.program()}")
        body.emit(f"tile = pid % {tiles}")
        body.emit(f"grp = pid // {tiles}")
        body.emit(f"rows = (tile // {self.tiles_n}) * BLOCK_M + tl.arange(0, BLOCK_M)")
        body.emit(f"cols = (tile % {self.tiles_n}) * BLOCK_N + tl.arange(0, BLOCK_N)")
        body.emit(f"rmask = rows < {size_text(self.m)}")
        body.emit(f"cmask = cols < {size_text(self.n)}")

    def accumulate(self, tiles, exact=None) -> None:
        """Emit ``acc``: the loop over the contraction (``ks``, ``kmask``) in which
        ``tiles()`` emits the step's loads and returns the ``[BLOCK_M, BLOCK_K]`` and
        ``[BLOCK_K, BLOCK_N]`` tile variables. ``exact()``, if given, emits the step's sum
        without ``tl.dot``, taken instead where the second tile holds inf or NaN."""
        body = self.body
        body.emit(f"acc = tl.zeros([BLOCK_M, BLOCK_N], {self.acc_type})")
        body.emit(f"for start in range(0, {size_text(self.k)}, BLOCK_K):")
        body.indent += 1
        body.emit(f"ks = start + {body.arange('BLOCK_K')}")
        body.emit(f"kmask = ks < {size_text(self.k)}")
        a, b = tiles()
        if exact is not None:
            body.emit(f"if tl.sum(({b} * 0 != 0).to(tl.int32)) > 0:")
            body.indent += 1
            exact()
            body.indent -= 1
            body.emit("else:")
            body.indent += 1
        body.emit(f"acc = tl.dot({a}, {b}, acc, out_dtype={self.acc_type}"
                  f"{dot_precision(self.acc_type)})")
        body.indent -= 1 + (exact is not None)

    def launch(self, name, unit, groups) -> Launch:
        return launch_of(name, unit, self.body, product_text(groups, self.tiles_m, self.tiles_n),
                         dict(self.config.blocks), launch_options(self.config))


def _forward(c: _Contraction, g: _Geometry, node, unit) -> str:
    """Emit conv2d's contraction (rows: output positions; see the module docstring); the
    output offsets of the ``[BLOCK_M, BLOCK_N]`` tile."""
    body, x, w = c.body, node.inputs[0], node.inputs[1]
    _split(body, "rows", ["n", "oy", "ox"], [g.n, g.ho, g.wo])
    body.emit(f"base = n * {size_text(g.cin * g.h * g.w)} + "
              f"grp * {size_text(g.cg * g.h * g.w)}")

    def tiles():
        _split(body, "ks", ["ci", "ti", "tj"], [g.cg, g.kh, g.kw])
        _input_coordinates(body, g)
        a = body.load(f"in{unit.read_index(x)}",
                      f"base[:, None] + (ci * {size_text(g.h * g.w)})[None, :] + "
                      f"y * {size_text(g.w)} + x",
                      f"rmask[:, None] & kmask[None, :]{_window_mask('y', 'x', g)}", x.type.dtype)
        b = body.load(f"in{unit.read_index(w)}",
                      f"ks[:, None] + (grp * {size_text(g.og)} + cols)[None, :] * "
                      f"{size_text(g.cg * g.taps)}",
                      "kmask[:, None] & cmask[None, :]", w.type.dtype)
        return a, b
    c.accumulate(tiles)
    plane = size_text(g.ho * g.wo)
    return f"(n * {size_text(g.cout * g.ho * g.wo)} + rows % {plane})[:, None] + " \
           f"((grp * {size_text(g.og)} + cols) * {plane})[None, :]"


def _input_grad(c: _Contraction, g: _Geometry, node, unit) -> str:
    """Emit conv2d_input_grad's contraction (rows: input positions); the output offsets.

    A tap outside the output gradient is masked to 0 in its tile, but the reference never
    multiplies it, so where the weight tile holds inf or NaN (whose product with 0 is NaN) the
    step is summed one tap at a time over the valid taps only instead of by ``tl.dot``."""
    body, gy, w = c.body, node.inputs[0], node.inputs[1]
    _split(body, "rows", ["n", "py", "px"], [g.n, g.h, g.w])
    plane = size_text(g.ho * g.wo)
    body.emit(f"base = n * {size_text(g.cout * g.ho * g.wo)} + "
              f"grp * {size_text(g.og * g.ho * g.wo)}")

    def taps(k, v="", r="[:, None]", kr="[None, :]", kc="[:, None]", cc="[None, :]"):
        """The valid taps' mask, the gradient's and the weight's tile at contraction index
        ``k`` (variables suffixed ``v``): ``[rows, k]`` and ``[k, cols]`` tiles through the
        broadcast suffixes ``r``/``kr`` and ``kc``/``cc`` (all '' for one scalar ``k``)."""
        _split(body, k, [f"oc{v}", f"ti{v}", f"tj{v}"], [g.og, g.kh, g.kw])
        body.emit(f"ty{v} = (py + {size_text(g.ph)}){r} - (ti{v} * {size_text(g.dh)}){kr}")
        body.emit(f"tx{v} = (px + {size_text(g.pw)}){r} - (tj{v} * {size_text(g.dw)}){kr}")
        body.emit(f"oy{v} = ty{v}{f' // {size_text(g.sh)}' if g.sh > 1 else ''}")
        body.emit(f"ox{v} = tx{v}{f' // {size_text(g.sw)}' if g.sw > 1 else ''}")
        valid = f"rmask{r} & ({k} < {size_text(c.k)}){kr}"
        for t, o, stride, size in (("ty", "oy", g.sh, g.ho), ("tx", "ox", g.sw, g.wo)):
            whole = f" & ({t}{v} % {stride} == 0)" if stride > 1 else ""
            valid += f" & ({t}{v} >= 0){whole} & ({o}{v} < {size_text(size)})"
        valid = body.tmp(valid)
        a = body.load(f"in{unit.read_index(gy)}",
                      f"base{r} + (oc{v} * {plane}){kr} + oy{v} * {size_text(g.wo)} + ox{v}",
                      valid,
                      gy.type.dtype)
        b = body.load(f"in{unit.read_index(w)}",
                      f"((grp * {size_text(g.og)} + oc{v}) * {size_text(g.cg * g.taps)} + "
                      f"ti{v} * {size_text(g.kw)} + tj{v}){kc} + "
                      f"(cols * {size_text(g.taps)}){cc}",
                      f"({k} < {size_text(c.k)}){kc} & cmask{cc}",
                      w.type.dtype)
        return valid, a, b

    def exact():
        body.emit("for kk in range(0, BLOCK_K):")
        body.indent += 1
        valid, a, b = taps(body.index("(start + kk)"), "1", "", "", "", "")
        a, b = (body.cast(t, c.acc_type, c.acc_type) for t in (a, b))
        body.emit(f"acc += tl.where({valid}[:, None], {a}[:, None] * {b}[None, :], 0)")
        body.indent -= 1
    c.accumulate(lambda: taps("ks")[1:], exact)
    image = size_text(g.h * g.w)
    return f"(n * {size_text(g.cin * g.h * g.w)} + rows % {image})[:, None] + " \
           f"((grp * {size_text(g.cg)} + cols) * {image})[None, :]"


def _weight_grad(c: _Contraction, g: _Geometry, node, unit) -> str:
    """Emit conv2d_weight_grad's contraction (rows: the group's output channels, columns:
    ``(c, i, j)``); the output offsets."""
    body, x, gy = c.body, node.inputs[0], node.inputs[1]
    _split(body, "cols", ["ci", "ti", "tj"], [g.cg, g.kh, g.kw])
    plane = size_text(g.ho * g.wo)

    def tiles():
        _split(body, "ks", ["n", "oy", "ox"], [g.n, g.ho, g.wo])
        a = body.load(f"in{unit.read_index(gy)}",
                      f"((grp * {size_text(g.og)} + rows) * {plane})[:, None] + "
                      f"(n * {size_text(g.cout * g.ho * g.wo)} + ks % {plane})[None, :]",
                      "rmask[:, None] & kmask[None, :]", gy.type.dtype)
        _input_coordinates(body, g)
        b = body.load(f"in{unit.read_index(x)}",
                      f"(n * {size_text(g.cin * g.h * g.w)})[:, None] + "
                      f"((grp * {size_text(g.cg)} + ci) * {size_text(g.h * g.w)})[None, :] + "
                      f"y * {size_text(g.w)} + x",
                      f"kmask[:, None] & cmask[None, :]{_window_mask('y', 'x', g)}",
                      x.type.dtype)
        return a, b
    c.accumulate(tiles)
    return f"((grp * {size_text(g.og)} + rows) * {size_text(g.cg * g.taps)})[:, None] + " \
        "cols[None, :]"


def _epilogue(body, node, unit, offset, g: _Geometry, acc_type) -> str:
    """Emit the forward's bias (per output channel ``grp * og + cols``), residual and
    activation (``conv2d_epilogue``'s) on ``acc``; the variable holding the result."""
    attrs, fused = node.attrs, node.op == "conv2d_epilogue"
    rest = list(node.inputs[2:])
    has_bias = attrs["bias"] if fused else bool(rest)  # conv2d's third input is its bias
    bias = rest.pop(0) if has_bias else None
    residual = rest.pop(0) if fused and attrs["residual"] else None
    z = "acc"
    if bias is not None:
        v = body.load(f"in{unit.read_index(bias)}", f"grp * {size_text(g.og)} + cols", "cmask",
                      bias.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, acc_type, acc_type)}[None, :]")
    if residual is not None:
        v = body.load(f"in{unit.read_index(residual)}", offset,
                      "rmask[:, None] & cmask[None, :]", residual.type.dtype)
        z = body.tmp(f"{z} + {body.cast(v, acc_type, acc_type)}")
    return _activate(body, attrs["activation"], z, node.outputs[0]) if fused else z


class _Product:
    """A convolution node as an implicit GEMM: its ``_Geometry``, the per-group product's
    ``m``, ``n`` and ``k``, and the function emitting its contraction (``_forward``,
    ``_input_grad`` or ``_weight_grad``)."""

    def __init__(self, node):
        out, attrs = node.outputs[0], node.attrs
        if node.op == "conv2d_input_grad":
            gy, w = node.inputs
            g = self.geometry = _Geometry(out.type.shape, w.type.shape, gy.type.shape[2:], attrs)
            self.m, self.n, self.k, self.make = g.n * g.h * g.w, g.cg, g.og * g.taps, _input_grad
        elif node.op == "conv2d_weight_grad":
            x, gy = node.inputs
            g = self.geometry = _Geometry(x.type.shape, out.type.shape, gy.type.shape[2:], attrs)
            self.m, self.n, self.k, self.make = g.og, g.cg * g.taps, g.n * g.ho * g.wo, \
                _weight_grad
        else:
            x, w = node.inputs[:2]
            g = self.geometry = _Geometry(x.type.shape, w.type.shape, out.type.shape[2:], attrs)
            self.m, self.n, self.k, self.make = g.n * g.ho * g.wo, g.og, g.cg * g.taps, _forward


def _source(name: str, unit, product: _Product, config: Config, interpreter_form: bool) -> Launch:
    """The kernel of ``unit``'s convolution with ``config``'s tile, warps and stages."""
    node = unit.nodes[0]
    out = node.outputs[0]
    acc_type = compute(out.type.dtype)
    body = KernelBody(interpreter_form, unit)
    g = product.geometry
    c = _Contraction(body, product.m, product.n, product.k, config, acc_type)
    c.open()
    offset = product.make(c, g, node, unit)
    z = _epilogue(body, node, unit, offset, g, acc_type) if product.make is _forward else "acc"
    body.store("out0", offset, z, "rmask[:, None] & cmask[None, :]", out.type.dtype)
    return c.launch(name, unit, g.groups)


def conv(name: str, unit, blocks: Blocks, interpreter_form: bool) -> Launch:
    """A convolution kernel for ``unit`` (see the module docstring); ``Unlowered`` for other
    nodes and for operands of different or non-float dtypes. Its tile, warps and stages are
    ``autotune.choose``'s among the GEMM's candidates (``gemm._candidates``) fitted to the
    implicit GEMM: timed on a GPU for the GPU form of a non-empty convolution with the default
    blocks, else ``blocks``' tile with Triton's defaults."""
    if len(unit.nodes) != 1 or unit.nodes[0].op not in CONV_OPS:
        raise Unlowered("not one convolution")
    node = unit.nodes[0]
    out = node.outputs[0]
    if len({v.type.dtype for v in node.inputs + node.outputs}) != 1 or \
            not out.type.dtype.is_floating_point:
        raise Unlowered(f"{node.op} of {', '.join(v.type.dtype.name for v in node.inputs)}")
    product = _Product(node)
    empty = product.m * product.n * product.k * product.geometry.groups == 0
    symbolic = any(isinstance(s, Sym) for v in node.inputs + node.outputs for s in v.type.shape)
    timed = not interpreter_form and blocks == DEFAULT_BLOCKS and not empty and \
        not symbolic and gpu_available()

    def bench(config):
        return time_launch(_source(name, unit, product, config, False), unit, config)
    attrs = node.attrs
    key = {"op": node.op, "inputs": [[list(hinted(v.type.shape)), v.type.dtype.name]
                                     for v in node.inputs],
           "geometry": [list(hinted(attrs[k])) for k in ("stride", "padding", "dilation")],
           "groups": int(attrs["groups"]),
           "epilogue": [bool(attrs.get("bias")), bool(attrs.get("residual")),
                        str(attrs.get("activation", "none"))],
           "input_precision": _INPUT_PRECISION.get() if out.type.dtype.name == "float32"
           else None}
    config = choose("conv", key, _candidates(product, blocks), bench if timed else None)
    return _source(name, unit, product, config, interpreter_form)
