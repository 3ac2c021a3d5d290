"""Gradient averaging for ``DistributedDataParallel``: buckets, hooks, all-reduces.

Parameters are grouped into buckets in reverse registration order (roughly the order backward
produces their gradients), one dtype and device per bucket, the first bucket capped at 1 MiB
and the others at ``bucket_cap_mb``, as PyTorch's DDP. Each parameter has a tensor hook
(``register_hook``: graphnn's autograd calls it with the incoming gradient just before adding it
into ``.grad``). In a synchronised iteration the hook takes the parameter's whole local gradient
(``.grad`` accumulated under ``no_sync`` plus the incoming one), sets ``.grad`` aside, and marks
the parameter ready; a bucket whose parameters are all ready is flattened and all-reduced
asynchronously, so the reduction overlaps the rest of the backward. Buckets are launched in
index order, so every rank issues the same collectives in the same order.

The hook of the last parameter to become ready waits for every bucket, writes the averaged
gradients into the other parameters' ``.grad`` (their accumulation is done: the engine runs a
leaf's hook and then its accumulation before moving on) and returns its own average, which the
engine stores into its ``.grad``. So when ``backward()`` returns, every ``.grad`` holds the
average over ranks.

In a traced (compiled) step no hook runs: ``DistributedDataParallel.forward`` arms the trace's
backward with ``reduce_traced`` instead (``frontend.traced_backward.reduce_gradients``), which
averages the same buckets with one ``all_reduce`` graph node each (flatten, reduce, split), so
the compiled step computes what the hooks compute, in the same order. The hooks are marked
(``mark_traced``) so that compiling does not fall back to eager because of them.

With ``find_unused_parameters`` the forward's outputs are searched for the parameters the
graph reaches; the others are ready at once with their current ``.grad`` (zeros when None), and
a used-anywhere mask is all-reduced with the buckets: a parameter no rank used keeps its
``.grad`` untouched (None stays None).

The traced step does the same: a parameter the traced backward does not reach puts its
``.grad`` (zeros when None) into its bucket, and after the buckets an ``all_reduce`` (SUM)
node of this rank's usage bitmap (a constant of its graph) says which parameters some rank
used. A parameter with a local gradient (used here, or with a ``.grad``) ends with
``where(used somewhere, average, local)`` (for one used here, the average; taking the bitmap
into every result keeps its node in each rank's graph, so every rank runs it even where all
parameters are used). One whose ``.grad`` is None and that the backward does not reach must
end with a tensor or None, which a graph cannot leave to run time: the trace takes it from
the last eager reduction (the compiled step's eager warm-up call), so it ends with the
average if some rank used it then and stays None otherwise. That is exact as long as which
parameters each rank's graph uses stays as it was in that call (docs/distributed.md).
"""
from __future__ import annotations

from ...distributed import collectives
from ...distributed.graph_ops import all_reduce_node
from ...distributed.process_group import DistributedError
from ...ir.errors import UnsupportedError
from ...frontend.creation import tensor, zeros, zeros_like
from ...frontend.grad_mode import no_grad
from ...frontend.traced_backward import mark_traced
from ...frontend.tensor_math import where
from ...frontend.tensor_shape import cat

FIRST_BUCKET_BYTES = 1024 * 1024

UNFINISHED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. "
    "This error indicates that your module has parameters that were not used in producing loss "
    "(or that backward() was not called after the last synchronised forward). You can enable "
    "unused parameter detection by passing the keyword argument `find_unused_parameters=True` "
    "to `graphnn.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
    "function outputs participate in calculating loss.")


def assign_buckets(params, cap_bytes: int):
    """Lists of parameter indices: reverse order, one dtype and device each, the first list up
    to ``FIRST_BUCKET_BYTES`` and the others up to ``cap_bytes`` (a parameter larger than the
    cap has a bucket of its own)."""
    buckets, size, key = [], 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.element_size()
        cap = FIRST_BUCKET_BYTES if len(buckets) == 1 else cap_bytes
        new_key = (p.dtype, str(p.device))
        if not buckets or new_key != key or (buckets[-1] and size + nbytes > cap):
            buckets.append([])
            size, key = 0, new_key
        buckets[-1].append(i)
        size += nbytes
    return buckets


def reached_leaves(outputs) -> set:
    """ids of the leaf tensors whose gradient the graph of ``outputs`` (tensors inside nested
    tuples, lists and dicts) reaches."""
    stack, seen, leaves = list(_grad_nodes(outputs)), set(), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        ref = getattr(node, "tensor_ref", None)
        if ref is not None and ref() is not None:
            leaves.add(id(ref()))
        stack.extend(edge[0] for edge in node.edges if edge is not None)
    return leaves


def _grad_nodes(value):
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _grad_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _grad_nodes(v)
    elif getattr(value, "requires_grad", False):
        yield value.grad_fn if value.grad_fn is not None else value._accumulator()


