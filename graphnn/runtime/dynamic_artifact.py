"""A compiled artifact for every batch size (``compile(..., dynamic=True)``).

``fit_dynamic_artifact(graphs, sizes, backend, ...)`` takes one stage's graph as traced and
optimized at three probe batch sizes, generates each one's source (through the cache) and fits
a ``ShapeTemplate`` over them, plus the shape of each graph input and output as linear forms of
the batch size; it raises ``NotGeneric`` when the sources, the inputs or the outputs differ in
more than sizes.

``DynamicArtifact.check(arrays)`` reads the batch size off the host inputs (the first input
dimension that depends on it) and checks every input against its forms (a ``GuardError`` naming
the input and the size it was measured from); ``launch(arrays, params, to_host)`` runs the kernel
for that size on device arrays (``run`` is both, for host arrays): the template's text
for the size, loaded once and kept for the ``KEPT_SIZES`` sizes used last, with scratch buffers
per thread and per size. No tracing, pass or code generation runs for a new size. In debug mode
(``ir.debug_mode``) each returned array is checked against its output's IR type at that size.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ..ir.types import TensorType
from ..ir import debug_mode
from . import cache, debug
from .artifact import schedule_of
from .guards import GuardError, TensorSpec, check_inputs
from .shape_template import LinearSize, NotGeneric, ShapeTemplate

KERNEL_ID = "dynamic"  # each size has its own buffers dict, so one fixed id serves them all
KEPT_SIZES = 8  # kernels and scratch buffers kept per artifact (least recently used dropped)
SMALLEST = 2  # sizes 0 and 1 are not served (broadcasting may treat them differently)


def _shape_forms(values_per_graph, sizes, what: str) -> list:
    """Per value (one list of values per graph, in the same order): (the first graph's value,
    one LinearSize per dimension); ``what`` (input, output) names the values in errors."""
    forms = []
    for values in zip(*values_per_graph):
        shapes = [tuple(v.type.shape) for v in values]
        if len({len(s) for s in shapes}) != 1 or len({v.type.dtype.name for v in values}) != 1:
            raise NotGeneric(f"{what} '{values[0].name}' changes rank or dtype with the batch "
                             f"size")
        dims = []
        for d, sizes_d in enumerate(zip(*shapes)):
            form = LinearSize.fit(list(sizes_d), sizes)
            if form is None:
                raise NotGeneric(f"{what} '{values[0].name}' dimension {d} is not a linear "
                                 f"function of the batch size ({sizes_d})")
            dims.append(form)
        forms.append((values[0], tuple(dims)))
    return forms


def _input_forms(graphs, sizes) -> list:
    """Per graph input: (dtype name, one LinearSize per dimension)."""
    forms = [(v.type.dtype.name, dims)
             for v, dims in _shape_forms([g.inputs for g in graphs], sizes, "input")]
    if not any(f.a for _, dims in forms for f in dims):
        raise NotGeneric("no input of the graph carries the batch size")
    return forms


def _output_forms(graphs, sizes) -> list:
    """Per graph output value: (name, dtype, one LinearSize per dimension)."""
    if len({len(g.output_values()) for g in graphs}) != 1:
        raise NotGeneric("the number of outputs changes with the batch size")
    return [(v.name, v.type.dtype, dims)
            for v, dims in _shape_forms([g.output_values() for g in graphs], sizes, "output")]


def fit_dynamic_artifact(graphs, plans, sizes, backend, options, name="", schedules=None):
    """The DynamicArtifact of one stage from its graphs, memory plans, cache options and
    schedules (one each; default ``artifact.schedule_of`` each graph and plan) at ``sizes``."""
    names = [[v.name for v in g.inputs] for g in graphs]
    if any(n != names[0] for n in names[1:]):
        raise NotGeneric("the graph's inputs differ between batch sizes")
    schedules = schedules or [None] * len(graphs)
    sources = [cache.get_source(schedule_of(g, p, s), backend, p, o, KERNEL_ID)
               for g, p, o, s in zip(graphs, plans, options, schedules)]
    template = ShapeTemplate.fit(sources, sizes, f"the kernel of {graphs[0].name}")
    return DynamicArtifact(graphs[0], backend, template, _input_forms(graphs, sizes),
                           _output_forms(graphs, sizes), name)


def _shape(dims, symbol="B") -> str:
    return "[" + ",".join(d.render(symbol) for d in dims) + "]"


class DynamicArtifact:
    """One stage's kernel for every batch size (see the module docstring). ``graph`` is one
    probe's graph: its input, parameter and output names are those of every size."""

    def __init__(self, graph, backend, template, input_forms, output_forms, name=""):
        self.graph = graph
        self.name = name or graph.name
        self.template = template
        self.source = template.render()  # for people: sizes written with B
        self.input_forms = input_forms
        self.output_forms = output_forms  # (name, dtype, LinearSize per dim) per output value
        self.param_names = [v.name for v in graph.params]
        self._carrier = next((i, d) for i, (_, dims) in enumerate(input_forms)
                             for d, f in enumerate(dims) if f.a)  # (input, dim) holding B
        self._backend = backend
        self._kernels = OrderedDict()  # size -> kernel
        self._lock = threading.Lock()
        self._local = threading.local()
        self.calls = 0

    def size_of(self, arrays) -> int:
        """The batch size the inputs carry (read off the first input dimension that depends on
        it); raises GuardError when an input does not fit its forms at that size."""
        where = f"compiled {self.name}"
        if len(arrays) != len(self.input_forms):
            raise GuardError(f"{where}: expected {len(self.input_forms)} tensor inputs, got "
                             f"{len(arrays)}")
        i, d = self._carrier
        shape = tuple(getattr(arrays[i], "shape", ()))
        dims = self.input_forms[i][1]
        size = dims[d].solve(shape[d]) if len(shape) == len(dims) else None
        if size is None or size < SMALLEST:
            raise GuardError(f"{where}: input {i} expected shape {_shape(dims)} with a batch "
                             f"size B >= {SMALLEST}, got shape {list(shape)}")
        concrete = [TensorSpec(tuple(f.at(size) for f in dims), dtype, False)
                    for dtype, dims in self.input_forms]
        try:
            check_inputs(concrete, arrays, where)
        except GuardError as error:
            raise GuardError(f"{error} (B={size}, read off input {i}; expected shapes "
                             f"{', '.join(_shape(d) for _, d in self.input_forms)})") from None
        return size

    def kernel_for(self, size: int):
        """The loaded kernel for ``size`` (made from the template on first use)."""
        with self._lock:
            kernel = self._kernels.get(size)
            if kernel is not None:
                self._kernels.move_to_end(size)
                return kernel
        kernel = cache.kernel_from_source(self.template.instantiate(size), self._backend)
        with self._lock:
            self._kernels[size] = kernel
            while len(self._kernels) > KEPT_SIZES:
                self._kernels.popitem(last=False)
        return kernel

    def _buffers(self, size: int) -> dict:
        by_size = getattr(self._local, "by_size", None)
        if by_size is None:
            by_size = self._local.by_size = OrderedDict()
        buffers = by_size.get(size)
        if buffers is None:
            buffers = by_size[size] = {}
            while len(by_size) > KEPT_SIZES:
                by_size.popitem(last=False)
        else:
            by_size.move_to_end(size)
        return buffers

    def check(self, arrays) -> None:
        """Raise GuardError unless the host ``arrays`` fit the forms at the size they carry."""
        self.size_of(arrays)

    def launch(self, arrays, params: dict, to_host=None):
        """The kernel's outputs for checked inputs (arrays of the backend's device), at the
        batch size they carry."""
        i, d = self._carrier
        size = self.input_forms[i][1][d].solve(arrays[i].shape[d])
        kernel = self.kernel_for(size)
        self.calls += 1
        results = kernel(list(arrays), params, self._buffers(size))
        if debug_mode.ENABLED:
            debug.check_outputs(f"compiled {self.name} (graph {self.graph.name}, B={size})",
                                self.output_types(size), to_host(results) if to_host else results)
        return results

    def run(self, arrays, params: dict):
        """``check`` and ``launch`` for host arrays."""
        self.check(arrays)
        return self.launch(arrays, params)

    def output_types(self, size: int) -> list:
        """(name, TensorType) of each output value at batch size ``size``."""
        return [(name, TensorType(tuple(f.at(size) for f in dims), dtype))
                for name, dtype, dims in self.output_forms]

    def __repr__(self):
        return f"<DynamicArtifact {self.name}: {len(self.input_forms)} inputs, B >= {SMALLEST}>"
