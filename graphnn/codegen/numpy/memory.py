"""Where the NumPy backend puts each value: the memory plan's buffers, or its own scratch.

The memory plan (``graphnn.passes.memory_plan``, the one planner) decides the buffers of values
that cross kernel boundaries, which of them overwrite a dying operand in place, and which state
updates are written into the state's own array. This module follows it:

- a value the plan puts in arena buffer ``bK`` is written (``out=``) into a typed view of that
  buffer (``aN``: the buffer's bytes seen as the value's shape and dtype, made once per
  ``buffers`` dict); where the plan writes it over an operand, the view is the operand's own;
- values inside a kernel (the plan gives them no memory: a GPU kernel keeps them in registers)
  go to this backend's scratch arrays ``b0, b1...``, reused by exact shape and dtype after their
  last read, and overwriting a dying operand of their own type when the lowering is elementwise
  (a fused kernel becomes a chain of in-place ufunc calls). Without a plan every value is
  placed this way;
- a batched GEMM whose result only reaches a ``cat`` (or a copying reshape) through views is
  written into its region of that result (``gathered``, ``hold_part``): the result takes a
  scratch array reserved from the first such GEMM on, which the GEMMs' results view.

Guards the plan cannot see: results of reference calls and view lowerings may view their
operands' memory, so each buffer records the values that may view it; a planned buffer still
viewed by a live value, or an in-place write the lowering cannot do, makes the value take
scratch instead. Graph outputs never live in a buffer (a later call would overwrite them): they
are fresh arrays, and an output that may view a buffer is copied on return. A value whose only
use is a chain of views ending in one graph output (a weight gradient transposed back) is
fresh too, and that output is returned without a copy when it is C-contiguous.

State updates: an accepted update is computed straight into the parameter's array when no
later statement reads the parameter or a value that may view it, and this statement reads it
only elementwise as itself; otherwise it is a fresh array and the caller copies it in.
"""
from __future__ import annotations

from graphnn.ir import get_op
from graphnn.ir.symbolic import same_shape


def _overwritable(inplace, name: str) -> bool:
    """Whether a lowering whose ``inplace`` is that (``Placement.assign``) may write its result
    over the operand ``name``."""
    return inplace is True or (bool(inplace) and inplace.name == name)


