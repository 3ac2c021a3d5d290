"""Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict against torch:
indexing, editing, names, reprs and errors."""
from collections import OrderedDict

import numpy as np
import pytest

import graphnn
from graphnn import nn
from module_oracle import same_as_torch


def _layer(lib, n):
    class Times(lib.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            self.weight = lib.nn.Parameter(lib.ones(1) * n)

        def extra_repr(self):
            return f"n={self.n}"

        def forward(self, x):
            return x * self.n

    return Times(n)


def _seq(lib, *ns):
    return lib.nn.Sequential(*[_layer(lib, n) for n in ns or (1, 2, 3, 4)])


def _view(container):
    """What identifies a container's state: child names, children and its repr."""
    return [k for k, _ in container.named_children()], [getattr(m, "n", None) for m in
                                                        container._modules.values()], \
        repr(container), [n for n, _ in container.named_parameters()]


# ---- Sequential -------------------------------------------------------------------------------

SEQUENTIAL = {
    "repr": lambda lib, s: s,
    "slice": lambda lib, s: s[1:3],
    "step_slice": lambda lib, s: s[::-2],
    "negative_index": lambda lib, s: s[-1],
    "index_out_of_range": lambda lib, s: s[4],
    "string_index": lambda lib, s: s["0"],
    "float_index": lambda lib, s: s[1.5],
    "del_index": lambda lib, s: (s.__delitem__(1), s)[1],
    "del_negative": lambda lib, s: (s.__delitem__(-4), s)[1],
    "del_slice": lambda lib, s: (s.__delitem__(slice(1, 3)), s)[1],
    "insert": lambda lib, s: s.insert(1, _layer(lib, 9)).insert(-1, _layer(lib, 8)),
    "insert_end": lambda lib, s: s.insert(4, _layer(lib, 9)),
    "insert_out_of_range": lambda lib, s: s.insert(10, _layer(lib, 9)),
    "insert_non_module": lambda lib, s: s.insert(0, 3),
    "pop": lambda lib, s: (s.pop(1), s),
    "pop_without_key": lambda lib, s: (s.pop(), s),
    "pop_slice": lambda lib, s: (s.pop(slice(0, 2)), s),
    "append_extend": lambda lib, s: s.append(_layer(lib, 7)).extend([_layer(lib, 6)]),
    "append_non_module": lambda lib, s: s.append(3),
    "setitem": lambda lib, s: (s.__setitem__(0, _layer(lib, 5)), s.__setitem__(-1, _layer(
        lib, 6)), s)[2],
    "setitem_non_module": lambda lib, s: s.__setitem__(0, 3),
    "add": lambda lib, s: s + _seq(lib, 8, 9),
    "add_non_sequential": lambda lib, s: s + [_layer(lib, 1)],
    "iadd": lambda lib, s: (s.__iadd__(_seq(lib, 8)), s)[1],
    "mul": lambda lib, s: s * 2,
    "rmul": lambda lib, s: 2 * s,
    "imul": lambda lib, s: (s.__imul__(3), s)[1],
    "len_iter": lambda lib, s: (len(s), [m.n for m in s]),
    "forward": lambda lib, s: s(lib.ones(2)),
    "empty_forward": lambda lib, s: lib.nn.Sequential()(lib.ones(2)),
    "non_module_child": lambda lib, s: lib.nn.Sequential(_layer(lib, 1), 3),
}


# errors whose message names a class by its module path (torch.nn.modules.*) or its method
PATH_IN_MESSAGE = {"insert_non_module", "pop_without_key"}


@pytest.mark.parametrize("name", sorted(SEQUENTIAL))
def test_sequential_matches_torch(name):
    def scenario(lib):
        s = _seq(lib)
        out = SEQUENTIAL[name](lib, s)
        if isinstance(out, tuple):
            return [_view(o) if isinstance(o, lib.nn.Module) else o for o in out]
        return _view(out) if isinstance(out, lib.nn.Module) else out
    same_as_torch(scenario, message=name not in PATH_IN_MESSAGE)


@pytest.mark.parametrize("factor,error,message", [
    (0, ValueError, "Non-positive multiplication factor 0 for <class '{}'>"),
    (1.5, TypeError, "unsupported operand type(s) for *: <class '{}'> and <class 'float'>")])
def test_sequential_bad_factors_raise_as_torch(factor, error, message):
    error = same_as_torch(lambda lib: _seq(lib) * factor, message=False)
    assert str(error) == message.format("torch.nn.modules.container.Sequential")
    with pytest.raises(type(error)) as ours:
        _seq(graphnn) * factor
    assert str(ours.value) == message.format("graphnn.nn.container.Sequential")


@pytest.mark.parametrize("edit", ["none", "del", "append", "getitem", "slice"])
def test_sequential_from_ordered_dict_matches_torch(edit):
    def scenario(lib):
        s = lib.nn.Sequential(OrderedDict([("conv", _layer(lib, 2)), ("act", _layer(lib, 3)),
                                           ("out", _layer(lib, 4))]))
        if edit == "del":
            del s[0]
        elif edit == "append":
            s.append(_layer(lib, 9))
        elif edit == "getitem":
            return s[1].n, s.conv.n, s(lib.ones(1))
        elif edit == "slice":
            s = s[1:]
        return _view(s)
    same_as_torch(scenario)


def test_sequential_children_are_shared_not_copied():
    a = nn.Linear(2, 2)
    s = nn.Sequential(a, nn.ReLU())
    assert s[0] is a and s[0:1][0] is a and (s * 2)[2] is a and (s + s)[2] is a
    assert s.get_submodule("0") is a and s[-2] is a


# ---- ModuleList -------------------------------------------------------------------------------

MODULE_LIST = {
    "repr_runs": lambda lib, m: lib.nn.ModuleList([_layer(lib, n) for n in (1, 1, 1, 2, 1, 3,
                                                                           3)]),
    "repr_all_same": lambda lib, m: lib.nn.ModuleList([_layer(lib, 1) for _ in range(4)]),
    "repr_nested": lambda lib, m: lib.nn.ModuleList([_seq(lib, 1, 2), _seq(lib, 1, 2),
                                                     lib.nn.ModuleList()]),
    "empty": lambda lib, m: lib.nn.ModuleList(),
    "edits": lambda lib, m: (m.insert(1, _layer(lib, 5)), m.append(_layer(lib, 7)),
                             m.extend([_layer(lib, 8)]), m.__iadd__([_layer(lib, 9)]),
                             m.pop(0).n, m.__delitem__(0), m)[4:],
    "insert_front": lambda lib, m: (m.insert(0, _layer(lib, 5)), m)[1],
    "del_slice": lambda lib, m: (m.__delitem__(slice(0, 3, 2)), m)[1],
    "setitem": lambda lib, m: (m.__setitem__(-1, _layer(lib, 6)), m)[1],
    "slice": lambda lib, m: m[1:],
    "negative": lambda lib, m: m[-3],
    "out_of_range": lambda lib, m: m[3],
    "add": lambda lib, m: m + [_layer(lib, 5)],
    "non_module": lambda lib, m: lib.nn.ModuleList([_layer(lib, 1), 3]),
    "not_iterable": lambda lib, m: lib.nn.ModuleList(_layer(lib, 1)),
    "len_iter": lambda lib, m: (len(m), [x.n for x in m]),
}


@pytest.mark.parametrize("name", sorted(MODULE_LIST))
def test_module_list_matches_torch(name):
    def scenario(lib):
        m = lib.nn.ModuleList([_layer(lib, 1), _layer(lib, 2), _layer(lib, 3)])
        out = MODULE_LIST[name](lib, m)
        if isinstance(out, tuple):
            return [_view(o) if isinstance(o, lib.nn.Module) else o for o in out]
        return _view(out) if isinstance(out, lib.nn.Module) else out
    same_as_torch(scenario)


@pytest.mark.parametrize("container", ["ModuleList", "ModuleDict"])
def test_module_containers_have_no_forward(container):
    error = same_as_torch(lambda lib: getattr(lib.nn, container)()(lib.ones(1)), message=False)
    with pytest.raises(NotImplementedError) as ours:
        getattr(nn, container)()(graphnn.ones(1))
    assert str(ours.value) == f"{container} (root module): {error}"


# ---- ModuleDict -------------------------------------------------------------------------------

MODULE_DICT = {
    "repr_order": lambda lib, d: d,
    "edits": lambda lib, d: (d.__setitem__("c", _layer(lib, 3)),
                             d.update([("d", _layer(lib, 4))]),
                             d.update(OrderedDict([("z", _layer(lib, 6)), ("e", _layer(lib, 5))
                                                   ])),
                             d.pop("a").n, d.__delitem__("b"), d)[3:],
    "update_from_module_dict": lambda lib, d: (d.update(lib.nn.ModuleDict(
        {"y": _layer(lib, 9), "x": _layer(lib, 8)})), d)[1],
    "queries": lambda lib, d: (list(d.keys()), [m.n for m in d.values()],
                               [k for k, _ in d.items()], "a" in d, "q" in d, len(d), list(d)),
    "clear": lambda lib, d: (d.clear(), d)[1],
    "missing_key": lambda lib, d: d["z"],
    "bad_pair": lambda lib, d: d.update([("a", _layer(lib, 1)), ("b",)]),
    "non_iterable_pair": lambda lib, d: d.update([3]),
    "not_iterable": lambda lib, d: d.update(3),
    "non_module": lambda lib, d: d.update({"q": 3}),
    "dotted_key": lambda lib, d: d.update({"a.b": _layer(lib, 1)}),
    "forward_through": lambda lib, d: d["a"](lib.ones(1)),
}


@pytest.mark.parametrize("name", sorted(MODULE_DICT))
def test_module_dict_matches_torch(name):
    def scenario(lib):
        d = lib.nn.ModuleDict({"b": _layer(lib, 1), "a": _layer(lib, 2)})
        out = MODULE_DICT[name](lib, d)
        if isinstance(out, tuple):
            return [_view(o) if isinstance(o, lib.nn.Module) else o for o in out]
        return _view(out) if isinstance(out, lib.nn.Module) else out
    same_as_torch(scenario)


# ---- ParameterList / ParameterDict ------------------------------------------------------------

def _tensors(lib):
    return [lib.nn.Parameter(lib.ones(2, 3)), lib.zeros(4),
            lib.nn.Parameter(lib.ones(1, dtype=lib.float64), requires_grad=False),
            lib.ones(3, dtype=lib.float16)]


PARAMETER_LIST = {
    "repr": lambda lib, p: p,
    "one_entry_repr": lambda lib, p: p[0:1],
    "entries": lambda lib, p: list(p),
    "names": lambda lib, p: (list(p.named_parameters()), list(p.state_dict()), len(p)),
    "objects": lambda lib, p: (p.append(3), p.append("s"), p.extend([None]), p)[3],
    "setitem": lambda lib, p: (p.__setitem__(0, lib.zeros(5)), p.__setitem__(-1, 7), p)[2],
    "slice": lambda lib, p: p[1::2],
    "out_of_range": lambda lib, p: p[4],
    "not_iterable": lambda lib, p: p.extend(3),
    "tensor_not_iterable": lambda lib, p: p.extend(lib.ones(2)),
    "iadd": lambda lib, p: (p.__iadd__([lib.ones(1)]), p)[1],
    "call": lambda lib, p: p(1),
    "empty": lambda lib, p: lib.nn.ParameterList(),
}


@pytest.mark.parametrize("name", sorted(PARAMETER_LIST))
def test_parameter_list_matches_torch(name):
    def scenario(lib):
        p = lib.nn.ParameterList(_tensors(lib)[:3])
        out = PARAMETER_LIST[name](lib, p)
        return [repr(out), list(out.named_parameters())] \
            if isinstance(out, lib.nn.Module) else out
    same_as_torch(scenario)


PARAMETER_DICT = {
    "repr_sorted": lambda lib, p: p,
    "ordered": lambda lib, p: lib.nn.ParameterDict(OrderedDict([("z", lib.ones(1)),
                                                                ("a", lib.ones(2))])),
    "pairs": lambda lib, p: lib.nn.ParameterDict([("z", lib.ones(1)), ("a", lib.ones(2))]),
    "edits": lambda lib, p: (p.__setitem__("c", lib.ones(1)), p.update({"z": lib.ones(2)}),
                             p.__delitem__("b"), p)[3],
    "objects": lambda lib, p: (p.__setitem__("s", "hi"), p.__setitem__("n", None), p)[2],
    "queries": lambda lib, p: (list(p.keys()), list(p.values()), list(p.items()), "a" in p,
                               len(p), list(p), list(reversed(p)), p.get("a"), p.get("q", 5)),
    "pop": lambda lib, p: (p.pop("a"), p),
    "popitem": lambda lib, p: (p.popitem(), p),
    "setdefault": lambda lib, p: (p.setdefault("a"), p.setdefault("new", lib.ones(3)), p),
    "clear": lambda lib, p: (p.clear(), p)[1],
    "copy": lambda lib, p: p.copy(),
    "fromkeys": lambda lib, p: p.fromkeys(["x", "y"], lib.ones(1)),
    "or": lambda lib, p: p | lib.nn.ParameterDict({"z": lib.ones(1)}),
    "ror": lambda lib, p: {"0": lib.ones(1)} | p,
    "ior": lambda lib, p: (p.__ior__({"c": lib.ones(1)}), p)[1],
    "missing": lambda lib, p: p["q"],
    "int_key": lambda lib, p: p.__setitem__(1, lib.ones(1)),
    "not_iterable": lambda lib, p: p.update(3),
    "bad_pair": lambda lib, p: p.update([("x", lib.ones(1), 3)]),
    "non_iterable_pair": lambda lib, p: p.update([3]),
    "call": lambda lib, p: p(1),
    "names": lambda lib, p: (list(p.named_parameters()), list(p.state_dict())),
}


@pytest.mark.parametrize("name", sorted(PARAMETER_DICT))
def test_parameter_dict_matches_torch(name):
    def scenario(lib):
        t = _tensors(lib)
        p = lib.nn.ParameterDict({"b": t[0], "a": t[1], "d": t[2], "c": t[3]})
        out = PARAMETER_DICT[name](lib, p)
        if isinstance(out, tuple):
            return [[repr(o), list(o.items())] if isinstance(o, lib.nn.Module) else o
                    for o in out]
        return [repr(out), list(out.items())] if isinstance(out, lib.nn.Module) else out
    same_as_torch(scenario, message=name != "not_iterable")  # torch spells it ParametersDict


def test_parameter_containers_in_a_module_train_together():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([graphnn.ones(2) * 2, graphnn.ones(2) * 3])
            self.shifts = nn.ParameterDict({"x": graphnn.ones(2)})

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x + self.shifts["x"]

    m = Model()
    assert [n for n, _ in m.named_parameters()] == ["scales.0", "scales.1", "shifts.x"]
    m(graphnn.tensor([1.0, -1.0])).sum().backward()
    np.testing.assert_array_equal(m.scales[0].grad.numpy(), [3.0, -3.0])
    np.testing.assert_array_equal(m.shifts["x"].grad.numpy(), [1.0, 1.0])
