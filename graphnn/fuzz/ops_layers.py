"""Convolution and pooling with random options, and the layer families of Module programs:
``Linear``, ``Conv2d``, ``LayerNorm``, ``RMSNorm``, ``BatchNorm2d``, ``Embedding``,
``Dropout`` and raw ``Parameter``s. Layers are built in ``__init__``; their values are loaded
from the program's arrays afterwards (``values.load_state``), so both libraries get the same
weights."""
from __future__ import annotations

from graphnn.ir.ops.pool import has_outside_windows

from .families import Family, dims_text, lhs, register
from .program import BATCH, ValueType


def _out_size(size, kernel, stride, padding, dilation=1, ceil_mode=False):
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    if span < 0:
        return 0
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def image_value(b, dtype=None):
    """A rank-4 value (N, C, H, W) with int C, H, W, or a new input."""
    dtype = dtype or b.dtype
    name = b.pick(lambda t: t.dtype == dtype and len(t.shape) == 4
                  and BATCH not in t.shape[1:])
    if name is None or b.rng.random() < 0.2:
        shape = (b.rng.choice([BATCH, 1, 2]), b.rng.choice([1, 2, 3, 4]),
                 b.rng.randint(3, 7), b.rng.randint(3, 7))
        name = b.new_input(ValueType(shape, dtype))
    return name


def _conv_options(b, c, h, w):
    """Random (out_channels, kernel, stride, padding, dilation, groups, out_h, out_w); the
    padding is an int or ``"same"`` (stride 1 only, as in PyTorch)."""
    for _ in range(10):
        groups = b.rng.choice([g for g in (1, 2, 3) if c % g == 0])
        out_c = groups * b.rng.randint(1, 3)
        kernel = (b.rng.randint(1, 3), b.rng.randint(1, 3))
        stride = b.rng.choice([1, 1, 2])
        padding = b.rng.choice([0, 0, 1, "same"] if stride == 1 else [0, 0, 1])
        dilation = b.rng.choice([1, 1, 2])
        if padding == "same":
            return out_c, kernel, stride, padding, dilation, groups, h, w
        oh = _out_size(h, kernel[0], stride, padding, dilation)
        ow = _out_size(w, kernel[1], stride, padding, dilation)
        if oh >= 1 and ow >= 1:
            return out_c, kernel, stride, padding, dilation, groups, oh, ow
    return None


