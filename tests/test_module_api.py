"""graphnn.nn.Module against torch.nn.Module: registration, lookup, traversal, modes,
conversion, printing, copying and the error prefix of a failing forward."""
import copy
import pickle

import numpy as np
import pytest
import torch

import graphnn
from graphnn import nn
from graphnn.ir.errors import GraphnnError, ShapeError, UnsupportedError
from module_oracle import same_as_torch

RNG = np.random.default_rng(0)
W2, W3 = RNG.standard_normal(2), RNG.standard_normal(3)


def _leaf_class(lib):
    class Leaf(lib.nn.Module):
        def __init__(self, w):
            super().__init__()
            self.weight = lib.nn.Parameter(lib.tensor(w))
            self.register_buffer("running", lib.zeros(len(w), dtype=lib.float64))
            self.register_buffer("count", lib.tensor(0))
            self.register_buffer("scratch", lib.ones(1), persistent=False)
            self.register_parameter("unused", None)

        def forward(self, x):
            return x * self.weight

    return Leaf


def _tree(lib):
    """A root with two leaves, a leaf reachable twice, a nested Sequential, a tied parameter
    and None entries."""
    Leaf = _leaf_class(lib)

    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Leaf(W2)
            self.b = Leaf(W3)
            self.shared = self.a
            self.seq = lib.nn.Sequential(Leaf(W2), self.a)
            self.tied = self.b.weight
            self.add_module("nothing", None)

        def forward(self, x):
            return self.seq(self.a(x))

    return Net()


def _mod(lib):
    class M(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.ones(2))
            self.register_buffer("b", lib.zeros(3))
            self.register_buffer("nb", lib.zeros(1), persistent=False)
            self.register_parameter("p", None)
            self.sub = lib.nn.Module()

    return M()


def _registries(m):
    return list(m._parameters), list(m._buffers), list(m._modules), \
        sorted(m._non_persistent_buffers_set), list(m.state_dict())


# ---- attribute registration -------------------------------------------------------------------

ASSIGNMENTS = {
    "tensor_to_parameter": lambda lib, m: setattr(m, "w", lib.ones(2)),
    "int_to_buffer": lambda lib, m: setattr(m, "b", 3),
    "int_to_module": lambda lib, m: setattr(m, "sub", 3),
    "module_to_parameter": lambda lib, m: setattr(m, "w", type("Sub", (lib.nn.Module,), {})()),
    "buffer_object": lambda lib, m: setattr(m, "fresh", lib.nn.parameter.Buffer(lib.ones(2))),
    "nonpersistent_buffer_object": lambda lib, m: setattr(
        m, "fresh", lib.nn.parameter.Buffer(lib.ones(2), persistent=False)),
    "buffer_object_over_buffer": lambda lib, m: setattr(
        m, "b", lib.nn.parameter.Buffer(lib.ones(2), persistent=False)),
    "buffer_object_over_parameter": lambda lib, m: setattr(
        m, "w", lib.nn.parameter.Buffer(lib.ones(2))),
    "buffer_object_over_plain": lambda lib, m: (setattr(m, "x", 5), setattr(
        m, "x", lib.nn.parameter.Buffer(lib.ones(2)))),
    "none_to_parameter": lambda lib, m: setattr(m, "w", None),
    "none_to_buffer": lambda lib, m: setattr(m, "b", None),
    "none_to_module": lambda lib, m: setattr(m, "sub", None),
    "tensor_to_nonpersistent": lambda lib, m: setattr(m, "nb", lib.ones(1)),
    "parameter_over_buffer": lambda lib, m: setattr(m, "nb", lib.nn.Parameter(lib.ones(1))),
    "parameter_over_plain": lambda lib, m: (setattr(m, "x", 5),
                                            setattr(m, "x", lib.nn.Parameter(lib.ones(1)))),
    "module_over_buffer": lambda lib, m: setattr(m, "b", lib.nn.Module()),
    "parameter_over_module": lambda lib, m: setattr(m, "sub", lib.nn.Parameter(lib.ones(1))),
    "plain_attribute": lambda lib, m: setattr(m, "z", 4),
    "delete_parameter": lambda lib, m: delattr(m, "w"),
    "delete_nonpersistent": lambda lib, m: (delattr(m, "nb"),
                                            m.register_buffer("nb", lib.ones(1))),
    "delete_module": lambda lib, m: delattr(m, "sub"),
    "delete_missing": lambda lib, m: delattr(m, "nope"),
    "register_existing_attribute": lambda lib, m: m.register_parameter("b", None),
    "register_dotted_parameter": lambda lib, m: m.register_parameter("a.b", None),
    "register_empty_parameter": lambda lib, m: m.register_parameter("", None),
    "register_int_name": lambda lib, m: m.register_parameter(3, None),
    "register_tensor_parameter": lambda lib, m: m.register_parameter("q", lib.ones(2)),
    "register_buffer_over_parameter": lambda lib, m: m.register_buffer("w", None),
    "register_int_buffer": lambda lib, m: m.register_buffer("q", 3),
    "register_dotted_buffer": lambda lib, m: m.register_buffer("a.b", None),
    "register_empty_buffer": lambda lib, m: m.register_buffer("", None),
    "reregister_buffer_persistent": lambda lib, m: m.register_buffer("nb", lib.ones(2)),
    "reregister_buffer_nonpersistent": lambda lib, m: m.register_buffer("b", lib.ones(2),
                                                                        persistent=False),
    "add_module_over_parameter": lambda lib, m: m.add_module("w", None),
    "add_int_module": lambda lib, m: m.add_module("q", 3),
    "add_dotted_module": lambda lib, m: m.add_module("a.b", None),
    "add_empty_module": lambda lib, m: m.add_module("", None),
    "register_module_alias": lambda lib, m: m.register_module("extra", lib.nn.Module()),
    "missing_attribute": lambda lib, m: m.nope,
}


