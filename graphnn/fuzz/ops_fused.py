"""Epilogue chains: a convolution or a matrix product followed directly by a bias add, a
residual add and an activation, written as one expression so that no intermediate is read
elsewhere and the compiler fuses the chain (``conv2d_epilogue``, ``matmul_epilogue``).

Forms: ``F.conv2d`` or an ``nn.Conv2d``; ``F.linear``, ``@`` or an ``nn.Linear``; a bias
added as ``[C, 1, 1]``/``[1, C, 1, 1]`` after a conv without one, or as ``[N]`` after ``@``;
a residual of the result's shape; then relu, gelu (exact or tanh), silu (``F.silu`` or
written ``h * sigmoid(h)``), tanh, or none (when something was added).
"""
from __future__ import annotations

from .families import Family, lhs, register
from .ops_layers import conv_call, conv_text, image_value
from .program import BATCH, ValueType

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "silu_manual", "tanh", "none")
ACTIVATION_TEXT = {"relu": "F.relu({h})", "gelu": "F.gelu({h})",
                   "gelu_tanh": "F.gelu({h}, approximate='tanh')", "silu": "F.silu({h})",
                   "tanh": "T.tanh({h})", "none": "{h}"}


@register
class Epilogue(Family):
    name, weight = "epilogue", 1.5

    def propose(self, b):
        if b.rng.random() < 0.5:
            drawn = self._conv(b)
        else:
            drawn = self._product(b)
        if drawn is None:
            return False
        reads, attrs, out = drawn
        if b.rng.random() < 0.5:
            reads.append(b.value_of(out.shape, out.dtype))
            attrs["residual"] = True
        extras = attrs.get("bias_form") or attrs.get("residual")
        attrs["act"] = b.rng.choice(ACTIVATIONS if extras else ACTIVATIONS[:-1])
        b.emit(self.name, reads, attrs, [out])
        return True

    @staticmethod
    def _conv(b):
        drawn = conv_call(b, image_value(b), layer_chance=0.5, bias_chance=0.3)
        if drawn is None:
            return None
        reads, attrs, out = drawn
        attrs = {"anchor": "conv", **attrs}
        if len(reads) == 2 and not reads[0].startswith("self.") and b.rng.random() < 0.6:
            attrs["bias_form"] = b.rng.choice(["reshape", "none_index", "view4"])
            reads.append(b.value_of((out.shape[1],), out.dtype))
        return reads, attrs, out

    @staticmethod
    def _product(b):
        x = b.pick_float(lambda t: t.dtype == b.dtype and len(t.shape) >= 1
                         and t.shape[-1] != BATCH)
        if x is None:  # rank >= 2: only dim 0 may be "B"
            x = b.new_input(ValueType(b.shape(b.rng.randint(2, 3)), b.dtype))
        t = b.types[x]
        k, n = t.shape[-1], b.dim()
        out = ValueType(t.shape[:-1] + (n,), t.dtype)
        form = b.rng.choice(["linear", "matmul"] + (["layer"] if b.kind == "module" else []))
        if form == "layer":
            layer = b.new_layer("layer", {"kind": "Linear", "n": k, "out": n,
                                          "bias": b.rng.random() < 0.8})
            return [layer, x], {"anchor": "layer"}, out
        reads = [x, b.value_of((n, k) if form == "linear" else (k, n), t.dtype)]
        attrs = {"anchor": form}
        if b.rng.random() < 0.6:
            reads.append(b.value_of((n,), t.dtype))
            attrs["bias_form"] = "operand" if form == "linear" else "add"
        return reads, attrs, out

    def render(self, stmt):
        s, r = stmt.attrs, list(stmt.reads)
        residual = r.pop() if s.get("residual") else None
        anchor = s["anchor"]
        bias_form = s.get("bias_form")
        if anchor == "conv":
            bias = r.pop() if bias_form else None
            h = conv_text(r, s)
            if bias_form == "reshape":
                h += f" + {bias}.reshape(-1, 1, 1)"
            elif bias_form == "none_index":
                h += f" + {bias}[:, None, None]"
            elif bias_form == "view4":
                h += f" + {bias}.view(1, -1, 1, 1)"
        elif anchor == "layer":
            h = f"{r[0]}({r[1]})"
        elif anchor == "linear":
            h = f"F.linear({', '.join(r)})"
        else:
            h = f"{r[0]} @ {r[1]}" + (f" + {r[2]}" if bias_form else "")
        if residual is not None:
            h += f" + {residual}"
        out = lhs(stmt)
        if s["act"] == "silu_manual":
            return [f"{out}_h = {h}", f"{out} = {out}_h * T.sigmoid({out}_h)"]
        return [f"{out} = " + ACTIVATION_TEXT[s["act"]].format(h=h)]
