"""What generated Triton modules call at load and run time (imported as ``_rt``): the graph
they were made from, its constants on the device, host execution of the ops that have no
Triton template yet, and fresh device tensors."""
from __future__ import annotations

import numpy as np

from graphnn.ir import get_op, parse
from graphnn.ir.dtypes import as_dtype
from graphnn.ir.errors import IndexError_
from graphnn.ir.graph import map_structure
from graphnn.ir.ops.creation import arange_bounds
from graphnn.ir.ops.shape import pad_pairs, pad_source_index

from .device import DEVICE, require_torch, torch_dtype

torch = require_torch()


def parse_graph(text: str):
    """The graph a module was generated from (its text is embedded through ``repr``)."""
    return parse(text)


class Constants:
    """The graph's constants as device tensors, uploaded at first use (importing a module
    touches no device), then kept: ``constants[i]`` is constant number ``i``."""

    def __init__(self, graph):
        self.graph = graph
        self.arrays: dict = {}

    def __getitem__(self, index: int):
        array = self.arrays.get(index)
        if array is None:
            array = self.arrays[index] = DEVICE.upload(np.asarray(self.graph.consts[index].data))
        return array


def host_op(graph, index: int):
    """A function running node ``index`` of ``graph`` with its op's reference implementation
    on host arrays; it returns a tuple of host arrays of exactly the node's result types."""
    node = graph.nodes[index]
    op, attrs, types = get_op(node.op), dict(node.attrs), [v.type for v in node.outputs]

    def run(*arrays):
        return op.run(list(arrays), attrs, types)
    run.__name__ = f"host_{node.op}"
    return run


def host(array) -> np.ndarray:
    """A host copy of a device tensor."""
    return DEVICE.download(array)


def device(array: np.ndarray):
    """A device copy of a host array."""
    return DEVICE.upload(array)


def empty(shape: tuple, dtype_name: str):
    """A new contiguous device tensor."""
    return torch.empty(shape, dtype=torch_dtype(as_dtype(dtype_name)), device=DEVICE.place())


def full(shape: tuple, value, dtype_name: str):
    """A new device tensor holding ``value`` (already converted to the dtype) everywhere."""
    return torch.full(shape, value, dtype=torch_dtype(as_dtype(dtype_name)),
                      device=DEVICE.place())


def arange(start, end, step, dtype_name: str):
    """The ``arange`` op's values on the device for an integer dtype (``end`` evaluated by the
    wrapper: a size at the call's value): an int64 ``torch.arange`` times ``step`` plus
    ``start``, converted, wrapping as the reference's int64 arithmetic does."""
    dtype = as_dtype(dtype_name)
    start, step, count = arange_bounds(start, end, step, dtype)
    values = start + step * torch.arange(count, dtype=torch.int64, device=DEVICE.place())
    return values.to(torch_dtype(dtype))


def cat(parts: tuple, dim: int, dtype_name: str):
    """The device tensors ``parts`` concatenated along ``dim`` into a new one of the dtype
    ``dtype_name`` (each converted first, as the reference converts to the promoted dtype)."""
    dtype = torch_dtype(as_dtype(dtype_name))
    return torch.cat([p.to(dtype) for p in parts], dim)


def pad(x, pads: tuple, mode: str, value):
    """``x`` padded on the device as the ``pad`` op's reference pads (``pads``: PyTorch's list,
    last dim first): ``constant`` fills a new tensor with ``value`` (already converted to x's
    dtype) and copies ``x`` inside; the other modes gather each padded dim's source positions
    (``pad_source_index``), a copy of values either way."""
    pairs = pad_pairs(x.ndim, pads)
    if mode == "constant":
        shape = list(x.shape)
        for d, lo, hi in pairs:
            shape[d] += lo + hi
        out = torch.full(shape, value, dtype=x.dtype, device=x.device)
        inside = [slice(None)] * x.ndim
        for d, lo, _ in pairs:
            inside[d] = slice(lo, lo + x.shape[d])
        out[tuple(inside)] = x
        return out
    for d, lo, hi in pairs:
        index = pad_source_index(x.shape[d], lo, hi, mode)
        x = torch.index_select(x, d, torch.as_tensor(index, device=x.device))
    return x.contiguous()


def slice_scatter(base, src, key: tuple):
    """A copy of the device tensor ``base`` with ``src`` (converted to base's dtype, as the
    reference's assignment converts it) written at ``key`` (positive-step slices)."""
    out = base.clone()
    out[key] = src.to(out.dtype)
    return out


def check_indices(index, size: int, op: str, dim: int) -> None:
    """Raise the reference's ``IndexError`` when the device tensor ``index`` holds a value
    outside ``[-size, size)`` (indices into a dim ``dim`` of that size): reads its two
    extremes from the device."""
    if not index.numel():
        return
    low, high = int(index.min()), int(index.max())
    if high >= size or low < -size:
        raise IndexError_(f"{op}: index {high if high >= size else low} is out of bounds for "
                          f"dimension {dim} with size {size}")


def outputs(graph, values: dict):
    """``graph.outputs`` with each value replaced by ``values[its name]``."""
    return map_structure(lambda v: values[v.name], graph.outputs)
