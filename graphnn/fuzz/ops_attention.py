"""Attention written many ways: the scale before or after the product (or folded into ``q``),
masks as ``masked_fill(-inf)``, additive float masks, bool masks through
``F.scaled_dot_product_attention``, causal masks from ``triu``/``tril``, multi-head reshapes,
grouped KV heads (by ``expand`` or ``enable_gqa``), and ``nn.MultiheadAttention``."""
from __future__ import annotations

from .families import Family, register
from .program import BATCH, ValueType

SCALES = ("after", "before", "q", "divide")
MASKS = ("none", "causal_fill", "bool_fill", "additive", "sdpa", "sdpa_causal", "sdpa_bool",
         "sdpa_additive")


@register
class Attention(Family):
    name, weight = "attention", 1.5

    def propose(self, b):
        x = b.pick(lambda t: t.dtype == b.dtype and len(t.shape) == 3
                   and BATCH not in t.shape[1:] and t.shape[2] in (2, 4, 6, 8))
        if x is None:
            if b.rng.random() < 0.5:
                return False
            x = b.new_input(ValueType((BATCH, b.rng.randint(1, 5), b.rng.choice((4, 8))),
                                      b.dtype))
        n, t_len, e = b.types[x].shape
        heads = b.rng.choice([h for h in (1, 2) if e % h == 0])
        kv_heads = b.rng.choice([1, heads]) if heads > 1 else 1
        s_len = t_len if b.rng.random() < 0.6 else b.rng.randint(1, 5)
        if b.kind == "module" and b.rng.random() < 0.3:
            return self._module(b, x, n, t_len, s_len, e, heads)
        key = b.value_of((n, s_len, e * kv_heads // heads), b.dtype) \
            if s_len != t_len or kv_heads != heads or b.rng.random() < 0.5 else x
        value = b.value_of(b.types[key].shape, b.dtype) if b.rng.random() < 0.7 else key
        mask_form = b.rng.choice(MASKS)
        if mask_form in ("causal_fill", "sdpa_causal") and s_len != t_len:
            mask_form = "none"
        reads = [x, key, value]
        if mask_form in ("bool_fill", "sdpa_bool"):
            reads.append(b.new_input(ValueType((t_len, s_len), "bool")))
        elif mask_form in ("additive", "sdpa_additive"):
            reads.append(b.value_of((t_len, s_len), b.dtype, requires_grad=False))
        attrs = {"heads": heads, "kv_heads": kv_heads, "mask": mask_form,
                 "scale": b.rng.choice(SCALES), "gqa": b.rng.choice(["expand", "enable_gqa"]),
                 "explicit_scale": b.rng.choice([None, 0.5])}
        b.emit(self.name, reads, attrs, [b.types[x]])
        return True

    def _module(self, b, x, n, t_len, s_len, e, heads):
        layer = b.new_layer("attention_layer", {"e": e, "heads": heads})
        key = x if s_len == t_len and b.rng.random() < 0.5 else \
            b.value_of((n, s_len, e), b.dtype)
        reads = [layer, x, key, key]
        mask = b.rng.choice(["none", "bool", "causal"] if s_len == t_len else ["none", "bool"])
        if mask == "bool":
            reads.append(b.new_input(ValueType((t_len, s_len), "bool")))
        b.emit(self.name, reads, {"mask": mask, "module": True},
               [ValueType((n, t_len, e), b.dtype)])
        return True

    def render(self, stmt):
        if stmt.attrs.get("module"):
            return _render_module_call(stmt)
        return _render_attention(stmt)


@register
class AttentionLayer(Family):
    name, weight = "attention_layer", 0.0  # built by Attention

    def render_layer(self, layer):
        return (f"T.nn.MultiheadAttention({layer.attrs['e']}, {layer.attrs['heads']}, "
                f"batch_first=True)")


def _render_module_call(stmt):
    layer, q, k, v = stmt.reads[:4]
    out = stmt.outs[0][0]
    mask = stmt.attrs["mask"]
    if mask == "bool":
        extra = f", attn_mask={stmt.reads[4]}"
    elif mask == "causal":
        extra = (f", attn_mask=T.triu(T.ones({q}.shape[1], {q}.shape[1], dtype=T.bool), "
                 f"diagonal=1)")
    else:
        extra = ""
    return [f"{out} = {layer}({q}, {k}, {v}, need_weights=False{extra})[0]"]


def _render_attention(stmt):
    """Source for one attention statement (``out`` is its result name)."""
    s = stmt.attrs
    q, k, v = stmt.reads[:3]
    mask = stmt.reads[3] if len(stmt.reads) > 3 else None
    out = stmt.outs[0][0]
    h, hkv = s["heads"], s["kv_heads"]
    lines = [f"{out}_n, {out}_t, {out}_e = {q}.shape",
             f"{out}_d = {out}_e // {h}",
             f"{out}_q = {q}.reshape({out}_n, {out}_t, {h}, {out}_d).transpose(1, 2)",
             f"{out}_k = {k}.reshape({out}_n, {k}.shape[1], {hkv}, {out}_d).transpose(1, 2)",
             f"{out}_v = {v}.reshape({out}_n, {v}.shape[1], {hkv}, {out}_d).transpose(1, 2)"]
    sdpa = s["mask"].startswith("sdpa")
    if hkv != h and not (sdpa and s["gqa"] == "enable_gqa"):
        for name in ("k", "v"):
            lines.append(f"{out}_{name} = {out}_{name}[:, :, None].expand({out}_n, {hkv}, "
                         f"{h // hkv}, {out}_{name}.shape[2], {out}_d).reshape({out}_n, {h}, "
                         f"{out}_{name}.shape[2], {out}_d)")
    if sdpa:
        args = ""
        if s["mask"] == "sdpa_causal":
            args += ", is_causal=True"
        elif mask is not None:
            args += f", attn_mask={mask}"
        if s["explicit_scale"] is not None:
            args += f", scale={s['explicit_scale']!r}"
        if hkv != h and s["gqa"] == "enable_gqa":
            args += ", enable_gqa=True"
        lines.append(f"{out}_o = F.scaled_dot_product_attention({out}_q, {out}_k, {out}_v"
                     f"{args})")
    else:
        scale = s["explicit_scale"] if s["explicit_scale"] is not None else None
        factor = repr(scale) if scale is not None else f"{out}_d ** -0.5"
        kt = f"{out}_k.transpose(-2, -1)"
        form = s["scale"]
        if form == "before":
            lines.append(f"{out}_s = ({out}_q * {factor}) @ {kt}")
        elif form == "q":
            lines.append(f"{out}_s = {out}_q @ ({kt} * {factor})")
        elif form == "divide" and scale is None:
            lines.append(f"{out}_s = ({out}_q @ {kt}) / ({out}_d ** 0.5)")
        else:
            lines.append(f"{out}_s = ({out}_q @ {kt}) * {factor}")
        if s["mask"] == "causal_fill":
            lines.append(f"{out}_s = {out}_s.masked_fill(T.triu(T.ones({out}_t, {out}_t, "
                         f"dtype=T.bool), diagonal=1), float('-inf'))")
        elif s["mask"] == "bool_fill":
            lines.append(f"{out}_s = {out}_s.masked_fill({mask}, float('-inf'))")
        elif s["mask"] == "additive":
            lines.append(f"{out}_s = {out}_s + {mask}")
        lines.append(f"{out}_o = F.softmax({out}_s, dim=-1) @ {out}_v")
    lines.append(f"{out} = {out}_o.transpose(1, 2).reshape({out}_n, {out}_t, {out}_e)")
    return lines