def conv_call(b, x, layer_chance=0.7, bias_chance=0.5):
    """Operands and attrs of a random convolution of the image ``x``: ``([self.mK, x], {})``
    for an ``nn.Conv2d`` built in a Module (some with a non-zero ``padding_mode``, which pads
    by ``pad``) or ``([x, weight(, bias)], attrs)`` for ``F.conv2d``; and its result type.
    None when no option fits ``x``."""
    n, c, h, w = b.types[x].shape
    options = _conv_options(b, c, h, w)
    if options is None:
        return None
    out_c, kernel, stride, padding, dilation, groups, oh, ow = options
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    out = ValueType((n, out_c, oh, ow), b.types[x].dtype)
    if b.kind == "module" and b.rng.random() < layer_chance:
        mode = "zeros"
        if padding == 1 and min(h, w) >= 2 and b.rng.random() < 0.4:
            mode = b.rng.choice(["reflect", "replicate", "circular"])
        layer = b.new_layer("conv_layer", {**attrs, "in": c, "out": out_c, "kernel": kernel,
                                           "bias": b.rng.random() < 0.7, "padding_mode": mode})
        return [layer, x], {}, out
    reads = [x, b.value_of((out_c, c // groups) + kernel, b.types[x].dtype)]
    if b.rng.random() < bias_chance:
        reads.append(b.value_of((out_c,), b.types[x].dtype))
    return reads, attrs, out


def conv_text(reads, attrs) -> str:
    """The expression of a convolution drawn by ``conv_call``."""
    if reads[0].startswith("self."):
        return f"{reads[0]}({reads[1]})"
    bias = reads[2] if len(reads) > 2 else "None"
    return (f"F.conv2d({reads[0]}, {reads[1]}, {bias}, stride={attrs['stride']}, "
            f"padding={attrs['padding']!r}, dilation={attrs['dilation']}, "
            f"groups={attrs['groups']})")


@register
class Conv(Family):
    """``F.conv2d`` with a weight (and bias) read from values; in Modules, an ``nn.Conv2d``."""
    name, weight = "conv", 1.2

    def propose(self, b):
        drawn = conv_call(b, image_value(b))
        if drawn is None:
            return False
        reads, attrs, out = drawn
        b.emit(self.name, reads, attrs, [out])
        return True

    def render(self, stmt):
        return [f"{lhs(stmt)} = {conv_text(stmt.reads, stmt.attrs)}"]


@register
class ConvLayer(Family):
    name, weight = "conv_layer", 0.0  # built by Conv

    def render_layer(self, layer):
        a = layer.attrs
        return (f"T.nn.Conv2d({a['in']}, {a['out']}, {tuple(a['kernel'])}, stride={a['stride']}, "
                f"padding={a['padding']!r}, dilation={a['dilation']}, groups={a['groups']}, "
                f"bias={a['bias']}, padding_mode={a.get('padding_mode', 'zeros')!r})")


@register
class Pool(Family):
    """``max_pool2d`` (dilation, ceil_mode), ``avg_pool2d`` (count_include_pad, ceil_mode)
    and ``adaptive_avg_pool2d``."""
    name, weight = "pool", 1.0

    def propose(self, b):
        x = image_value(b)
        n, c, h, w = b.types[x].shape
        form = b.rng.choice(["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
        if form == "adaptive_avg_pool2d":
            size = (b.rng.choice([1] + [d for d in (2, 3) if h % d == 0]),
                    b.rng.choice([1] + [d for d in (2, 3) if w % d == 0]))
            b.emit(self.name, [x], {"form": form, "size": size},
                   [ValueType((n, c) + size, b.types[x].dtype)])
            return True
        kernel = b.rng.randint(1, 3)
        stride = b.rng.choice([None, 1, 2])
        padding = b.rng.randint(0, kernel // 2)
        dilation = b.rng.choice([1, 1, 2]) if form == "max_pool2d" else 1
        ceil_mode = b.rng.random() < 0.3
        s = stride or kernel
        oh = _out_size(h, kernel, s, padding, dilation, ceil_mode)
        ow = _out_size(w, kernel, s, padding, dilation, ceil_mode)
        if oh < 1 or ow < 1:
            return False
        if form == "max_pool2d" and has_outside_windows(
                (1, 1, h, w), (kernel,) * 2, (s,) * 2, (padding,) * 2, (dilation,) * 2,
                (oh, ow)):
            return False  # a window wholly in the padding: no gradient (docs/fuzz.md)
        attrs = {"form": form, "kernel": kernel, "stride": stride, "padding": padding,
                 "dilation": dilation, "ceil_mode": ceil_mode,
                 "count_include_pad": b.rng.random() < 0.5}
        b.emit(self.name, [x], attrs, [ValueType((n, c, oh, ow), b.types[x].dtype)])
        return True

    def render(self, stmt):
        s, x = stmt.attrs, stmt.reads[0]
        if s["form"] == "adaptive_avg_pool2d":
            return [f"{lhs(stmt)} = F.adaptive_avg_pool2d({x}, {tuple(s['size'])})"]
        extra = f", dilation={s['dilation']}" if s["form"] == "max_pool2d" else \
            f", count_include_pad={s['count_include_pad']}"
        return [f"{lhs(stmt)} = F.{s['form']}({x}, {s['kernel']}, stride={s['stride']}, "
                f"padding={s['padding']}, ceil_mode={s['ceil_mode']}{extra})"]


@register
class Layer(Family):
    """A call of a layer built in ``__init__``: Linear, LayerNorm, RMSNorm, BatchNorm2d,
    Embedding or Dropout."""
    name, weight, module_only = "layer", 2.5, True

    def propose(self, b):
        kind = b.rng.choice(["Linear", "Linear", "LayerNorm", "RMSNorm", "BatchNorm2d",
                             "Embedding", "Dropout"])
        if kind == "Embedding":
            n, dim = b.rng.randint(2, 8), b.dim()
            idx = b.pick(lambda t: t.dtype == "int64") if b.rng.random() < 0.3 else None
            if idx is not None:  # an int value of any range: taken modulo n
                layer = b.new_layer(self.name, {"kind": kind, "n": n, "dim": dim})
                b.emit(self.name, [layer, idx], {"modulo": n},
                       [ValueType(b.types[idx].shape + (dim,), b.dtype)])
                return True
            idx = b.index_input(b.shape(b.rng.randint(1, 2)), n)
            layer = b.new_layer(self.name, {"kind": kind, "n": n, "dim": dim})
            b.emit(self.name, [layer, idx], {}, [ValueType(b.types[idx].shape + (dim,),
                                                           b.dtype)])
            return True
        if kind == "BatchNorm2d":
            x = image_value(b)
            n, c, h, w = b.types[x].shape
            if n != BATCH and n * h * w < 2:
                return False
            layer = b.new_layer(self.name, {"kind": kind, "n": c})
            b.emit(self.name, [layer, x], {}, [b.types[x]])
            return True
        x = b.pick(lambda t: t.dtype == b.dtype and len(t.shape) >= 1 and t.shape[-1] != BATCH)
        if x is None:
            return False
        t = b.types[x]
        attrs = {"kind": kind, "n": t.shape[-1]}
        out = t
        if kind == "Linear":
            attrs.update(out=b.dim(), bias=b.rng.random() < 0.8)
            out = ValueType(t.shape[:-1] + (attrs["out"],), t.dtype)
        elif kind == "LayerNorm":
            if t.shape[-1] == 1:
                return False  # one element: see Normalize
            attrs.update(affine=b.rng.random() < 0.7)
        elif kind == "Dropout":
            attrs.update(p=b.rng.choice([0.0, 0.3]))
            b.random = b.random or attrs["p"] > 0
        layer = b.new_layer(self.name, attrs)
        b.emit(self.name, [layer, x], {}, [out])
        return True

    def render(self, stmt):
        layer, x = stmt.reads
        if "modulo" in stmt.attrs:
            x = f"{x} % {stmt.attrs['modulo']}"
        return [f"{lhs(stmt)} = {layer}({x})"]

    def render_layer(self, layer):
        a = layer.attrs
        return {
            "Linear": lambda: f"T.nn.Linear({a.get('n')}, {a.get('out')}, bias={a.get('bias')})",
            "LayerNorm": lambda: f"T.nn.LayerNorm({a['n']}, elementwise_affine={a.get('affine')})",
            "RMSNorm": lambda: f"T.nn.RMSNorm({a['n']}, eps=1e-5)",
            "BatchNorm2d": lambda: f"T.nn.BatchNorm2d({a['n']})",
            "Embedding": lambda: f"T.nn.Embedding({a['n']}, {a.get('dim')})",
            "Dropout": lambda: f"T.nn.Dropout({a.get('p')!r})",
        }[a["kind"]]()


@register
class Param(Family):
    """A raw ``nn.Parameter`` combined with a value (scale, shift or a matrix product)."""
    name, weight, module_only = "param", 1.0, True

    def propose(self, b):
        x = b.pick(lambda t: t.dtype == b.dtype and len(t.shape) >= 1 and t.shape[-1] != BATCH)
        if x is None:
            return False
        t = b.types[x]
        form = b.rng.choice(["mul", "add", "matmul"])
        if form == "matmul":
            shape = (t.shape[-1], b.dim())
            out = t.shape[:-1] + shape[1:]
        else:
            shape = tuple(d for d in t.shape[-b.rng.randint(1, len(t.shape)):])
            if BATCH in shape:
                shape = t.shape[-1:]
            out = t.shape
        param = b.new_layer(self.name, {"shape": shape})
        b.emit(self.name, [param, x], {"form": form}, [ValueType(out, t.dtype)])
        return True

    def render(self, stmt):
        p, x = stmt.reads
        op = {"mul": "*", "add": "+", "matmul": "@"}[stmt.attrs["form"]]
        return [f"{lhs(stmt)} = {x} {op} {p}"]

    def render_layer(self, layer):
        return f"T.nn.Parameter(T.zeros({dims_text(layer.attrs['shape'])}))"
