"""A compiled artifact with symbolic sizes (``compile(..., dynamic=True)``).

The stage's graph has tensor types whose dimensions may be ``ir.symbolic.Sym`` (``f32[s0,s1,32]``),
and its kernel source, generated once and imported once from its cache file like every kernel,
computes with the size symbols (``reshape((s0*s1, 32))``, ``_BUFFERS = (((s0, s1, 32),
'float32'), ...)``): the module's ``kernel(sizes)`` takes the symbols' values and returns the
kernel for them. A call binds the symbols from its inputs' shapes (each symbol is some input
dimension of its own), checks every input against its symbolic shape and the compilation's
guards, and runs the kernel for those sizes: no tracing, pass, code generation or import runs
for new sizes. Kernels and scratch buffers are kept for the ``KEPT_SIZES`` bindings used last.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..ir import debug_mode
from ..ir.symbolic import Guard, Sym, graph_symbols
from ..ir.types import TensorType
from . import cache, debug
from .artifact import schedule_of
from .guards import GuardError, dtype_name

KEPT_SIZES = 8  # kernels and scratch buffers kept per artifact (least recently used dropped)
KEPT_CHECKS = 256  # input shapes remembered as checked (forgotten all at once past this)


def _shape_text(shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _binding_text(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def evaluate(size, values: dict) -> int:
    """A dimension (an int or a Sym) at the symbol ``values``."""
    return size.evaluate(values) if isinstance(size, Sym) else size


class UnboundSymbol(ValueError):
    """A size symbol of the kernel is no input dimension of its own (it cannot be read off a
    call)."""


def _decided_alike(kernel, hints: dict) -> bool:
    """Whether the guards a generated module's generation recorded (its ``GUARDS``) hold at
    the compiling call's sizes ``hints``: a cached module generated at other sizes may carry a
    decision these sizes break (its key holds the trace's guards, not the generator's)."""
    return all(Guard(poly, relation).holds(hints)
               for poly, relation in kernel.__globals__.get("GUARDS", ()))


class SymbolicArtifact:
    """One stage's kernel for every binding of its size symbols that satisfies ``guards``
    (an ``ir.symbolic.ShapeEnv``'s; see the module docstring). Same interface as
    ``CompiledArtifact``: ``check``, ``launch``, ``run``, ``source``, ``graph``."""

    def __init__(self, graph, backend, env, plan=None, options: str = "", name: str = "",
                 schedule=None, sizes_given: bool = False):
        self.graph = graph
        self.name = name or graph.name
        self.env = env
        self.plan = plan
        self.schedule = schedule_of(graph, plan, schedule)
        self.input_types = [v.type for v in graph.inputs]
        self.param_names = [v.name for v in graph.params]
        self.output_types = [(v.name, v.type) for v in graph.output_values()]
        self._readers = self._symbol_readers(sizes_given)
        # the guards so far are part of the key: a generator's decisions may rest on them (a
        # size a guard fixed), so a source is reused only under the same guards
        options = f"{options};guards={';'.join(g.text for g in env.guards)}"
        source, self._bind_kernel = cache.get_kernel(self.schedule, backend, plan, options)
        if not _decided_alike(self._bind_kernel, env.hints):
            # a cache hit generated at other sizes, whose generator decided a question on them
            # the other way: generated again at these sizes, under a key that names them
            source, self._bind_kernel = cache.get_kernel(
                self.schedule, backend, plan, f"{options};at={sorted(env.hints.items())}")
        # a graph that names no size symbol (a backward that reads none of the forward's
        # symbolic inputs, a graph whose every size a guard fixed) gets the generator's plain
        # ``kernel(inputs, params, buffers)``: the kernel of every binding
        self._plain = None if graph_symbols(graph) else self._bind_kernel
        for poly, relation in self._bind_kernel.__globals__.get("GUARDS", ()):
            env.record(dict(poly), relation)  # what its generation decided on (a cache hit)
        self.source = self._preamble() + source
        self._backend = backend
        self._kernels = OrderedDict()  # binding (tuple of items) -> kernel
        self._checked = set()  # ((shape, dtype) per input) that passed bind
        self._lock = threading.Lock()
        self._local = threading.local()
        self.calls = 0

    def _symbol_readers(self, sizes_given: bool) -> dict:
        """symbol name -> (input, dim) whose size is that symbol; UnboundSymbol when a symbol
        the graph uses is no input dimension of its own, unless the caller gives every call's
        sizes (``sizes_given``: a backward kernel, launched with its forward's)."""
        readers = {}
        for i, t in enumerate(self.input_types):
            for d, size in enumerate(t.shape):
                if isinstance(size, Sym) and len(size.symbols) == 1 and \
                        str(size) in size.symbols:
                    readers.setdefault(str(size), (i, d))
        missing = sorted(graph_symbols(self.graph) - set(readers))
        if missing and not sizes_given:
            raise UnboundSymbol(f"compiled {self.name}: size symbol(s) {', '.join(missing)} are "
                                f"no input dimension of their own")
        return readers

    def _preamble(self) -> str:
        """Comments saying where each size symbol is read and which guards the sizes meet."""
        where = ", ".join(f"{name} = input {i} dim {d}"
                          for name, (i, d) in sorted(self._readers.items()))
        guards = "; ".join(g.text for g in self.env.guards) or "none"
        return f"# size symbols: {where or 'given by the forward'}\n# guards: {guards}\n"

    def bind(self, arrays) -> dict:
        """The symbol values the host (or device) ``arrays`` carry; GuardError naming the input
        when one does not fit its dtype or symbolic shape, or naming the guard that fails.
        Shapes that passed are remembered (``KEPT_CHECKS``): a later call with the same
        shapes and dtypes checks nothing again."""
        where = f"compiled {self.name}"
        if len(arrays) != len(self.input_types):
            raise GuardError(f"{where}: expected {len(self.input_types)} tensor inputs, got "
                             f"{len(arrays)}")
        key = tuple((getattr(a, "shape", ()), getattr(a, "dtype", None)) for a in arrays)
        if key in self._checked:
            return self.values_of(arrays)
        values = {name: int(arrays[i].shape[d]) if len(getattr(arrays[i], "shape", ())) > d
                  else -1 for name, (i, d) in self._readers.items()}
        for i, (t, a) in enumerate(zip(self.input_types, arrays)):
            dtype = dtype_name(a.dtype) if isinstance(a, np.ndarray) else type(a).__name__
            if dtype != t.dtype.name:
                raise GuardError(f"{where}: input {i} expected dtype {t.dtype.name}, got "
                                 f"{dtype}")
            shape = tuple(getattr(a, "shape", ()))
            want = tuple(evaluate(s, values) for s in t.shape)
            if shape != want:
                raise GuardError(f"{where}: input {i} expected shape {_shape_text(t.shape)} "
                                 f"({_shape_text(want)} with {_binding_text(values)}), "
                                 f"got {_shape_text(shape)}")
        failed = self.guard_failure(values)
        if failed is not None:
            raise GuardError(f"{where}: the sizes {_binding_text(values)} break the guard "
                             f"{failed}")
        if len(self._checked) >= KEPT_CHECKS:
            self._checked.clear()
        self._checked.add(key)
        return values

    def values_of(self, arrays) -> dict:
        """The symbol values the call's arrays carry (the tensor inputs suffice: every symbol
        is read off one of them), unchecked."""
        return {name: int(arrays[i].shape[d]) for name, (i, d) in self._readers.items()}

    def guard_failure(self, values: dict):
        """None when ``values`` satisfy every guard, else the first failing guard's text."""
        return self.env.check(values)

    def check(self, arrays) -> None:
        """Raise GuardError unless the host ``arrays`` fit (``bind``)."""
        self.bind(arrays)

    def kernel_for(self, values: dict):
        """The kernel for a binding of the size symbols: the generated module's
        ``kernel(sizes)`` called with it once (kept for the ``KEPT_SIZES`` bindings used
        last), or its plain kernel when the graph names no symbol; the module itself was
        imported once, from its cache file."""
        if self._plain is not None:
            return self._plain
        key = tuple(sorted(values.items()))
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is not None:
                self._kernels.move_to_end(key)
                return kernel
        kernel = self._bind_kernel(dict(key))
        with self._lock:
            self._kernels[key] = kernel
            while len(self._kernels) > KEPT_SIZES:
                self._kernels.popitem(last=False)
        return kernel

    def _buffers(self, key) -> dict:
        by_size = getattr(self._local, "by_size", None)
        if by_size is None:
            by_size = self._local.by_size = OrderedDict()
        buffers = by_size.get(key)
        if buffers is None:
            buffers = by_size[key] = {}
            while len(by_size) > KEPT_SIZES:
                by_size.popitem(last=False)
        else:
            by_size.move_to_end(key)
        return buffers

    def launch(self, arrays, params: dict, to_host=None, sizes=None):
        """The kernel's outputs for checked inputs (arrays of the backend's device), at the
        sizes they carry, or at ``sizes`` (symbol -> value) when given."""
        values = self.values_of(arrays) if sizes is None else sizes
        kernel = self.kernel_for(values)
        self.calls += 1
        results = kernel(list(arrays), params, self._buffers(tuple(sorted(values.items()))))
        if debug_mode.ENABLED:
            debug.check_outputs(f"compiled {self.name} (graph {self.graph.name}, "
                                f"{_binding_text(values)})",
                                self.output_types_at(values),
                                to_host(results) if to_host else results)
        return results

    def run(self, arrays, params: dict):
        """``check`` and ``launch`` for host arrays."""
        self.check(arrays)
        return self.launch(arrays, params)

    def output_types_at(self, values: dict) -> list:
        """(name, TensorType) of each output value at the symbol ``values``."""
        return [(name, TensorType(tuple(evaluate(s, values) for s in t.shape), t.dtype))
                for name, t in self.output_types]

    def __repr__(self):
        return (f"<SymbolicArtifact {self.name}: {len(self.input_types)} inputs, sizes "
                f"{', '.join(sorted(self._readers))}>")
