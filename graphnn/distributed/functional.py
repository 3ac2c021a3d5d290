"""A differentiable all-reduce (``torch.distributed.nn.functional.all_reduce``'s, SUM only).

``all_reduce(x)`` returns a new tensor holding the sum of ``x`` over every rank. Each rank's
loss then depends on every rank's ``x``; the gradient of the sum of all ranks' losses with
respect to this rank's ``x`` is the sum over ranks of their gradients at the result, so the
backward is an all-reduce (SUM) of the incoming gradient. Every rank must run the backward
through it, in the same order as its other collectives (the same graph on every rank does).
"""
from __future__ import annotations

from ..frontend.boundary import pass_through
from ..frontend.grad_mode import is_grad_enabled
from ..ir.errors import UnsupportedError
from . import collectives


def _summed(tensor, group):
    out = tensor.clone()
    collectives.all_reduce(out, group=group)
    return out


def all_reduce(tensor, op=collectives.ReduceOp.SUM, group=None):
    """The sum of ``tensor`` over the ranks, as a new tensor that autograd differentiates."""
    if op is not collectives.ReduceOp.SUM:
        raise UnsupportedError("graphnn.distributed.functional.all_reduce: only ReduceOp.SUM "
                               "is differentiable here")
    out = tensor.clone()
    if out.requires_grad and is_grad_enabled():
        out, = pass_through([out], lambda grads: (_summed(grads[0], group),),
                            name="AllReduceBackward")
    collectives.all_reduce(out, group=group)
    return out
