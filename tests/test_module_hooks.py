"""Module hooks against torch: forward pre/post hooks (prepend, with_kwargs, always_call),
full backward pre/post hooks, global module hooks and removable handles."""
import warnings

import numpy as np
import pytest
import torch

import graphnn
from module_oracle import same_as_torch

RNG = np.random.default_rng(2)
W, X, Y = RNG.standard_normal(3), RNG.standard_normal(3), RNG.standard_normal(3)


def _scale(lib):
    class Scale(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.tensor(W))

        def forward(self, x, y=None):
            out = x * self.w
            return out if y is None else out + y

    return Scale()


def _globals(lib):
    """The global hook registration functions (torch keeps them in nn.modules.module)."""
    return lib.nn.modules.module if lib is torch else lib.nn


def _values(grads):
    return [None if g is None else g for g in grads]


# ---- forward hooks ----------------------------------------------------------------------------

def test_forward_hook_order_prepend_and_kwargs():
    def scenario(lib):
        m, log = _scale(lib), []
        m.register_forward_pre_hook(lambda mod, a: log.append(("pre1", len(a))))
        m.register_forward_pre_hook(lambda mod, a: log.append(("pre0",)), prepend=True)
        m.register_forward_pre_hook(lambda mod, a, k: log.append(("prek", sorted(k))),
                                    with_kwargs=True)
        m.register_forward_hook(lambda mod, a, o: log.append(("fh", o)))
        m.register_forward_hook(lambda mod, a, k, o: log.append(("fhk", sorted(k))),
                                with_kwargs=True)
        m.register_forward_hook(lambda mod, a, o: log.append(("fh0",)), prepend=True)
        out = m(lib.tensor(X), y=lib.tensor(Y))
        return out, log
    same_as_torch(scenario)


def test_forward_hooks_replace_inputs_kwargs_and_output():
    def scenario(lib):
        m = _scale(lib)
        m.register_forward_pre_hook(lambda mod, a: a[0] + 1)  # a single value is wrapped
        m.register_forward_pre_hook(lambda mod, a, k: ((a[0] * 10,), {"y": lib.tensor(Y)}),
                                    with_kwargs=True)
        m.register_forward_hook(lambda mod, a, o: o + a[0])
        m.register_forward_hook(lambda mod, a, k, o: o * k["y"], with_kwargs=True)
        x = lib.tensor(X, requires_grad=True)
        out = m(x)
        out.sum().backward()
        return out, x.grad, m.w.grad
    same_as_torch(scenario)


@pytest.mark.parametrize("bad", [5, (1, 2, 3), ((1,),)])
def test_forward_pre_hook_with_kwargs_must_return_pair(bad):
    def scenario(lib):
        m = _scale(lib)
        m.register_forward_pre_hook(lambda mod, a, k: bad, with_kwargs=True)
        return m(lib.tensor(X))
    same_as_torch(scenario)


def test_always_call_hooks_run_when_forward_raises():
    def scenario(lib):
        m, log = _scale(lib), []
        m.register_forward_hook(lambda mod, a, o: log.append(("always", o)), always_call=True)
        m.register_forward_hook(lambda mod, a, o: log.append("normal"))
        m.register_forward_hook(lambda mod, a, k, o: log.append(("kw", sorted(k))),
                                with_kwargs=True, always_call=True)
        try:
            m(lib.ones(4), y=None)
        except RuntimeError:
            log.append("raised")
        m(lib.tensor(X))
        return log
    same_as_torch(scenario)


def test_global_always_call_hook_runs_when_forward_raises():
    def scenario(lib):
        log = []
        handle = _globals(lib).register_module_forward_hook(
            lambda mod, a, o: log.append((type(mod).__name__, o)), always_call=True)
        try:
            lib.nn.Sequential(_scale(lib))(lib.ones(4))
        except RuntimeError:
            log.append("raised")
        finally:
            handle.remove()
        return log
    same_as_torch(scenario)


def test_always_call_hook_errors_are_silenced_in_favour_of_the_forward_error():
    m = _scale(graphnn)
    m.register_forward_hook(lambda mod, a, o: 1 / 0, always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match=r"^Scale \(root module\): "):
            m(graphnn.ones(4))
    assert any("always_call=True" in str(w.message) for w in caught)


def test_handles_remove_once_and_work_as_context_managers():
    def scenario(lib):
        m, log = _scale(lib), []
        h = m.register_forward_hook(lambda mod, a, o: log.append("x"), always_call=True,
                                    with_kwargs=False)
        m(lib.tensor(X))
        h.remove()
        h.remove()
        with m.register_forward_hook(lambda mod, a, o: o * 0):
            inside = m(lib.tensor(X))
        return log, inside, m(lib.tensor(X)), len(m._forward_hooks), \
            len(m._forward_hooks_always_called)
    same_as_torch(scenario)


def test_global_forward_hooks_fire_first_for_every_module():
    def scenario(lib):
        log = []
        g = _globals(lib)
        handles = [g.register_module_forward_pre_hook(
                       lambda mod, a: log.append(("gpre", type(mod).__name__))),
                   g.register_module_forward_hook(
                       lambda mod, a, o: log.append(("gpost", type(mod).__name__))),
                   g.register_module_forward_hook(
                       lambda mod, a, k, o: log.append(("gkw", sorted(k))), with_kwargs=True)]
        try:
            seq = lib.nn.Sequential(_scale(lib))
            seq[0].register_forward_pre_hook(lambda mod, a: log.append("pre"))
            seq[0].register_forward_hook(lambda mod, a, o: log.append("post"))
            seq(lib.tensor(X))
        finally:
            for h in handles:
                h.remove()
        seq(lib.tensor(X))
        return log
    same_as_torch(scenario)


