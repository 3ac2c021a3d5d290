"""Grad mode: no_grad / enable_grad / set_grad_enabled as context managers, decorators and calls,
checked against PyTorch's behaviour."""

import threading

import pytest
import torch

import graphnn


def _leaf(lib):
    return lib.tensor([1.0, -2.0, 3.0], requires_grad=True)


def _records(lib, x):
    return (x * 2).requires_grad


@pytest.mark.parametrize("lib", [torch, graphnn], ids=["torch", "graphnn"])
def test_context_managers_nest_and_restore(lib):
    x = _leaf(lib)
    with lib.no_grad():
        assert not lib.is_grad_enabled() and not _records(lib, x)
        with lib.enable_grad():
            assert lib.is_grad_enabled() and _records(lib, x)
        with lib.set_grad_enabled(True):
            assert _records(lib, x)
        assert not _records(lib, x)
    with lib.set_grad_enabled(False):
        assert not _records(lib, x)
    assert lib.is_grad_enabled() and _records(lib, x)


@pytest.mark.parametrize("lib", [torch, graphnn], ids=["torch", "graphnn"])
def test_decorators_apply_per_call_and_restore(lib):
    x = _leaf(lib)

    @lib.no_grad()
    def without(t):
        return _records(lib, t), lib.is_grad_enabled()

    @lib.enable_grad()
    def with_grad(t):
        return _records(lib, t)

    @lib.set_grad_enabled(False)
    def off(t):
        return _records(lib, t)

    assert lib.is_grad_enabled()  # building the decorators changed nothing
    assert without(x) == (False, False) and lib.is_grad_enabled()
    assert not off(x) and lib.is_grad_enabled()
    with lib.no_grad():
        assert with_grad(x) and not lib.is_grad_enabled()
    assert without.__name__ == "without"


@pytest.mark.parametrize("lib", [torch, graphnn], ids=["torch", "graphnn"])
def test_set_grad_enabled_as_a_plain_call_sets_the_mode(lib):
    try:
        lib.set_grad_enabled(False)
        assert not lib.is_grad_enabled() and not _records(lib, _leaf(lib))
    finally:
        lib.set_grad_enabled(True)
    assert lib.is_grad_enabled()


@pytest.mark.parametrize("lib", [torch, graphnn], ids=["torch", "graphnn"])
def test_mode_is_restored_after_an_exception(lib):
    @lib.no_grad()
    def fail():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        fail()
    with pytest.raises(KeyError):
        with lib.no_grad():
            raise KeyError("boom")
    assert lib.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = {}

    def worker():
        seen["enabled"] = graphnn.is_grad_enabled()
        seen["records"] = _records(graphnn, _leaf(graphnn))

    with graphnn.no_grad():
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert seen == {"enabled": True, "records": True}


def test_no_grad_results_are_leaves_that_do_not_require_grad():
    x = _leaf(graphnn)
    with graphnn.no_grad():
        y = x.exp()[1:] * 2
        z = graphnn.cat([x, y])
    assert y.grad_fn is None and y.is_leaf and not y.requires_grad and not z.requires_grad
    assert (x * 2).grad_fn is not None


def test_backward_still_runs_inside_no_grad_and_does_not_record_the_grad():
    def fn(lib):
        x = _leaf(lib)
        y = (x * x).sum()
        with lib.no_grad():
            y.backward()
        return x.grad.tolist(), x.grad.requires_grad, x.grad.grad_fn is None

    assert fn(graphnn) == fn(torch)


def test_graph_module_reexports_the_modes():
    assert graphnn.autograd.no_grad is graphnn.no_grad
    assert graphnn.autograd.enable_grad is graphnn.enable_grad
    assert graphnn.autograd.set_grad_enabled is graphnn.set_grad_enabled
