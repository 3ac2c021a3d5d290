"""Collectives as graph nodes: ``all_reduce(x, reduce="avg"|"sum", group=0)`` and
``broadcast(x, src=0, group=0)``.

A compiled data-parallel training step averages its gradients over the processes inside the
step: the traced step holds an ``all_reduce`` node per gradient bucket
(``graphnn.nn.parallel``), and a ``broadcast`` node per buffer that the forward copies from
rank 0. Backends run them as EXTERN units (their group, COLLECTIVE, has no kernel kind of its
own), i.e. by calling these reference implementations. Nothing runs them while compiling:
constant folding and the NumPy backend's load-time hoisting skip the group, since every rank
must run each collective at every call.

The reference implementations are the identity (a copy), which is right for a world of one
process. The real collective is supplied at run time: ``ir`` does not import
``graphnn.distributed``; instead ``graphnn.distributed`` installs an implementation here
(``set_implementation``) when a process group is initialised and removes it when the group is
destroyed. ``group`` is a small integer naming the process group (0: the default one) that the
installed implementation resolves. Every rank must run the same nodes in the same order (the
same graph on every rank does), as for eager collectives.

``all_reduce`` is differentiable: each rank's loss depends on every rank's ``x`` through it,
and the gradient of the sum of the ranks' losses with respect to this rank's ``x`` is the
same reduction of the incoming gradients (sum for ``"sum"``, mean for ``"avg"``), so its
gradient rule is an ``all_reduce`` of ``g`` with the same attributes. ``SyncBatchNorm``
(``graphnn.nn``) relies on it: autodiff of its traced statistics gives PyTorch's backward,
which all-reduces the sums of the gradients. Every rank must differentiate the same graph, so
the backward's collectives run in the same order everywhere. A data-parallel step's gradient
buckets are reduced after autodiff, in the update part. ``broadcast`` is not differentiable
(it copies buffers).
"""
from __future__ import annotations

from ..errors import DTypeError
from ..registry import Attr, NotDifferentiable, OpDef, OpGroup, register

_IMPLEMENTATION = {}  # op name -> fn(array, **attrs) -> a new array


def set_implementation(name: str, fn) -> None:
    """Install ``fn(array, **attrs) -> array`` as collective ``name``'s runtime (None: the
    identity reference again). ``fn`` must not write into ``array``."""
    if fn is None:
        _IMPLEMENTATION.pop(name, None)
    else:
        _IMPLEMENTATION[name] = fn


def _infer(types, *, reduce, group):
    (x,) = types
    if reduce == "avg" and not x.dtype.is_floating_point:
        raise DTypeError(f"all_reduce: reduce='avg' needs a floating-point tensor, got "
                         f"{x.dtype.name}")
    return x


def _implementation(name):
    """Op ``name``'s implementation: the installed collective, else the identity (a copy)."""
    def run(x, **attrs):
        fn = _IMPLEMENTATION.get(name)
        return x.copy() if fn is None else fn(x, **attrs)
    return run


def _grad_all_reduce(b, ctx, g):
    return [b.all_reduce(g, reduce=ctx.attrs["reduce"], group=ctx.attrs["group"])]


def _same_type(types, **attrs):
    return types[0]


register(OpDef(name="all_reduce", group=OpGroup.COLLECTIVE, infer=_infer,
               impl=_implementation("all_reduce"),
               grad=_grad_all_reduce,
               attrs={"reduce": Attr("str", "avg", ("avg", "sum")), "group": Attr("int", 0)},
               saves_inputs=(),
               doc="the sum or mean of x over the processes of a group (identity for one "
                   "process; graphnn.distributed supplies the collective at run time)"))

register(OpDef(name="broadcast", group=OpGroup.COLLECTIVE, infer=_same_type,
               impl=_implementation("broadcast"),
               grad=NotDifferentiable("broadcast: a collective over processes; compiled steps "
                                      "apply it to buffers"),
               attrs={"src": Attr("int", 0), "group": Attr("int", 0)}, saves_inputs=(),
               doc="rank src's x on every process of a group (identity for one process; "
                   "graphnn.distributed supplies the collective at run time)"))
