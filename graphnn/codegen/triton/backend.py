"""The Triton backend's code generator: a schedule -> the source of one Python module.

``generate(schedule, plan=None, kernel_id=None, blocks=DEFAULT_BLOCKS, interpreter_form=None)``
returns a module defining one ``@triton.jit`` function per kernel that has a template
(``TEMPLATES``: pointwise in ``kernels.py``, reduction in ``reduction.py``, GEMM,
convolution, pooling, indexing and scans, random numbers, flash attention, the fused optimizer
update), and
``kernel(inputs, params, buffers)``, which runs the units (``units.py``) in schedule order on
device tensors:

- templated kernels: a fresh output tensor per write, the launch's index checks, then one
  launch;
- views (reshape, permute, expand, slice): the torch view of the tensor (a kernel reading one
  gets it made contiguous); ``full``: ``torch.full`` on the device; an integer ``arange``:
  ``torch.arange`` on the device (``support.arange``); a ``cat``, ``pad`` or
  ``slice_scatter`` of its own (``_COPIES``): a torch copy on the device (``torch.cat`` in the
  reference's promoted dtype; a fill and a copy, or gathers of the padded dims' source
  positions; a clone with the slice assigned);
- everything else (a kernel with an op no template lowers): EXTERN, the op's registry
  implementation on host arrays (download, run, upload).

A graph with symbolic sizes (``compile(..., dynamic=True)``) makes a module whose
``kernel(sizes)`` binds the size symbols and returns that kernel, with ``GUARDS`` (the guards
its generation recorded); the jit functions of the templates that take symbolic sizes
(``_writes_symbols``) have them as integer arguments, and the other units are generated at the
compiling sizes, fixed by guards (``units.specialised``).

The memory plan is not used yet: every write takes a fresh tensor, and a returned value that
may share memory with an input, parameter or constant is cloned. The graph's text enters the
module only through ``repr()`` (its constants and host ops are read back from it).
``interpreter_form`` (default: whether ``TRITON_INTERPRET`` is set) picks the kernels' 16-bit
handling (``kernels.py``); ``blocks`` caps block sizes (``SMALL_BLOCKS`` makes small shapes run
the multi-program and looped paths).
"""
from __future__ import annotations

import copy
import hashlib
import math
from pathlib import Path

import numpy as np

from graphnn.ir.schedule import KernelKind
from graphnn.ir.symbolic import Sym, current_env, graph_symbols, hint_of, hinted, map_sizes
from graphnn.ir.types import TensorType

from . import kernels
from .attention import attention
from .device import interpreted
from .conv import conv
from .gemm import gemm
from .indexing import scatter_gather
from .kernels import DEFAULT_BLOCKS, Unlowered, size_text
from .pool import max_pool2d
from .reduction import reduction
from .random import random
from .scan import scan
from .multi_update import multi_update
from .units import settled_unit, specialised, units
from ..source_text import comment_text


def _version() -> str:
    """``triton-1+<hash of this folder's sources>+<interp|gpu>``: changes with the generator
    and with the kernel form."""
    digest = hashlib.sha1()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"triton-1+{digest.hexdigest()[:10]}+{'interp' if interpreted() else 'gpu'}"


BACKEND_VERSION = _version()

# the kernel template of each kind this backend generates: (name, unit, blocks,
# interpreter_form) -> Launch, or Unlowered for a unit it cannot lower (which then runs on the
# host); a new kernel kind is one entry here
TEMPLATES = {KernelKind.POINTWISE: kernels.pointwise, KernelKind.REDUCTION: reduction,
             KernelKind.MULTI_UPDATE: multi_update,
             KernelKind.RANDOM: random, KernelKind.GEMM: gemm, KernelKind.CONVOLUTION: conv,
             KernelKind.ATTENTION: attention,
             KernelKind.POOLING: max_pool2d, KernelKind.SCATTER_GATHER: scatter_gather,
             KernelKind.SCAN: scan}


