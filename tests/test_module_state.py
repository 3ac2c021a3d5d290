"""state_dict / load_state_dict against torch: keys, values, metadata, hooks, extra state,
strict and assign modes, error messages, and (graphnn's guarantee) no change on error."""
import numpy as np
import pytest
import torch

import graphnn
from graphnn import nn
from module_oracle import same_as_torch

RNG = np.random.default_rng(1)
A, B, C = RNG.standard_normal((2, 3)), RNG.standard_normal(3), RNG.standard_normal(4)


def _model(lib, extra_state=False):
    """Root(inner: Inner(weight, bias=None, running, count, scratch non-persistent), head,
    nothing=None) with optional extra state on the inner module."""
    class Inner(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.tensor(A))
            self.register_parameter("bias", None)
            self.register_buffer("running", lib.tensor(B))
            self.register_buffer("count", lib.tensor(3))
            self.register_buffer("scratch", lib.ones(2), persistent=False)
            self.register_buffer("empty", None)
            self.note = "initial"

        if extra_state:
            def get_extra_state(self):
                return {"note": self.note}

            def set_extra_state(self, state):
                self.note = state["note"]

    class Root(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.head = lib.nn.Parameter(lib.tensor(C))
            self.add_module("nothing", None)

    return Root()


def _state(lib, m):
    return [(k, v) for k, v in m.state_dict(keep_vars=True).items()] + \
        [("note", m.inner.note), ("scratch", m.inner.scratch)]


def _shifted(lib, m, by=1.0):
    """The module's own state dict with every floating value moved by ``by``."""
    return {k: (v + by if v.is_floating_point() else v + 1) if hasattr(v, "dtype") else v
            for k, v in m.state_dict().items()}


# ---- state_dict -------------------------------------------------------------------------------

@pytest.mark.parametrize("keep_vars", [False, True])
@pytest.mark.parametrize("prefix", ["", "model."])
def test_state_dict_entries_match_torch(keep_vars, prefix):
    same_as_torch(lambda lib: list(_model(lib).state_dict(prefix=prefix,
                                                           keep_vars=keep_vars).items()))


def test_state_dict_tensors_share_memory_and_are_detached():
    def scenario(lib):
        m = _model(lib)
        s = m.state_dict()
        s["inner.weight"].add_(1)
        return s["inner.weight"].requires_grad, s["inner.weight"] is m.inner.weight, \
            m.inner.weight, m.state_dict(keep_vars=True)["head"] is m.head
    same_as_torch(scenario)


def test_state_dict_metadata_and_destination():
    def scenario(lib):
        m = _model(lib)
        s = m.state_dict()
        dest = {"kept": 1}
        returned = m.state_dict(destination=dest, prefix="p.")
        return dict(s._metadata), returned is dest, list(dest)
    same_as_torch(scenario)


def test_extra_state_is_saved_and_loaded():
    def scenario(lib):
        m = _model(lib, extra_state=True)
        s = m.state_dict()
        other = _model(lib, extra_state=True)
        s["inner._extra_state"] = {"note": "loaded"}
        result = other.load_state_dict(s)
        return list(s), repr(result), other.inner.note
    same_as_torch(scenario)


@pytest.mark.parametrize("strict", [True, False])
def test_extra_state_missing_or_unexpected_matches_torch(strict):
    def scenario(lib):
        with_extra = _model(lib, extra_state=True)
        s = with_extra.state_dict()
        missing = dict(s)
        del missing["inner._extra_state"]
        r1 = with_extra.load_state_dict(missing, strict=False)
        r2 = _model(lib).load_state_dict(s, strict=strict)
        return repr(r1), repr(r2)
    same_as_torch(scenario)


def test_state_dict_hooks_match_torch():
    def scenario(lib):
        log = []
        m = _model(lib)
        m.inner.register_state_dict_pre_hook(lambda mod, prefix, keep: log.append(("pre",
                                                                                   prefix, keep)))

        def post(mod, sd, prefix, meta):
            log.append(("post", prefix, sorted(meta)))
            sd[prefix + "added"] = lib.zeros(1)
        m.inner.register_state_dict_post_hook(post)
        m._register_state_dict_hook(lambda mod, sd, prefix, meta: {"replaced": len(sd)})
        return m.state_dict(keep_vars=True), log
    same_as_torch(scenario)


def test_public_state_dict_post_hook_must_return_none():
    def scenario(lib):
        m = _model(lib)
        m.register_state_dict_post_hook(lambda *args: {})
        return m.state_dict()
    same_as_torch(scenario)


def test_removed_state_dict_hook_is_not_called():
    m = _model(graphnn)
    handle = m.register_state_dict_pre_hook(lambda *a: (_ for _ in ()).throw(AssertionError))
    handle.remove()
    assert list(m.state_dict()) == ["head", "inner.weight", "inner.running", "inner.count"]


# ---- load_state_dict --------------------------------------------------------------------------

EDITS = {
    "exact": lambda lib, s: s,
    "missing": lambda lib, s: {k: v for k, v in s.items() if k != "inner.running"},
    "unexpected": lambda lib, s: {**s, "extra": lib.ones(1), "inner.more": lib.ones(1)},
    "unexpected_under_param": lambda lib, s: {**s, "inner.weight.sub": lib.ones(1)},
    "unexpected_under_none_child": lambda lib, s: {**s, "nothing.w": lib.ones(1)},
    "unexpected_under_missing_child": lambda lib, s: {**s, "gone.w": lib.ones(1)},
    "none_parameter_key": lambda lib, s: {**s, "inner.bias": lib.ones(3)},
    "nonpersistent_key": lambda lib, s: {**s, "inner.scratch": lib.ones(2)},
    "missing_and_unexpected": lambda lib, s: {**{k: v for k, v in s.items() if k != "head"},
                                              "zz": lib.ones(1)},
    "size_mismatch": lambda lib, s: {**s, "inner.running": lib.ones(4)},
    "two_size_mismatches_and_missing": lambda lib, s: {
        **{k: v for k, v in s.items() if k != "head"}, "inner.running": lib.ones(4),
        "inner.weight": lib.ones(3, 2)},
    "not_a_tensor": lambda lib, s: {**s, "inner.running": [1.0, 2.0, 3.0]},
    "one_element_into_scalar": lambda lib, s: {**s, "inner.count": lib.tensor([9])},
    "float_into_int_buffer": lambda lib, s: {**s, "inner.count": lib.tensor(7.9)},
    "double_into_float": lambda lib, s: {**s, "head": lib.tensor(C * 2, dtype=lib.float64)},
}


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_load_state_dict_matches_torch(edit, strict):
    def scenario(lib):
        m = _model(lib)
        head = m.head
        result = m.load_state_dict(EDITS[edit](lib, _shifted(lib, m)), strict=strict)
        assert m.head is head
        return repr(result), result.missing_keys, result.unexpected_keys, _state(lib, m)
    same_as_torch(scenario)


@pytest.mark.parametrize("edit", ["missing", "unexpected", "size_mismatch", "not_a_tensor",
                                  "missing_and_unexpected", "two_size_mismatches_and_missing"])
@pytest.mark.parametrize("strict", [True, False])
def test_failed_load_changes_nothing(edit, strict):
    m = _model(graphnn, extra_state=True)
    before = [(k, v, v.detach().numpy().copy()) for k, v in m.state_dict(keep_vars=True).items()
              if k != "inner._extra_state"]
    state = EDITS[edit](graphnn, _shifted(graphnn, m))
    state["inner._extra_state"] = {"note": "changed"}
    expect_error = edit not in ("missing", "unexpected", "missing_and_unexpected") or strict
    if not expect_error:
        m.load_state_dict(state, strict=strict)
        return
    with pytest.raises(RuntimeError, match="Error\\(s\\) in loading state_dict for Root"):
        m.load_state_dict(state, strict=strict)
    after = m.state_dict(keep_vars=True)
    for key, obj, values in before:
        assert after[key] is obj
        np.testing.assert_array_equal(after[key].detach().numpy(), values)
    assert m.inner.note == "initial"


def test_load_accepts_numpy_arrays_and_keeps_dtype_and_grad():
    m = _model(graphnn)
    m.head.grad = graphnn.ones(4, dtype=graphnn.float64)
    theirs = _model(torch)
    arrays = {k: v.numpy() * 3 for k, v in theirs.state_dict().items()}
    assert repr(m.load_state_dict(arrays)) == "<All keys matched successfully>"
    for k, v in m.state_dict().items():
        assert v.dtype == graphnn.tensor(arrays[k]).dtype
        np.testing.assert_array_equal(v.numpy(), arrays[k])
    assert m.head.requires_grad and m.head.is_leaf and m.head.grad.tolist() == [1.0] * 4


def test_load_rejects_a_non_mapping_as_torch():
    same_as_torch(lambda lib: _model(lib).load_state_dict([("head", lib.ones(4))]))


@pytest.mark.parametrize("input_kind", ["tensor", "parameter", "frozen_parameter"])
def test_assign_adopts_the_given_tensors(input_kind):
    def scenario(lib):
        m = _model(lib)
        m.inner.weight.requires_grad_(False)
        s = _shifted(lib, m)
        if input_kind != "tensor":
            s = {k: lib.nn.Parameter(v, requires_grad=input_kind == "parameter")
                 if v.is_floating_point() else v for k, v in s.items()}
        m.load_state_dict(s, assign=True)
        adopted = [m.head is s["head"], m.inner.running is s["inner.running"],
                   m.inner.weight is s["inner.weight"]]
        return adopted, _state(lib, m), [type(p).__name__ for p in m.parameters()]
    same_as_torch(scenario)


def test_load_state_dict_pre_hook_can_rename_keys():
    def scenario(lib):
        calls = []

        def rename(module, state_dict, prefix, local_metadata, strict, missing, unexpected,
                   errors):
            calls.append((prefix, sorted(local_metadata), strict))
            if prefix + "old_weight" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "old_weight")
        m = _model(lib)
        m.inner.register_load_state_dict_pre_hook(rename)
        s = m.state_dict()
        s["inner.old_weight"] = s.pop("inner.weight") * 2
        result = m.load_state_dict(s)
        return repr(result), calls, m.inner.weight
    same_as_torch(scenario)