@pytest.mark.parametrize("name", sorted(ASSIGNMENTS))
def test_attribute_registration_matches_torch(name):
    def scenario(lib):
        m = _mod(lib)
        ASSIGNMENTS[name](lib, m)
        return _registries(m), {k: v for k, v in vars(m).items() if k in ("x", "z")}
    same_as_torch(scenario)


@pytest.mark.parametrize("kind", ["parameter", "module", "buffer", "plain"])
def test_assignment_before_init_matches_torch(kind):
    def scenario(lib):
        class Early(lib.nn.Module):
            def __init__(self):
                if kind == "parameter":
                    self.w = lib.nn.Parameter(lib.ones(1))
                elif kind == "module":
                    self.m = lib.nn.Module()
                elif kind == "buffer":
                    self.register_buffer("b", lib.ones(1))
                else:
                    self.x = 3
                super().__init__()
        return Early().x
    same_as_torch(scenario)


def test_registered_parameter_is_the_same_object_and_non_leaf_is_refused():
    m = nn.Module()
    p = nn.Parameter(graphnn.ones(2))
    m.p = p
    assert m.p is p and m._parameters["p"] is p
    q = nn.Parameter(graphnn.ones(2))
    q.grad_fn = (q * 2).grad_fn  # a Parameter that became part of a graph
    with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'q'"):
        m.register_parameter("q", q)


@pytest.mark.parametrize("args", ["positional", "keyword"])
def test_module_init_rejects_arguments_as_torch(args):
    same_as_torch(lambda lib: lib.nn.Module(3) if args == "positional" else lib.nn.Module(a=3))


# ---- traversal --------------------------------------------------------------------------------

TRAVERSALS = {
    "named_modules": lambda m: [n for n, _ in m.named_modules()],
    "named_modules_all": lambda m: [n for n, _ in m.named_modules(remove_duplicate=False)],
    "named_modules_prefix": lambda m: [n for n, _ in m.named_modules(prefix="root")],
    "modules": lambda m: [type(x).__name__ for x in m.modules()],
    "named_children": lambda m: [n for n, _ in m.named_children()],
    "children": lambda m: [type(x).__name__ for x in m.children()],
    "named_parameters": lambda m: list(m.named_parameters()),
    "named_parameters_all": lambda m: [n for n, _ in m.named_parameters(remove_duplicate=False)],
    "named_parameters_local": lambda m: [n for n, _ in m.named_parameters("p", recurse=False)],
    "parameters": lambda m: list(m.parameters()),
    "parameters_local": lambda m: list(m.parameters(recurse=False)),
    "named_buffers": lambda m: list(m.named_buffers(prefix="x")),
    "named_buffers_all": lambda m: [n for n, _ in m.named_buffers(remove_duplicate=False)],
    "buffers": lambda m: list(m.buffers()),
    "state_dict_keys": lambda m: list(m.state_dict()),
}