# ---- backward hooks ---------------------------------------------------------------------------

def test_backward_hooks_see_and_replace_gradients():
    def scenario(lib):
        m, log = _scale(lib), []
        m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", go)))
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))
        m.register_full_backward_hook(lambda mod, gi, go: log.append(("post", gi, go)))
        m.register_full_backward_hook(lambda mod, gi, go: (gi[0] + 100,))
        m.register_full_backward_hook(lambda mod, gi, go: log.append(("first", gi)),
                                      prepend=True)
        x = lib.tensor(X, requires_grad=True)
        (m(x) * lib.tensor(Y)).sum().backward()
        return log, x.grad, m.w.grad
    same_as_torch(scenario)


def test_global_backward_hooks_run_before_module_hooks():
    def scenario(lib):
        log = []
        g = _globals(lib)
        handles = [g.register_module_full_backward_pre_hook(
                       lambda mod, go: log.append(("gpre", go))),
                   g.register_module_full_backward_hook(
                       lambda mod, gi, go: log.append(("gpost", gi)))]
        m = _scale(lib)
        m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", go)))
        m.register_full_backward_hook(lambda mod, gi, go: log.append(("post", gi, go)))
        x = lib.tensor(X, requires_grad=True)
        try:
            (m(x) * lib.tensor(Y)).sum().backward()
        finally:
            for h in handles:
                h.remove()
        return log, x.grad
    same_as_torch(scenario)


def test_grad_input_covers_every_positional_argument():
    def scenario(lib):
        class Mixed(lib.nn.Module):
            def forward(self, a, scale, b, c):
                return a * scale + b * c

        log = []
        m = Mixed()
        m.register_full_backward_hook(lambda mod, gi, go: log.append((_values(gi), go)))
        a = lib.tensor(X, requires_grad=True)
        b = lib.tensor(Y)  # a tensor that does not require grad gets a zero gradient
        c = lib.tensor(W, requires_grad=True)
        m(a, 2.0, b, c).sum().backward()
        return log, a.grad, c.grad
    same_as_torch(scenario)


def test_grad_output_is_none_for_unused_outputs():
    def scenario(lib):
        class Two(lib.nn.Module):
            def forward(self, a, b):
                return a * 2, b * 3, "label"

        log = []
        m = Two()
        m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", _values(go))))
        m.register_full_backward_hook(
            lambda mod, gi, go: log.append(("post", _values(gi), _values(go))))
        a = lib.tensor(X, requires_grad=True)
        b = lib.tensor(Y, requires_grad=True)
        out = m(a, b)
        out[0].sum().backward()
        return log, a.grad, b.grad, out[2]
    same_as_torch(scenario)


def test_backward_hook_without_input_gradients_fires_from_the_outputs():
    def scenario(lib):
        m, log = _scale(lib), []
        m.register_full_backward_hook(lambda mod, gi, go: log.append((_values(gi), go)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m(lib.tensor(X)).sum().backward()
        return log, m.w.grad, any("no inputs require gradients" in str(w.message)
                                  for w in caught)
    same_as_torch(scenario)


@pytest.mark.parametrize("returned", ["grads", "nones"])
def test_backward_hook_without_input_gradients_may_only_return_none(returned):
    def scenario(lib):
        m = _scale(lib)
        m.register_full_backward_hook(
            lambda mod, gi, go: go if returned == "grads" else (None,))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m(lib.tensor(X)).sum().backward()
        return m.w.grad
    same_as_torch(scenario)


@pytest.mark.parametrize("which", ["hook", "pre_hook"])
def test_backward_hooks_returning_wrong_counts_fail_as_torch(which):
    def scenario(lib):
        m = _scale(lib)
        if which == "hook":
            m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
        else:
            m.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0]))
        m(lib.tensor(X, requires_grad=True)).sum().backward()
    same_as_torch(scenario)


def test_backward_hooks_skip_under_no_grad_and_removed_hooks():
    def scenario(lib):
        m, log = _scale(lib), []
        handle = m.register_full_backward_hook(lambda mod, gi, go: log.append("removed"))
        m.register_full_backward_pre_hook(lambda mod, go: log.append("pre"))
        handle.remove()
        x = lib.tensor(X, requires_grad=True)
        with lib.no_grad():
            frozen = m(x)
        m(x).sum().backward()
        return log, frozen.requires_grad, x.grad
    same_as_torch(scenario)


def test_backward_hooks_fire_per_call_in_nested_modules():
    def scenario(lib):
        log = []
        inner = _scale(lib)
        outer = lib.nn.Sequential(inner, lib.nn.Sequential(_scale(lib)))
        for name, mod in outer.named_modules():
            mod.register_full_backward_hook(
                lambda m, gi, go, name=name: log.append((name, _values(gi), go)))
        x = lib.tensor(X, requires_grad=True)
        outer(x).sum().backward()
        inner(x).sum().backward()  # a second, separate call of the same module
        return log, x.grad
    same_as_torch(scenario)


def test_hooks_demo_replaces_input_gradients_with_42():
    """The backward-hook example of the Modules note, on a Linear layer."""
    def scenario(lib):
        m = lib.nn.Linear(3, 3)
        m.load_state_dict({"weight": lib.tensor(np.outer(W, X)), "bias": lib.tensor(Y)})
        m.register_full_backward_hook(
            lambda mod, gi, go: [lib.ones_like(g) * 42. for g in gi])
        x = lib.tensor(np.stack([X, Y]).astype(np.float32), requires_grad=True)
        m(x).sum().backward()
        return x.grad, m.weight.grad, m.bias.grad
    result = same_as_torch(scenario, rtol=1e-5)
    assert result[0][3] == [[42.0] * 3] * 2
