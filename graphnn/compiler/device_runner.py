"""The ``cuda`` device's runtime for eager tensors: the Triton backend, one op at a time.

The frontend holds device tensors but may not import the backends; ``register()`` (called when
``graphnn`` is imported) gives it ``TritonRuntime`` for ``cuda`` (``frontend/device.py`` lists
what a runtime does). Each eager op on device tensors becomes a one-node graph, built for the
Triton backend as an inference kernel (``stages.build``: the pass pipeline, decomposition of
what the backend does not lower, a schedule) and kept by its IR text, which names the op, its
attributes and its input types exactly (a tuple of the same, made without building the graph,
finds it first): the same op on the same types reuses the kernel, and
the kernel cache (memory and disk) is shared with compiled code. The kernel runs on the device
arrays (torch tensors) and returns device arrays.

Random ops reach the device with their seed as an input (a 0-d int64 device tensor, the seed
attribute None), never as an attribute: the key holds no seed, so every draw of one op, shape
and dtype reuses one kernel (``codegen/triton/random.py``), which reads the seed at run time.
``draw`` is that draw for compiled code's random inputs (``random_inputs.py``), the same kernel
as an eager draw.

The device is the Triton backend's: ``cuda`` where torch sees a GPU; with
``TRITON_INTERPRET=1`` (and triton installed), torch CPU tensors run by Triton's interpreter,
so the device path runs without a GPU. torch is imported only when the device is first used.
"""
from __future__ import annotations

import importlib.util
import os
import threading

from ..codegen.triton import BACKEND
from ..codegen.triton.device import DEVICE, interpreted
from ..codegen.triton.gemm import with_float32_matmul_precision
from ..frontend.device import device, register_device_runner
from ..frontend.matmul_precision import get_float32_matmul_precision
from ..ir.graph import Graph, flatten_structure, map_structure
from ..ir.types import TensorType
from ..runtime.artifact import CompiledArtifact
from . import stages

_KEPT = 4096  # kernels kept before the memo starts again (shapes can vary without end)


class TritonRuntime:
    """Device arrays are the Triton backend's (``codegen/triton/device.py``)."""

    def __init__(self):
        self._artifacts: dict = {}  # one-op graph text, or its _fast_key -> CompiledArtifact
        self._lock = threading.Lock()

    def available(self) -> bool:
        """torch sees a GPU, or Triton's interpreter is on with triton installed."""
        if importlib.util.find_spec("torch") is None:
            return False
        if interpreted():
            return importlib.util.find_spec("triton") is not None
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # cheap: skip importing torch
            return False
        import torch
        return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None

    def unavailable_reason(self) -> str:
        if importlib.util.find_spec("torch") is None or \
                importlib.util.find_spec("triton") is None:
            return "CUDA tensors need torch and triton (pip install 'graphnn[triton]')"
        return ("torch sees no CUDA GPU (set TRITON_INTERPRET=1 to run the cuda device on the "
                "CPU under Triton's interpreter)")

    def device_count(self) -> int:
        if interpreted():
            return 1
        import torch
        return torch.cuda.device_count()

    def upload(self, host):
        return DEVICE.upload(host)

    def download(self, array):
        return DEVICE.download(array)

    def device_of(self, array):
        """cuda:0 for a torch tensor (the one device used so far), else None."""
        if not type(array).__module__.startswith("torch"):
            return None
        import torch
        return device("cuda", 0) if isinstance(array, torch.Tensor) else None

    def run(self, op, arrays, attrs, out_types) -> list:
        """Registry op ``op`` on device arrays: a view op's torch view of its input (as the
        host views: ``_torch_view``), else its kernel's device results, in order."""
        if op.view:
            view = _torch_view(op.name, arrays[0], attrs)
            if view is not None:
                return [view]
        artifact = self._artifact(op, [DEVICE.type_of(a) for a in arrays], attrs, out_types)
        inputs = [a.contiguous() for a in arrays]
        results = artifact.launch(inputs, {}, _to_host)
        return [r.contiguous() for r in flatten_structure(results)]

    def shares_memory(self, a, b) -> bool:
        return DEVICE.owner(a) == DEVICE.owner(b)

    def overlapping(self, array) -> bool:
        return any(stride == 0 and size > 1 for size, stride in zip(array.shape, array.stride()))

    def _artifact(self, op, types, attrs, out_types) -> CompiledArtifact:
        """The op's kernel for these types and attributes under the current float32 matmul
        precision (TF32 dots unless it is "highest", as compiled code)."""
        precision = get_float32_matmul_precision()
        key = _fast_key(op, types, attrs)
        key = (precision, key) if key is not None else None
        artifact = self._artifacts.get(key) if key is not None else None
        if artifact is None:
            graph = _one_op_graph(op, types, attrs, out_types)
            key = key if key is not None else (precision, str(graph))
            artifact = self._artifacts.get(key)
        if artifact is None:
            backend = with_float32_matmul_precision(BACKEND, precision)
            stage = stages.build(graph, "inference", backend).stages["inference"]
            artifact = CompiledArtifact(stage.graph, backend, plan=stage.plan, options="eager",
                                        name=graph.name, schedule=stage.schedule)
            with self._lock:
                if len(self._artifacts) >= _KEPT:
                    self._artifacts.clear()
                self._artifacts[key] = artifact
        return artifact


def _torch_view(name: str, array, attrs: dict):
    """View op ``name`` of the torch tensor ``array``, as ``trace_state.apply_view`` makes it
    of a host array: a view of its memory, or for a reshape its strides do not allow, a copy;
    None for a slice with a step below 1 (torch has no such views: a kernel copies it)."""
    if name == "detach":
        return array.detach()
    if name == "slice":
        if any(step < 1 for step in attrs["steps"]):
            return None
        return array[tuple(slice(*b) for b in zip(attrs["starts"], attrs["stops"],
                                                  attrs["steps"]))]
    if name == "permute":
        return array.permute(tuple(attrs["dims"]))
    if name == "expand":
        return array.expand(tuple(attrs["shape"]))
    try:
        return array.view(tuple(attrs["shape"]))
    except RuntimeError:  # the strides do not allow it: a copy, as NumPy's reshape makes
        return array.reshape(tuple(attrs["shape"]))


def _fast_key(op, types, attrs):
    """A key as exact as the one-op graph's text, without building it: the op, the input types
    and the attributes, floats by ``repr`` (``-0.0`` and ``0.0`` differ, NaN equals NaN) and
    every value with its type (``True``, ``1`` and ``1.0`` differ). None when an attribute
    cannot be a key (an array): the caller keys by the text."""
    try:
        key = (op.name, tuple((tuple(t.shape), t.dtype) for t in types),
               tuple((k, _attr_key(v)) for k, v in attrs.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _attr_key(value):
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_attr_key(v) for v in value)
    return type(value), repr(value) if isinstance(value, float) else value


def _one_op_graph(op, types, attrs, out_types) -> Graph:
    """``op`` alone: inputs ``x0..`` of ``types``, every output a result."""
    graph = Graph(f"eager_{op.name}")
    values = [graph.add_input(f"x{i}", TensorType(t.shape, t.dtype))
              for i, t in enumerate(types)]
    node = graph.add_node(op.name, values, attrs, out_types)
    graph.outputs = tuple(node.outputs)
    return graph


def _to_host(structure):
    return map_structure(DEVICE.download, structure)


RUNTIME = TritonRuntime()


def register() -> None:
    """Make the Triton runtime the ``cuda`` device's (``graphnn/__init__`` calls this)."""
    register_device_runner("cuda", RUNTIME)