@pytest.mark.parametrize("name", sorted(TRAVERSALS))
def test_traversal_matches_torch(name):
    same_as_torch(lambda lib: TRAVERSALS[name](_tree(lib)))


def test_shared_members_are_the_same_objects():
    net = _tree(graphnn)
    assert [p for p in net.parameters()] == [net.b.weight, net.a.weight, net.seq[0].weight]
    assert net.get_submodule("shared") is net.a and net.seq[1] is net.a


LOOKUPS = ["", "seq", "seq.1", "seq.5", "a.weight", "zz.q", "a.zz", "nothing", "nothing.x",
           "tied"]


@pytest.mark.parametrize("target", LOOKUPS)
@pytest.mark.parametrize("method", ["get_submodule", "get_parameter", "get_buffer"])
def test_get_submodule_parameter_buffer_match_torch(method, target):
    def scenario(lib):
        found = getattr(_tree(lib), method)(target)
        return repr(found) if isinstance(found, lib.nn.Module) else found
    same_as_torch(scenario)


@pytest.mark.parametrize("target", ["a.running", "a.weight", "a.unused", "a.scratch",
                                    "seq.0.count", "a.training"])
@pytest.mark.parametrize("method", ["get_parameter", "get_buffer"])
def test_get_member_kinds_match_torch(method, target):
    same_as_torch(lambda lib: getattr(_tree(lib), method)(target))


@pytest.mark.parametrize("target,strict", [("a", False), ("seq.0", True), ("new", False),
                                           ("new", True), ("tied", False), ("", False),
                                           ("zz.q", False)])
def test_set_submodule_matches_torch(target, strict):
    def scenario(lib):
        net = _tree(lib)
        net.set_submodule(target, lib.nn.Sequential(), strict=strict)
        return repr(net), [n for n, _ in net.named_modules()]
    same_as_torch(scenario)


def test_apply_visits_children_first_and_returns_self():
    def scenario(lib):
        order = []
        net = _tree(lib)
        assert net.apply(lambda m: order.append(type(m).__name__)) is net
        return order
    same_as_torch(scenario)


# ---- modes and gradients ----------------------------------------------------------------------

def test_train_eval_propagate_as_torch():
    def scenario(lib):
        net = _tree(lib)
        states = [net.eval() is net, [m.training for m in net.modules()]]
        net.seq.train()
        states.append([m.training for m in net.modules()])
        net.train(False)
        return states + [[m.training for m in net.modules()]]
    same_as_torch(scenario)


@pytest.mark.parametrize("mode", [3, 0, None, "yes"])
def test_train_rejects_non_bool_as_torch(mode):
    same_as_torch(lambda lib: _tree(lib).train(mode))


def test_requires_grad_toggles_every_parameter():
    def scenario(lib):
        net = _tree(lib)
        first = [p.requires_grad for p in net.requires_grad_(False).parameters()]
        return first, [p.requires_grad for p in net.requires_grad_().parameters()]
    same_as_torch(scenario)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_matches_torch_and_keeps_grad_object(set_to_none):
    def scenario(lib):
        net = _tree(lib)
        net(lib.ones(2, dtype=lib.float64)).sum().backward()
        before = net.a.weight.grad
        grads = [p.grad for p in net.parameters()]
        net.zero_grad(set_to_none=set_to_none)
        return grads, [p.grad for p in net.parameters()], net.a.weight.grad is before
    same_as_torch(scenario)


# ---- dtype and device -------------------------------------------------------------------------