def test_load_post_hooks_run_children_first_and_can_clear_missing_keys():
    def scenario(lib):
        order = []
        m = _model(lib)
        m.register_load_state_dict_post_hook(lambda mod, keys: order.append("root"))

        def forgive(mod, keys):
            order.append(("inner", list(keys.missing_keys)))
            keys.missing_keys.clear()
        m.inner.register_load_state_dict_post_hook(forgive)
        s = _shifted(lib, m)
        del s["inner.running"]
        result = m.load_state_dict(s)
        return repr(result), order, _state(lib, m)
    same_as_torch(scenario)


def test_load_post_hook_returning_a_value_is_an_error():
    def scenario(lib):
        m = _model(lib)
        m.register_load_state_dict_post_hook(lambda mod, keys: keys)
        return m.load_state_dict(m.state_dict())
    same_as_torch(scenario)


def test_strict_failure_after_post_hooks_puts_everything_back():
    m = _model(graphnn, extra_state=True)
    seen = []
    m.register_load_state_dict_post_hook(
        lambda mod, keys: seen.append(mod.inner.weight.detach().numpy().copy()))
    before = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()
              if k != "inner._extra_state"}
    s = _shifted(graphnn, m, by=5.0)
    s["inner._extra_state"] = {"note": "changed"}
    s["unknown"] = graphnn.ones(1)
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "unknown"'):
        m.load_state_dict(s)
    np.testing.assert_array_equal(seen[0], A + 5)  # the hook saw the loaded values
    for k, v in m.state_dict().items():
        if k != "inner._extra_state":
            np.testing.assert_array_equal(v.numpy(), before[k])
    assert m.inner.note == "initial"


def test_round_trip_through_graphnn_save(tmp_path):
    m = _model(graphnn)
    graphnn.save(m.state_dict(), tmp_path / "m.gnn")
    other = _model(graphnn)
    with graphnn.no_grad():
        for p in other.parameters():
            p.zero_()
    assert repr(other.load_state_dict(graphnn.load(tmp_path / "m.gnn"))) == \
        "<All keys matched successfully>"
    for (_, a), (_, b) in zip(m.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_torch_checkpoint_loads_into_the_same_layers():
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    ours = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(graphnn.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