def _sizes(shape) -> str:
    """A shape (ints and symbolic sizes) as a wrapper tuple expression (``repr``'s form for
    numbers)."""
    items = [size_text(s) for s in shape]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _view(node, x: str) -> str:
    """The torch expression of a view node applied to the tensor ``x``."""
    attrs = node.attrs
    if node.op == "reshape":
        return f"{x}.reshape({_sizes(attrs['shape'])})"
    if node.op == "permute":
        return f"{x}.permute({tuple(int(d) for d in attrs['dims'])!r})"
    if node.op == "expand":
        return f"{x}.expand({_sizes(attrs['shape'])})"
    parts = [f"{size_text(a)}:{size_text(b)}:{int(c)}"
             for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"])]
    return f"{x}[{', '.join(parts)}{',' if len(parts) == 1 else ''}]" if parts else x


def _number(value) -> str:
    """A Python scalar as wrapper source (infinities and NaN through ``float``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _filler(value, dtype) -> str:
    """``value`` converted to ``dtype`` as the reference converts a fill (a bfloat16 value
    rounded by ml_dtypes, which torch then holds exactly), as wrapper source."""
    with np.errstate(all="ignore"):
        return _number(np.array(value).astype(dtype.np).item())


def _fill(node) -> str:
    """The torch source of a ``full`` node (its value converted by ``_filler``; a symbolic
    size, such as a mean's element count, as its expression, which torch converts)."""
    dtype, value = node.attrs["dtype"], node.attrs["value"]
    filler = size_text(value) if isinstance(value, Sym) else _filler(value, dtype)
    return f"_rt.full({_sizes(node.attrs['shape'])}, {filler}, {dtype.name!r})"


def _arange(node) -> str | None:
    """The wrapper source of an integer ``arange`` node (its bounds size expressions where
    symbolic); None for a floating one (its bounds are fixed by guards, so it is a constant,
    or it runs on the host)."""
    attrs = node.attrs
    if attrs["dtype"].is_floating_point:
        return None
    start, end, step = (size_text(attrs[k]) if isinstance(attrs[k], Sym) else _number(attrs[k])
                        for k in ("start", "end", "step"))
    return f"_rt.arange({start}, {end}, {step}, {attrs['dtype'].name!r})"


def _cat(node, name) -> str:
    parts = "".join(f"{name(v)}, " for v in node.inputs)
    return f"_rt.cat(({parts}), {int(node.attrs['dim'])}, {node.outputs[0].type.dtype.name!r})"


def _pad(node, name) -> str:
    attrs = node.attrs
    value = _filler(attrs["value"], node.outputs[0].type.dtype)
    return (f"_rt.pad({name(node.inputs[0])}, {tuple(int(p) for p in attrs['pads'])!r}, "
            f"{str(attrs['mode'])!r}, {value})")


def _slice_scatter(node, name) -> str | None:
    """None for a negative step (torch slices take none: the kernel runs on the host)."""
    attrs = node.attrs
    if any(int(c) <= 0 for c in attrs["steps"]):
        return None
    key = "".join(f"slice({size_text(a)}, {size_text(b)}, {int(c)}), "
                  for a, b, c in zip(attrs["starts"], attrs["stops"], attrs["steps"]))
    return f"_rt.slice_scatter({name(node.inputs[0])}, {name(node.inputs[1])}, ({key}))"


def _writes_symbols(unit) -> bool:
    """Whether ``unit``'s template writes symbolic sizes as expressions: every template but
    the fused optimizer update's (whose sizes are the parameters', but whose inlined scalars
    may hold a size). The update is given the unit with every size fixed
    (``units.specialised``: guarded); so is a unit a template refuses, run on the host."""
    return unit.kind is not KernelKind.MULTI_UPDATE


def _text_at_hints(graph) -> str:
    """The graph's text (what the module parses back for its host ops, constants and output
    structure) with every symbolic size at its value in the compiling call: the host ops read
    their types and attributes there, and every node run on the host had its sizes fixed to
    those values (``units.specialised``)."""
    if not graph_symbols(graph):
        return str(graph)
    copied = copy.deepcopy(graph)
    for v in copied.values():
        v.type = TensorType(hinted(v.type.shape), v.type.dtype)
    for node in copied.nodes:
        node.attrs = {k: map_sizes(a, hint_of) for k, a in node.attrs.items()}
    return str(copied)


# ops whose kernel of their own is a torch copy on the device (no template): node, the
# variable name of a value -> the expression, or None where the node needs the host
_COPIES = {"cat": _cat, "pad": _pad, "slice_scatter": _slice_scatter}
# creation ops made by a torch call on the device (no template): node -> wrapper source, or
# None (then a template or the host)
_CREATIONS = {"full": _fill, "arange": _arange}


class _Module:
    """The generated module's pieces: module-level bindings, jit functions, the body."""

    def __init__(self, graph, blocks, interpreter_form):
        self.graph, self.blocks, self.interpreter_form = graph, blocks, interpreter_form
        self.header: list[str] = []
        self.functions: list[str] = []
        self.signatures: dict = {}  # jit function name -> (signature, constexprs)
        self.options: dict = {}  # jit function name -> launch options (warps, stages, fp fusion)
        self.body: list[str] = []
        self.var: dict = {}  # value name -> Python variable
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}
        self.shared: set = set()  # values that may share memory with inputs or state

    def name(self, value) -> str:
        if value.name not in self.var:
            self.var[value.name] = f"v{len(self.var)}"
        return self.var[value.name]

    def emit(self, line: str, value=None) -> None:
        note = f"  # %{comment_text(value.name)}: {value.type}" if value is not None else ""
        self.body.append(line + note)

    def unit(self, unit) -> None:
        where = "".join(f" @{comment_text(s or '<root>')}" for s in unit.scopes)
        self.body.append(f"# {unit.name} {unit.kind.value} {list(unit.space)}{where}")
        if unit.kind is KernelKind.VIEW:
            node = unit.nodes[0]
            out, x = node.outputs[0], node.inputs[0]
            self.emit(f"{self.name(out)} = {_view(node, self.name(x))}", out)
            if x.name in self.shared:
                self.shared.add(out.name)
            return
        made = _CREATIONS[unit.nodes[0].op](unit.nodes[0]) \
            if unit.kind is KernelKind.POINTWISE and unit.nodes[0].op in _CREATIONS else None
        if made is not None:
            out = unit.nodes[0].outputs[0]
            self.emit(f"{self.name(out)} = {made}", out)
            return
        copy = _COPIES[unit.nodes[0].op](unit.nodes[0], self.name) \
            if len(unit.nodes) == 1 and unit.nodes[0].op in _COPIES else None
        if copy is not None:
            out = unit.nodes[0].outputs[0]
            self.emit(f"{self.name(out)} = {copy}", out)
            return
        make = TEMPLATES.get(unit.kind)
        if make is not None:
            sized = settled_unit(unit) if _writes_symbols(unit) else specialised(unit)
            try:
                launch = make(f"_{unit.name}", sized, self.blocks, self.interpreter_form)
            except Unlowered as why:
                self.body.append(f"# on the host: no Triton template for {comment_text(str(why))}")
            else:
                return self._launch(sized, launch)
        self._host(unit)

    def _launch(self, unit, launch) -> None:
        self.functions.append(launch.source)
        self.signatures[f"_{unit.name}"] = (launch.signature, launch.blocks)
        for v in unit.writes:
            self.emit(f"{self.name(v)} = _rt.empty({_sizes(v.type.shape)}, "
                      f"{v.type.dtype.name!r})", v)
        args = [f"{self.name(v)}.contiguous()" for v in unit.reads] + \
               [self.name(v) for v in unit.writes] + launch.sizes
        args += [f"{k}={n}" for k, n in {**launch.blocks, **launch.options}.items()]
        if launch.options:
            self.options[f"_{unit.name}"] = launch.options
        for position, size, op, dim in launch.index_checks:
            self.body.append(f"_rt.check_indices({self.name(unit.reads[position])}, "
                             f"{size_text(size)}, {op!r}, {int(dim)})")
        if launch.grid:
            self.body.append(f"_{unit.name}[({launch.grid},)]({', '.join(args)})")

    def _host(self, unit) -> None:
        """The unit's nodes on host arrays: reads downloaded once, writes uploaded once. Each
        node runs with the types and attributes of the module's GRAPH, at the compiling sizes,
        to which ``specialised`` fixes its symbolic sizes (guards)."""
        specialised(unit)
        host = {}
        for v in unit.reads:
            host[v.name] = f"h{self.name(v)[1:]}"
            self.body.append(f"{host[v.name]} = _rt.host({self.name(v)})")
        for node in unit.nodes:
            fn = f"_n{self.position[id(node)]}"
            self.header.append(f"{fn} = _rt.host_op(GRAPH, {self.position[id(node)]})"
                               f"  # {node.op}")
            outs = [f"h{self.name(v)[1:]}" for v in node.outputs]
            host.update({v.name: h for v, h in zip(node.outputs, outs)})
            args = ", ".join(host[v.name] for v in node.inputs)
            self.body.append(f"{', '.join(outs)}, = {fn}({args})")
        for v in unit.writes:
            self.emit(f"{self.name(v)} = _rt.device({host[v.name]})", v)

    def result(self) -> str:
        """The return statement: the outputs, cloned where they may share memory with an
        input, a parameter or a constant."""
        leaves = {}
        for v in self.graph.output_values():
            ident = self.name(v)
            leaves[v.name] = f"{ident}.clone()" if v.name in self.shared else ident
        items = ", ".join(f"{k!r}: {e}" for k, e in leaves.items())
        return f"return _rt.outputs(GRAPH, {{{items}}})"


def generate(schedule, plan=None, kernel_id=None, blocks=DEFAULT_BLOCKS,
             interpreter_form=None) -> str:
    """The module's source (see the module docstring); ``plan`` and ``kernel_id`` are accepted
    for the ``Backend`` protocol and not used (no scratch is kept in ``buffers``)."""
    if plan is not None and plan.schedule is not schedule:
        raise ValueError(f"generate: the memory plan of graph {plan.graph.name} was made over "
                         f"another schedule than the one given")
    graph = schedule.graph
    m = _Module(graph, blocks, interpreted() if interpreter_form is None else interpreter_form)
    for i, v in enumerate(graph.inputs):
        m.emit(f"{m.name(v)} = inputs[{i}]", v)
    for v in graph.params:
        m.emit(f"{m.name(v)} = params[{v.name!r}]", v)
    for i, v in enumerate(graph.consts):
        m.emit(f"{m.name(v)} = CONSTANTS[{i}]", v)
    m.shared.update(v.name for v in [*graph.inputs, *graph.params, *graph.consts])
    for unit in units(schedule):
        m.unit(unit)
    m.body.append(m.result())
    symbols = sorted(graph_symbols(graph), key=lambda name: (len(name), name))
    form = "interpreter" if m.interpreter_form else "GPU"
    lines = [f'"""graphnn Triton kernels ({len(graph.nodes)} nodes, {form} form; backend '
             f'{BACKEND_VERSION})."""',
             f"# graph {comment_text(graph.name)}",
             "import triton",
             "import triton.language as tl",
             "",
             "from graphnn.codegen.triton import support as _rt",
             "",
             f"GRAPH = _rt.parse_graph({_text_at_hints(graph)!r})",
             "CONSTANTS = _rt.Constants(GRAPH)"]
    lines += m.header
    for fn in m.functions:
        lines += ["", "", fn]
    lines += ["", "", "# argument types and block sizes of each jit function (for triton.compile)",
              f"SIGNATURES = {m.signatures!r}",
              "# launch options (warps, stages, fp fusion) of the jit functions that set them",
              f"LAUNCH_OPTIONS = {m.options!r}"]
    if not symbols:
        lines += ["", "", "def kernel(inputs, params, buffers):"]
        lines += ["    " + line for line in m.body]
        return "\n".join(lines) + "\n"
    # symbolic sizes: ``kernel(sizes)`` makes the kernel for one binding of the symbols (the
    # jit functions take them as arguments); GUARDS, the compilation's guards once every unit
    # is generated (fixing a size records one), go with the source, so that a cache hit,
    # which generates nothing, records them too
    env = current_env()
    guards = tuple((g.poly, g.relation) for g in env.guards) if env is not None else ()
    lines += ["# the guards the sizes met when this was generated (a relation of a polynomial "
              "to 0)", f"GUARDS = {guards!r}",
              "", "", "def kernel(sizes):",
              '    """The kernel for the size symbols\' values ``sizes`` (name -> int)."""',
              f"    {', '.join(symbols)}, = {', '.join(f'sizes[{n!r}]' for n in symbols)},",
              "", "    def run(inputs, params, buffers):"]
    lines += ["        " + line for line in m.body]
    lines += ["    return run"]
    return "\n".join(lines) + "\n"