CONVERSIONS = {
    "to_float64": lambda lib, m: m.to(lib.float64),
    "to_dtype_kw": lambda lib, m: m.to(dtype=lib.float16),
    "to_device_dtype": lambda lib, m: m.to("cpu", lib.float64),
    "to_device_kw": lambda lib, m: m.to(device="cpu", dtype=lib.float64),
    "to_tensor": lambda lib, m: m.to(lib.ones(1, dtype=lib.float64)),
    "to_cpu_non_blocking": lambda lib, m: m.to("cpu", non_blocking=True),
    "to_int": lambda lib, m: m.to(lib.int64),
    "double": lambda lib, m: m.double(),
    "half": lambda lib, m: m.half(),
    "double_then_float": lambda lib, m: m.double().float(),
    "type_float64": lambda lib, m: m.type(lib.float64),
    "cpu": lambda lib, m: m.cpu(),
    "share_memory": lambda lib, m: m.share_memory(),
}


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_conversions_match_torch_and_keep_parameter_objects(name):
    def scenario(lib):
        net = _tree(lib)
        net.a.weight.grad = lib.ones(2, dtype=lib.float64)
        weight, grad = net.a.weight, net.a.weight.grad
        assert CONVERSIONS[name](lib, net) is net
        assert net.a.weight is weight and net.a.weight.grad is grad
        return list(net.state_dict(keep_vars=True).items()), net.a.weight.grad.dtype, \
            list(net.buffers())
    same_as_torch(scenario, rtol=1e-3)


GPU_MOVES = {  # name -> (move, the dtype floating tensors get, as torch's .to(dtype))
    "cuda": (lambda m: m.cuda(), None), "to_str": (lambda m: m.to("cuda"), None),
    "to_kw": (lambda m: m.to(device="cuda"), None), "cuda_0": (lambda m: m.cuda(0), None),
    "to_device": (lambda m: m.to(graphnn.device("cuda")), None),
    "to_int": (lambda m: m.to(0), None),
    "to_tensor": (lambda m: m.to(graphnn.ones(1, device="cuda")), graphnn.float32),
    "to_str_dtype": (lambda m: m.to("cuda:0", graphnn.float64), graphnn.float64),
}


@pytest.mark.parametrize("call", [c for c, _ in GPU_MOVES.values()] + [
    lambda m: m.to("cuda:1", graphnn.float64), lambda m: m.xpu(),
    lambda m: m.to_empty(device="cuda")])
def test_gpu_moves_without_a_gpu_raise_clearly_and_change_nothing(call, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # no GPU and no Triton interpreter
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    net = _tree(graphnn)
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    with pytest.raises(UnsupportedError, match="'cuda' is not available|no xpu device"):
        call(net)
    after = net.state_dict()
    assert all(after[k].dtype == graphnn.tensor(v).dtype and np.array_equal(after[k], v)
               for k, v in before.items())
    assert net(graphnn.ones(2, dtype=graphnn.float64)).shape == (2,)


@pytest.mark.parametrize("name", sorted(GPU_MOVES))
def test_gpu_moves_move_every_tensor_and_keep_parameter_objects(name, tmp_path, monkeypatch):
    """The suite's cuda is Triton's interpreter; dtypes and values as torch's CPU casts."""
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path))  # its kernels
    call, dtype = GPU_MOVES[name]
    net, theirs = _tree(graphnn), _tree(torch)
    net.a.weight.grad = graphnn.ones(2, dtype=graphnn.float64)
    weight, grad = net.a.weight, net.a.weight.grad
    assert call(net) is net and net.a.weight is weight and net.a.weight.grad is grad
    assert isinstance(weight, nn.Parameter) and weight.is_leaf and weight.requires_grad
    assert grad.is_cuda and net.tied is net.b.weight
    if dtype is not None:
        theirs.to(getattr(torch, dtype.name))
    ours = net.state_dict(keep_vars=True)
    assert list(ours) == list(theirs.state_dict())
    for (key, value), expected in zip(ours.items(), theirs.state_dict().values()):
        assert value.is_cuda, key
        assert value.dtype.name == str(expected.dtype).removeprefix("torch."), key
        np.testing.assert_array_equal(value.detach().cpu().numpy(), expected.numpy())
    assert all(b.is_cuda for b in net.buffers())
    assert net.cpu() is net and net.a.weight is weight and not weight.is_cuda


