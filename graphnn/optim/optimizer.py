"""The optimizer base class: parameter groups, per-parameter state, state dicts.

Follows ``torch.optim.Optimizer``: the same constructor forms, group/state layout, state-dict
format and error messages, so code and checkpoints written for PyTorch's optimizers carry over.
A subclass only validates its hyper-parameters and implements ``_update_group``.
"""
from __future__ import annotations

import copy
import warnings
from collections import defaultdict

from ..frontend.autograd_api import zero_grads
from ..frontend.grad_mode import enable_grad, no_grad
from ..frontend.tensor import Tensor
from ..frontend.trace_state import is_symbolic
from ..ir.dtypes import float64
from ..ir.errors import GraphnnError


class OptimizerError(GraphnnError, ValueError):
    """Bad optimizer input: an invalid hyper-parameter, parameter list or state dict."""


class OptimizerTypeError(GraphnnError, TypeError):
    """Something that is not a tensor (or a dict of them) was given as parameters."""


class Optimizer:
    """Holds ``param_groups`` (dicts with ``'params'`` plus every default) and ``state``.

    ``params`` is an iterable of tensors (one group) or of dicts (one group each, each dict
    overriding some defaults). ``state`` maps a parameter tensor to its dict of buffers; a
    parameter gets state only once it is stepped with a gradient.

    ``HYPER`` names the group entries (numbers, 0-d tensors, or tuples of numbers such as
    ``betas``) whose values the update's arithmetic reads through ``hyper``: a compiled step
    takes them as runtime inputs, so a learning-rate schedule changes them without
    recompiling. The update decides its branches (``weight_decay != 0``) on the group's own
    values, and only on the sign of the entries named in ``SIGN_BRANCHES``, which a compiled
    step keys on.
    """

    HYPER: tuple = ()
    SIGN_BRANCHES: tuple = ()
    _hyper_source = None  # set while a compiled step is traced (compiler/hyper_inputs.py)

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise OptimizerTypeError("params argument given to the optimizer should be an "
                                     "iterable of Tensors or dicts, but got graphnn.Tensor")
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        groups = list(params)
        if not groups:
            raise OptimizerError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ---- parameter groups ---------------------------------------------------------------------

    def add_param_group(self, param_group: dict) -> None:
        """Append a group; missing options take the optimizer's defaults.

        Raises (and adds nothing) when ``params`` is empty, holds a non-tensor or a non-leaf, or
        shares a tensor with an existing group. The caller's dict is not modified.
        """
        if not isinstance(param_group, dict):
            raise OptimizerTypeError(f"param_group must be a dict, but got "
                                     f"{type(param_group).__name__}")
        group = dict(param_group)
        params = group.get("params")
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise OptimizerTypeError("optimizer parameters need to be organized in ordered "
                                     "collections, but the ordering of tensors in sets will "
                                     "change between runs. Please use a list instead.")
        else:
            params = list(params)
        if not params:
            raise OptimizerError("optimizer got an empty parameter list")
        for p in params:
            if not isinstance(p, Tensor):
                raise OptimizerTypeError(f"optimizer can only optimize Tensors, but one of the "
                                         f"params is {type(p).__name__}")
            if not (p.is_leaf or p.retains_grad):
                raise OptimizerError("can't optimize a non-leaf Tensor")
        group["params"] = params
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; "
                          "in future, this will cause an error", stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise OptimizerError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's ``.grad`` (default), or zero it in place and detach it."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    # ---- stepping -----------------------------------------------------------------------------

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s value.

        The closure (if given) runs with grad mode on, before the update; the update itself runs
        under ``no_grad`` and changes parameters and state in place.
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    self._update_group(group, params)
        return loss

    def hyper(self, group: dict, name: str):
        """``group[name]`` (an entry of ``HYPER``) for arithmetic: the value itself eagerly;
        while a compiled step is traced, 0-d graph inputs standing for it (a tuple of them for a
        tuple), which the compiled step reads from the group at every call."""
        source = self._hyper_source
        return group[name] if source is None else source(self, group, name)

    def _update_group(self, group: dict, params: list) -> None:
        """Update ``params`` (those of ``group`` with a gradient) in place; run under no_grad."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _update_group")

    # ---- state dicts --------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """``{'state': {index: buffers}, 'param_groups': [{options, 'params': [indices]}]}``.

        Parameters are numbered in group order, as PyTorch does. Like PyTorch, the buffers are
        the live state tensors (not copies): deep-copy the dict to keep a snapshot.
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v
                 for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Replace options and state by those of ``state_dict`` (from ``state_dict()``).

        Validates the group count and sizes first (PyTorch's messages) and changes nothing when
        it raises. Groups keep their own parameter tensors. State tensors are copied (moved to
        the parameter's device and cast to its floating dtype, except ``'step'``), so the loaded
        optimizer never shares buffers with the source dict; PyTorch may alias them, graphnn
        never does.
        """
        saved_groups = state_dict["param_groups"]
        if len(self.param_groups) != len(saved_groups):
            raise OptimizerError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"])
               for g, s in zip(self.param_groups, saved_groups)):
            raise OptimizerError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        id_map = {saved: p for g, s in zip(self.param_groups, saved_groups)
                  for saved, p in zip(s["params"], g["params"])}
        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = {k: _copy_state_value(param, k, v) for k, v in value.items()}
            else:
                state[key] = copy.deepcopy(value)
        new_groups = []
        for group, saved in zip(self.param_groups, saved_groups):
            new_group = copy.deepcopy({k: v for k, v in saved.items() if k != "params"})
            new_group["params"] = group["params"]
            new_groups.append(new_group)
        self.state, self.param_groups = state, new_groups

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines) + "\n)"


def step_count(step):
    """A step-count state tensor as a number for the update's arithmetic: a Python float
    eagerly; while a compiled step is traced (the count is a graph value) a float64 0-d tensor,
    so that arithmetic on it runs in double precision either way and the traced step matches
    the eager one."""
    return step.to(float64) if is_symbolic(step) else step.item()


def _copy_state_value(param: Tensor, key, value):
    """A copy of one state entry; tensors other than 'step' go to ``param``'s device (a
    checkpoint loads on the CPU), floating ones in ``param``'s dtype, as PyTorch casts them."""
    if isinstance(value, Tensor):
        if key != "step":
            if param.is_floating_point() and value.is_floating_point():
                value = value.to(param.dtype)
            value = value.to(param.device)
        return value.detach().clone()
    return copy.deepcopy(value)
