"""Collectives inside compiled code: the runtime of the IR's ``all_reduce`` and ``broadcast``
nodes.

``graphnn/ir/ops/collective.py`` defines the nodes with the identity as their reference
implementation; ``install()`` (called by ``init_process_group``) replaces that by
``_all_reduce_array`` and ``_broadcast_array``, which run the ``torch.distributed`` collective
on a copy of the array the kernel hands them, and ``uninstall()`` (``destroy_process_group``)
puts the identity back. A node names its process group by a small integer (``group_id``: 0
for the default group, then 1, 2, ... in the order groups first reach a compiled step in this
process).

``all_reduce_node(tensor, op, group)`` and ``broadcast_node(tensor, src, group)`` apply the ops
to a tensor: while a trace runs they record the node (also for a concrete tensor, which a trace
would otherwise compute on at trace time: a collective must run at every call, on every
rank), eagerly they run the collective (a new tensor; ``all_reduce`` is differentiated by its
gradient rule, an all-reduce of the incoming gradient).
"""
from __future__ import annotations

from ..frontend import trace_state
from ..frontend.dispatch import apply_op
from ..ir.ops import collective
from ..ir.torch_arrays import from_torch, to_torch
from .collectives import ReduceOp, _torch_op
from .process_group import _require_group, describe_failure

_GROUPS = {0: None}  # group id -> the torch process group (None: the default one)


def group_id(group) -> int:
    """The node attribute naming ``group`` (None: the default group, 0)."""
    for key, known in _GROUPS.items():
        if known is group:
            return key
    key = len(_GROUPS)
    _GROUPS[key] = group
    return key


def _all_reduce_array(array, reduce: str, group: int):
    """``array`` combined over the group's ranks, as a new array: SUM, or AVG (SUM then a
    division where the backend has no AVG, as the eager ``collectives.all_reduce``)."""
    dist = _require_group()
    torch_group = _GROUPS[group]
    shared = to_torch(array.copy())
    torch_op, divide = _torch_op(dist, ReduceOp[reduce.upper()], torch_group)
    try:
        dist.all_reduce(shared, torch_op, torch_group)
    except RuntimeError as err:
        raise describe_failure("all_reduce (compiled)", err, torch_group) from err
    if divide:
        shared.div_(dist.get_world_size(torch_group))
    return from_torch(shared)


def _broadcast_array(array, src: int, group: int):
    """Rank ``src``'s ``array`` on every rank of the group, as a new array."""
    dist = _require_group()
    torch_group = _GROUPS[group]
    shared = to_torch(array.copy())
    try:
        dist.broadcast(shared, src, torch_group)
    except RuntimeError as err:
        raise describe_failure(f"broadcast from rank {src} (compiled)", err, torch_group) \
            from err
    return from_torch(shared)


def install() -> None:
    collective.set_implementation("all_reduce", _all_reduce_array)
    collective.set_implementation("broadcast", _broadcast_array)


def uninstall() -> None:
    collective.set_implementation("all_reduce", None)
    collective.set_implementation("broadcast", None)
    for key in [k for k in _GROUPS if k]:
        del _GROUPS[key]


def _apply(name: str, tensor, attrs: dict):
    """Registry op ``name`` on ``tensor``, recorded as a node whenever a trace runs."""
    state = trace_state.active()
    if state is not None and state.symbol(tensor) is None:
        tensor = trace_state.symbolic(state.value(tensor))
    return apply_op(name, [tensor], attrs)[0]


def all_reduce_node(tensor, op=ReduceOp.AVG, group=None):
    """The registry op ``all_reduce`` of ``tensor`` (SUM or AVG) over ``group``: a graph node
    while a trace runs, the collective itself eagerly; a new tensor either way."""
    if op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise ValueError(f"all_reduce_node: SUM or AVG, got {op}")
    return _apply("all_reduce", tensor, {"reduce": op.value.lower(), "group": group_id(group)})


def broadcast_node(tensor, src: int = 0, group=None):
    """The registry op ``broadcast`` of ``tensor`` from rank ``src`` over ``group``: a graph
    node while a trace runs, the collective itself eagerly; a new tensor either way."""
    return _apply("broadcast", tensor, {"src": src, "group": group_id(group)})