def test_an_optimizer_built_before_cuda_steps_the_moved_parameters(tmp_path, monkeypatch):
    """As torch: the optimizer holds the Parameter objects, whose data moved."""
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path))  # its kernels
    def train(device):
        graphnn.manual_seed(0)
        net = nn.Linear(3, 2)
        opt = graphnn.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        net.to(device)
        x = graphnn.tensor(RNG.standard_normal((4, 3)).astype(np.float32), device=device)
        for _ in range(2):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
            opt.step()
        assert net.weight.device == graphnn.device(device if device == "cpu" else "cuda:0")
        assert opt.param_groups[0]["params"][0] is net.weight
        return [p.detach().cpu().numpy() for p in net.parameters()]
    state = RNG.bit_generator.state
    on_cuda = train("cuda")
    RNG.bit_generator.state = state
    for got, expected in zip(on_cuda, train("cpu")):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_to_empty_keeps_shapes_and_dtypes(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(tmp_path))  # kernels of the cuda moves
    net = _tree(graphnn)
    weight = net.a.weight
    assert net.to_empty(device="cpu") is net and net.a.weight is weight
    assert net.to_empty(device="cuda") is net and net.a.weight is weight and weight.is_cuda
    assert [(k, v.shape, v.dtype) for k, v in net.state_dict().items()] == \
        [(k, v.shape, v.dtype) for k, v in _tree(graphnn).state_dict().items()]


# ---- printing ---------------------------------------------------------------------------------

def _printable(lib):
    class Box(lib.nn.Module):
        def __init__(self, text):
            super().__init__()
            self.text = text

        def extra_repr(self):
            return self.text

    root = Box("size=3\nmode='fast'")
    root.one = Box("k=1")
    root.multi = Box("a=1\nb=2")
    root.empty = Box("")
    root.nested = lib.nn.Sequential(Box("x"), lib.nn.Sequential(Box("y"), Box("")))
    root.nested.add_module("gap", None)
    return root


def test_repr_layout_matches_torch():
    same_as_torch(lambda lib: [repr(_printable(lib)), repr(_printable(lib).one),
                               repr(_printable(lib).multi), repr(_tree(lib))])


def test_dir_lists_members_like_torch():
    def scenario(lib):
        names = dir(_tree(lib))
        wanted = ["a", "b", "seq", "tied", "forward", "training", "_parameters", "nothing",
                  "shared", "state_dict"]
        return [n for n in wanted if n in names], names == sorted(names), \
            any(n[:1].isdigit() for n in dir(_tree(lib).seq))
    same_as_torch(scenario)


# ---- copying ----------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_deepcopy_and_pickle_round_trip(how):
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    net.extra = net[0].weight  # a tied parameter stays tied
    net.register_buffer("steps", graphnn.tensor(7))
    net.eval()
    clone = copy.deepcopy(net) if how == "deepcopy" else pickle.loads(pickle.dumps(net))
    assert repr(clone) == repr(net) and clone is not net and not clone.training
    assert list(clone.state_dict()) == list(net.state_dict())
    for (_, a), (_, b) in zip(net.state_dict(keep_vars=True).items(),
                              clone.state_dict(keep_vars=True).items()):
        assert a is not b and type(a) is type(b) and a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    assert clone.extra is clone[0].weight
    x = graphnn.randn(5, 3)
    np.testing.assert_array_equal(clone(x).detach().numpy(), net(x).detach().numpy())
    with graphnn.no_grad():
        clone[0].weight.add_(1)
    assert not np.array_equal(clone[0].weight.detach().numpy(), net[0].weight.detach().numpy())


# ---- calling, errors and compile --------------------------------------------------------------

def test_module_without_forward_raises_not_implemented():
    with pytest.raises(NotImplementedError, match=r'Module \[Module\] is missing the required '
                                                  r'"forward" function'):
        nn.Module()(graphnn.ones(1))


class _Features(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Sequential(nn.Linear(4, 3), nn.ReLU()),
                                      nn.Linear(3, 2))

    def forward(self, x):
        return self.features(x)


@pytest.mark.parametrize("shape,where", [((2, 5), "Linear at 'features.0.0': "),
                                         ((2, 4), None)])