class Reducer:
    """Averages the gradients of ``params`` over the ranks of ``group`` (see the module
    docstring). ``prepare(outputs)`` arms one synchronised backward."""

    def __init__(self, params, group, bucket_cap_bytes: int, find_unused: bool):
        self.params = params
        self.group = group
        self.find_unused = find_unused
        self.buckets = assign_buckets(params, bucket_cap_bytes)
        self.bucket_of = {i: b for b, bucket in enumerate(self.buckets) for i in bucket}
        self.active = False
        self.global_used = None  # the last eager reduction's used-on-some-rank flags
        self.handles = [p.register_hook(mark_traced(self._hook(i)))
                        for i, p in enumerate(params)]

    def check_finished(self) -> None:
        """Raise unless the last armed backward's reduction completed."""
        if self.active:
            raise DistributedError(UNFINISHED)

    def prepare(self, outputs) -> None:
        """Arm the reduction of the coming backward of ``outputs``."""
        self.check_finished()
        self.active = True
        self.local = [None] * len(self.params)
        self.missing = [len(bucket) for bucket in self.buckets]
        self.flat, self.works, self.next_bucket = [None] * len(self.buckets), [], 0
        self.used = zeros(len(self.params), device=self.params[0].device if self.params else None)
        if not self.find_unused:
            return
        reached = reached_leaves(outputs)
        for i, p in enumerate(self.params):
            if id(p) not in reached:
                self._ready(i, zeros_like(p) if p.grad is None else p.grad, used=False)
        if all(m == 0 for m in self.missing):
            self._finish(current=None)

    def reduce_traced(self, local, used):
        """The averages of the local gradients ``local`` (one per parameter, in order; None
        for a parameter unused here whose ``.grad`` is None) while a trace runs: per bucket,
        the flattened gradients (zeros for None) concatenated, one ``all_reduce`` node (AVG),
        split back into the parameters' shapes. ``used`` says which parameters the backward
        reached; for the others, see the module docstring (a result None leaves ``.grad``)."""
        out = [None] * len(self.params)
        for bucket in self.buckets:
            flat = cat([(zeros(self.params[i].numel(), dtype=self.params[i].dtype,
                               device=self.params[i].device) if local[i] is None
                         else local[i].reshape(-1)) for i in bucket])
            averaged = all_reduce_node(flat, collectives.ReduceOp.AVG, self.group)
            offset = 0
            for i in bucket:
                n = self.params[i].numel()
                out[i] = averaged[offset:offset + n].reshape(self.params[i].shape)
                offset += n
        if not self.find_unused:
            return out
        if self.global_used is None and None in local:
            raise UnsupportedError("DistributedDataParallel: find_unused_parameters=True is "
                                   "compiled after an eager synchronised iteration (the "
                                   "compiled step's warm-up call), which says which parameters "
                                   "some rank uses")
        flags = tensor([float(u) for u in used], device=self.params[0].device)
        flags = flags + averaged[:0].sum()  # 0, but after the buckets, as eagerly
        somewhere = all_reduce_node(flags, collectives.ReduceOp.SUM, self.group) > 0
        for i, gradient in enumerate(local):
            if gradient is not None:  # on every parameter: the bitmap's node stays live
                out[i] = where(somewhere[i], out[i], gradient)
            elif not self.global_used[i]:
                out[i] = None
        return out

    def _hook(self, index):
        def hook(grad):
            if not self.active:
                return None  # no_sync, or a backward of a forward DDP did not run
            if self.local[index] is not None:
                raise DistributedError(f"Expected to mark a variable ready only once: "
                                       f"parameter {index} got a gradient after being marked "
                                       f"ready (unused) or twice in one backward")
            p = self.params[index]
            with no_grad():
                total = grad if p.grad is None else p.grad + grad
            p.grad = None
            self._ready(index, total, used=True)
            if all(m == 0 for m in self.missing):
                return self._finish(current=index)
            return total
        return hook

    def _ready(self, index, gradient, used: bool) -> None:
        self.local[index] = gradient
        if used:
            self.used[index] = 1.0
        self.missing[self.bucket_of[index]] -= 1
        while self.next_bucket < len(self.buckets) and self.missing[self.next_bucket] == 0:
            self._launch(self.next_bucket)
            self.next_bucket += 1

    def _launch(self, b: int) -> None:
        with no_grad():
            flat = cat([self.local[i].detach().reshape(-1) for i in self.buckets[b]])
        self.flat[b] = flat
        self.works.append(collectives.all_reduce(flat, collectives.ReduceOp.AVG, self.group,
                                                 async_op=True))

    def _finish(self, current):
        """Wait for every bucket, write the averages into ``.grad`` (all but ``current``'s);
        return ``current``'s average."""
        if self.find_unused:
            collectives.all_reduce(self.used, collectives.ReduceOp.MAX, self.group)
        for work in self.works:
            work.wait()
        result = None
        used = self.used.tolist()
        self.global_used = used
        for b, bucket in enumerate(self.buckets):
            offset = 0
            for i in bucket:
                p = self.params[i]
                n = p.numel()
                avg = self.flat[b][offset:offset + n].reshape(p.shape).clone()
                offset += n
                if i == current:
                    result = avg
                elif used[i]:
                    p.grad = avg
        self.active, self.local, self.flat, self.works = False, None, None, None
        return result