class Placement:
    """Buffers of one generated kernel, decided statement by statement in schedule order."""

    def __init__(self, graph, nodes, plan, names):
        self.names = names
        self.writes = plan.updates if plan is not None else {}
        self.param_views = {v.name: {v.name} for v in graph.params
                            if v.name in set(self.writes.values())}  # value -> params it views
        self.last, self.readers = {}, {}
        self.position = {id(node): i for i, node in enumerate(nodes)}
        for i, node in enumerate(nodes):
            for v in node.inputs:
                self.last[v.name] = i
                self.readers.setdefault(v.name, []).append(node)
            for v in node.outputs:
                self.last.setdefault(v.name, i)
        leaves = [v.name for v in graph.output_values()]
        self.outputs = set(leaves)
        for name in self.outputs:
            self.last[name] = len(nodes)
        self.read = set(self.readers) | self.outputs
        self.fresh, self.fresh_views = set(), set()  # fresh bases; outputs viewing them
        for v in graph.output_values():
            bases = [b.name for b in self._viewed_by(v)] if leaves.count(v.name) == 1 else []
            self.fresh.update(bases)
            if bases:
                self.fresh_views.add(v.name)
        self.planned, self.inplace, self.roots = {}, {}, {}
        if plan is not None:
            live = plan.liveness
            self.planned = {name: buf for name, buf in plan.buffer_of.items()
                            if not buf.startswith("%") and live.step_of.get(name) is not None}
            self.inplace = plan.inplace
            self.roots = {name: s.root.name for name, s in live.storage_of.items()}
        self.specs: list[tuple] = []  # scratch index -> (shape, numpy dtype name)
        self.free: dict[tuple, list[int]] = {}
        self.arena: dict[str, int] = {}  # plan buffer name -> its bytes' size
        self.views: list[tuple] = []  # typed view index -> (plan buffer, shape, dtype name)
        self.view_of: dict[tuple, int] = {}
        self.alias: dict[str, set] = {}  # value name -> slots it may view
        self.holders: dict = {}  # slot (scratch index, or plan buffer name) -> values viewing it
        self.direct: dict[str, object] = {}  # value name -> the slot it was written into
        self.reserved: dict[str, int] = {}  # value name -> scratch slot written ahead of it
        self.sizes = {b.name: b.nbytes for b in plan.buffers} if plan is not None else {}

    def _viewed_by(self, value):
        """The values that ``value`` views through a chain of view ops, each read only by
        the next."""
        while value.producer is not None and get_op(value.producer.op).view:
            value = value.producer.inputs[0]
            if value.name in self.outputs or len(self.readers.get(value.name, ())) != 1:
                return
            yield value

    def used(self, value) -> bool:
        return value.name in self.read

    def assign(self, step, value, inplace) -> str | None:
        """The array ``value`` (produced at ``step``) is written into: a parameter, a typed view
        of a planned buffer, a scratch array, or None (a fresh array). ``inplace``: the lowering
        is elementwise over the result's shape, so a dying operand of its type may be
        overwritten: True for any operand, or the one operand (a Value) the lowering may
        write over."""
        if value.name in self.writes and self._may_write(step, value, inplace):
            self.param_views[value.name] = {self.writes[value.name]}
            return self.names.of[self.writes[value.name]]
        if value.name in self.outputs or value.name in self.fresh:
            return None
        spec = (tuple(value.type.shape), value.type.dtype.np.name)
        planned = self.planned.get(value.name)
        if planned is not None and self._planned_free(step, value, planned, inplace):
            return self._take(value, planned, self._typed_view(planned, spec))
        chosen = self._dying_operand(step, value, spec, inplace) if inplace else None
        if chosen is None:
            pool = self.free.get(spec)
            if pool:
                chosen = pool.pop()
            else:
                chosen = len(self.specs)
                self.specs.append(spec)
                self.holders[chosen] = set()
        return self._take(value, chosen, f"b{chosen}")

    def reserve(self, value) -> str:
        """A scratch array for ``value``, written ahead of its own statement (by an earlier
        one, which computes it along the way) and held for it until then; ``take_reserved``
        binds it when its statement comes. Its identifier ``bK`` (a free one of its shape
        and dtype, else a new one)."""
        spec = (tuple(value.type.shape), value.type.dtype.np.name)
        pool = self.free.get(spec)
        slot = pool.pop() if pool else len(self.specs)
        if slot == len(self.specs):
            self.specs.append(spec)
        self.holders[slot] = {value.name}
        self.reserved[value.name] = slot
        return f"b{slot}"

    def gathered(self, value):
        """``(sink, [view nodes])`` when a GEMM's result ``value`` may be written straight
        into the array that later holds it: its only use is a chain of reshapes and permutes
        (each value of it read once) ending as one operand of a ``cat`` of its dtype (the
        sink; the chain leads to that operand), or else whose last reshape follows a permute
        and would copy (the sink: the last node of the chain). The sink's result must take
        scratch (no graph output, fresh array or state update). Else None."""
        chain = []
        while value.name not in self.outputs and len(self.readers.get(value.name, ())) == 1:
            node = self.readers[value.name][0]
            if node.op == "cat":
                operands = [v.name for v in node.inputs]
                same = all(v.type.dtype == value.type.dtype for v in node.inputs)
                return self._sink(node, chain) if same and operands.count(value.name) == 1 \
                    else None
            if node.op not in ("reshape", "permute"):
                break
            chain.append(node)
            value = node.outputs[0]
        while chain and chain[-1].op != "reshape":
            chain.pop()
        if not any(n.op == "permute" for n in chain):
            return None
        return self._sink(chain[-1], chain)

    def _sink(self, node, chain):
        result = node.outputs[0].name
        if result in self.outputs or result in self.fresh or result in self.writes:
            return None
        return node, chain

    def hold_part(self, value, result) -> str:
        """The scratch array reserved for the sink's result ``result`` (reserved now if it
        is not yet; ``gathered``), of which ``value`` is written as a part: ``value`` may
        view it from now on. Its identifier ``bK``."""
        slot = self.reserved.get(result.name)
        ident = self.reserve(result) if slot is None else f"b{slot}"
        slot = self.reserved[result.name]
        self.alias[value.name] = {slot}
        self.holders[slot].add(value.name)
        return ident

    def take_reserved(self, value) -> str | None:
        """The identifier of the array ``reserve`` set aside for ``value`` (now its home, freed
        after its last read as any scratch), or None when none was."""
        slot = self.reserved.pop(value.name, None)
        return None if slot is None else self._take(value, slot, f"b{slot}")

    def _take(self, value, slot, ident) -> str:
        self.direct[value.name] = slot
        self.alias[value.name] = {slot}
        self.holders.setdefault(slot, set()).add(value.name)
        return ident

    def _planned_free(self, step, value, buf, inplace) -> bool:
        """Whether planned buffer ``buf`` may take ``value`` now: nothing views it any more,
        except (when the plan writes ``value`` over an operand and the lowering can) values
        of that operand's storage that this statement reads for the last time."""
        holders = self.holders.get(buf, set())
        if not holders:
            return True
        source = self.inplace.get(value.name)
        if source is None or not inplace:
            return False
        root = self.roots.get(source)
        reads = {v.name for v in value.producer.inputs if _overwritable(inplace, v.name)}
        return all(h in reads and self.last[h] == step and self.roots.get(h) == root and
                   self.direct.get(h) == buf for h in holders)

    def _typed_view(self, buf, spec) -> str:
        key = (buf, spec)
        if key not in self.view_of:
            self.arena.setdefault(buf, self.sizes[buf])
            self.view_of[key] = len(self.views)
            self.views.append(key)
        return f"a{self.view_of[key]}"

    def _dying_operand(self, step, value, spec, inplace):
        """A scratch array of ``spec`` that an operand dying here alone occupies (one that
        ``inplace`` lets the lowering write over)."""
        for v in value.producer.inputs:
            if not _overwritable(inplace, v.name):
                continue
            b = self.direct.get(v.name)
            if isinstance(b, int) and _same_spec(self.specs[b], spec) and \
                    self.last[v.name] == step and self.holders[b] == {v.name} and \
                    v.type == value.type:
                return b
        return None

    def _may_write(self, step, value, inplace) -> bool:
        """Whether ``value`` (produced at ``step``) may be written into its parameter."""
        param = self.writes[value.name]
        for name, params in self.param_views.items():
            if param not in params or self.last.get(name, -1) < step:
                continue
            reads_here = self.last[name] == step and name == param and \
                _overwritable(inplace, name)
            if not reads_here:
                return False
        return True

    def after(self, step, node, viewing: bool):
        """Record ``node``'s results (``viewing``: they may view its operands' buffers), then
        release the slots whose last reader was this node (scratch goes back to its pool)."""
        if viewing:
            for v in node.outputs:
                viewed = set().union(*(self.param_views.get(i.name, set())
                                       for i in node.inputs))
                if viewed:
                    self.param_views.setdefault(v.name, set()).update(viewed)
        for v in node.outputs:
            if v.name not in self.alias:
                may = set().union(*(self.alias.get(i.name, set()) for i in node.inputs)) \
                    if viewing else set()
                self.alias[v.name] = may
                for slot in may:
                    self.holders[slot].add(v.name)
        for v in list(node.inputs) + list(node.outputs):
            if self.last.get(v.name) == step:
                for slot in self.alias.get(v.name, ()):
                    holders = self.holders[slot]
                    if v.name in holders:
                        holders.discard(v.name)
                        if not holders and isinstance(slot, int):
                            self.free.setdefault(self.specs[slot], []).append(slot)

    def allocation(self, kernel_id: str, literal) -> tuple:
        """(header lines, body lines) that allocate the scratch arrays and the planned
        buffers' typed views once per ``buffers`` dict and bind them as ``b0..`` and
        ``a0..``; both empty when the kernel needs none."""
        if not self.specs and not self.views:
            return [], []
        header, idents = [], [f"b{i}" for i in range(len(self.specs))]
        specs = [(shape, dt) for shape, dt in self.specs]
        order = list(self.arena)  # planned buffers in order of first use
        specs += [((self.arena[buf],), "uint8") for buf in order]
        header.append(f"_BUFFERS = ({', '.join(f'({literal(s)}, {d!r})' for s, d in specs)},)"
                      f"  # scratch b0.. (shape, dtype), then the memory plan's buffers (bytes)")
        make = "_rt.allocate(_BUFFERS)"
        if self.views:
            first = len(self.specs)
            views = ", ".join(f"({first + order.index(buf)}, ({literal(shape)}, {dt!r}))"
                              for buf, (shape, dt) in self.views)
            idents += [f"a{i}" for i in range(len(self.views))]
            header += [f"_VIEWS = ({views},)  # a0..: (buffer, (shape, dtype)) over the plan's "
                       f"buffers",
                       "def _typed(raw):  # each planned buffer's leading bytes seen as a value",
                       f"    return raw[:{first}] + tuple(raw[i][:np.dtype(dt).itemsize * "
                       f"int(np.prod(shape))].view(dt).reshape(shape) for i, (shape, dt) in "
                       f"_VIEWS)"]
            make = f"_typed({make})"
        body = [f"_scratch = buffers.get({kernel_id!r})",
                "if _scratch is None:  # first call in this buffers dict: allocate once",
                f"    _scratch = buffers[{kernel_id!r}] = {make}",
                f"{', '.join(idents)}{',' if len(idents) == 1 else ''} = _scratch"]
        return header, body


def _same_spec(a, b) -> bool:
    """Whether scratch specs ``a`` and ``b`` (shape, dtype name) are one: symbolic sizes
    compared as sizes (``same_shape``), so that the question records no guard (a tuple ``==``
    on symbols would decide them equal or not for every later call)."""
    return a[1] == b[1] and same_shape(a[0], b[0])
