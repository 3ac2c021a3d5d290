"""A differentiable all-reduce (``torch.distributed.nn.functional.all_reduce``'s, SUM only).

``all_reduce(x)`` returns a new tensor holding the sum of ``x`` over every rank: the registry op
``all_reduce`` (``graph_ops.all_reduce_node``), so it runs eagerly and inside compiled code
alike. Each rank's loss then depends on every rank's ``x``; the gradient of the sum of all
ranks' losses with respect to this rank's ``x`` is the sum over ranks of their gradients at the
result, so the op's gradient rule is an all-reduce (SUM) of the incoming gradient. Every rank
must run the backward through it, in the same order as its other collectives (the same graph
on every rank does).
"""
from __future__ import annotations

from ..ir.errors import UnsupportedError
from . import collectives
from .graph_ops import all_reduce_node


def all_reduce(tensor, op=collectives.ReduceOp.SUM, group=None):
    """The sum of ``tensor`` over the ranks, as a new tensor that autograd differentiates."""
    if op is not collectives.ReduceOp.SUM:
        raise UnsupportedError("graphnn.distributed.functional.all_reduce: only ReduceOp.SUM "
                               "is differentiable here")
    return all_reduce_node(tensor, op, group)