def test_errors_in_forward_name_the_innermost_module_path(shape, where):
    net = _Features()
    if where is None:
        net.features[1] = nn.Linear(5, 2)  # now the last layer is the one that fails
        where = "Linear at 'features.1': "
    with pytest.raises(ShapeError) as info:
        net(graphnn.ones(*shape))
    assert str(info.value).startswith(where) and str(info.value).count(" at '") == 1
    assert info.value.module_path == where.split("'")[1]


def test_root_module_errors_say_root_and_model_keeps_working():
    net = _Features()
    with pytest.raises(ShapeError, match=r"^Linear \(root module\): expected input"):
        net.features[1](graphnn.ones(2, 7))
    net.compile()  # in place: the rest runs compiled code
    x = graphnn.randn(3, 4, requires_grad=True)
    theirs = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()),
                                 torch.nn.Linear(3, 2))
    theirs.load_state_dict({k[len("features."):]: torch.tensor(v.numpy())
                            for k, v in net.state_dict().items()})
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    net(x).sum().backward()
    theirs(tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    from graphnn.frontend.scope import current_module_path
    assert current_module_path() is None


def test_non_graphnn_errors_pass_through_unchanged():
    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("mine")

    with pytest.raises(KeyError) as info:
        nn.Sequential(Broken())(graphnn.ones(1))
    assert info.value.args == ("mine",) and not isinstance(info.value, GraphnnError)


def test_modules_see_their_path_while_running():
    from graphnn.frontend.scope import current_module_path
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(current_module_path())
            return x

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Sequential(Probe(), nn.Sequential(Probe()))
            self.again = self.first[0]  # reachable twice: keeps its first path

        def forward(self, x):
            return self.again(self.first(x))

    Twice()(graphnn.ones(1))
    assert seen == ["first.0", "first.1.0", "first.0"]


# ---- Parameter --------------------------------------------------------------------------------

PARAMETERS = {
    "repr_matrix": lambda lib: repr(lib.nn.Parameter(lib.tensor([[1.0, 2.5], [3, 4]]))),
    "str": lambda lib: str(lib.nn.Parameter(lib.tensor([1.0, -2.0]))),
    "format": lambda lib: "{}".format(lib.nn.Parameter(lib.tensor([1.0]))),
    "repr_frozen": lambda lib: repr(lib.nn.Parameter(lib.tensor([1.0]), requires_grad=False)),
    "repr_empty": lambda lib: repr(lib.nn.Parameter()),
    "repr_double": lambda lib: repr(lib.nn.Parameter(lib.tensor([1.0], dtype=lib.float64))),
    "int_frozen": lambda lib: repr(lib.nn.Parameter(lib.tensor([1, 2]), requires_grad=False)),
    "int_trainable": lambda lib: lib.nn.Parameter(lib.tensor([1, 2])),
    "kinds": lambda lib: [type(x).__name__ for x in (
        lib.nn.Parameter(lib.ones(2)) * 2, lib.nn.Parameter(lib.ones(2)).data,
        lib.nn.Parameter(lib.ones(2)).detach(), lib.nn.Parameter(lib.nn.Parameter(lib.ones(1))),
        lib.nn.Parameter(lib.ones(2))[0], lib.nn.Parameter(lib.ones(2)).clone())],
    "flags": lambda lib: [(p.requires_grad, p.is_leaf, p.grad, p.grad_fn, isinstance(p, lib.Tensor))
                          for p in [lib.nn.Parameter(lib.ones(2))]],
    "from_graph": lambda lib: [(p.is_leaf, p.requires_grad, p.grad_fn) for p in [
        lib.nn.Parameter(lib.ones(2, requires_grad=True) * 2)]],
}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_matches_torch(name):
    same_as_torch(PARAMETERS[name], message=name != "int_trainable")  # frontend wording


def test_parameter_shares_memory_and_copies_keep_its_kind():
    def scenario(lib):
        data = lib.tensor([1.0, 2.0])
        p = lib.nn.Parameter(data)
        with lib.no_grad():
            p.add_(1)
        (p * 3).sum().backward()
        q, r = copy.deepcopy(p), pickle.loads(pickle.dumps(lib.nn.Parameter(data, False)))
        return data, p.grad, [type(q).__name__, q.requires_grad, q, q is p, q.grad], \
            [type(r).__name__, r.requires_grad, r]
    same_as_torch(scenario)
