"""graphnn.utils.data against torch.utils.data: datasets, samplers, collate and DataLoader.

Orders drawn at random differ from PyTorch's (another random stream), so batches are compared
under the same order (a fixed sampler), and shuffling is checked for what it promises:
permutations, reproducible under manual_seed or a Generator, a new order each epoch.
"""
import collections
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import graphnn
import graphnn.utils.data as gud

Point = collections.namedtuple("Point", ["x", "y"])


def plain(value):
    """A batch from either library as nested Python/NumPy values, tensors as (dtype, array)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype).split(".")[-1], value.numpy())
    if isinstance(value, graphnn.Tensor):
        return ("tensor", value.dtype.name, value.numpy())
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [plain(v) for v in value]
    return value


def assert_same(ours, theirs):
    a, b = plain(ours), plain(theirs)
    _assert_plain(a, b)


def _assert_plain(a, b):
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert b[0] == "tensor" and a[1] == b[1], (a, b)
        np.testing.assert_array_equal(a[2], b[2])
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            _assert_plain(a[k], b[k])
    elif isinstance(a, tuple):
        assert a[0] == b[0] and len(a[1]) == len(b[1]), (a, b)
        for x, y in zip(a[1], b[1]):
            _assert_plain(x, y)
    else:
        assert type(a) is type(b) and a == b, (a, b)


def datasets(n=7):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64) * 10
    ours = gud.TensorDataset(graphnn.tensor(x), graphnn.tensor(y))
    theirs = tud.TensorDataset(torch.tensor(x), torch.tensor(y))
    return ours, theirs


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (7, True),
                                                  (10, False), (10, True)])
def test_batches_equal_torch_under_the_same_order(batch_size, drop_last):
    ours, theirs = datasets()
    order = [3, 1, 6, 0, 2, 5, 4]
    a = gud.DataLoader(ours, batch_size=batch_size, sampler=order, drop_last=drop_last)
    b = tud.DataLoader(theirs, batch_size=batch_size, sampler=order, drop_last=drop_last)
    assert len(a) == len(b)
    got, want = list(a), list(b)
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert_same(x, y)
    plain_a = gud.DataLoader(ours, batch_size=batch_size, drop_last=drop_last)
    plain_b = tud.DataLoader(theirs, batch_size=batch_size, drop_last=drop_last)
    for x, y in itertools.zip_longest(plain_a, plain_b):
        assert_same(x, y)


SAMPLES = [
    [1.5, 2.0],
    [1, 2, 3],
    [True, False],
    [np.float32(1.5), np.float32(2.5)],
    [np.int32(3), np.int32(4)],
    [np.bool_(True), np.bool_(False)],
    [np.ones((2, 3), np.float64), np.zeros((2, 3), np.float64)],
    ["a", "b"],
    [(1, 2.0), (3, 4.0)],
    [[1, np.float32(2)], [3, np.float32(4)]],
    [{"a": 1, "b": [np.int64(1), 2.5]}, {"a": 2, "b": [np.int64(3), 4.5]}],
    [Point(1, 2.0), Point(3, 4.0)],
    [{"img": np.arange(4, dtype=np.uint8), "label": 3},
     {"img": np.arange(4, 8, dtype=np.uint8), "label": 1}],
]


@pytest.mark.parametrize("batch", SAMPLES, ids=range(len(SAMPLES)))
def test_default_collate_and_convert_as_torch(batch):
    assert_same(gud.default_collate(batch), tud.default_collate(batch))
    assert_same(gud.default_convert(batch), tud.default_convert(batch))
    named = gud.default_collate([Point(1, 2), Point(3, 4)])
    assert type(named) is Point


def test_collate_stacks_tensors_and_refuses_what_torch_refuses():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = gud.default_collate([graphnn.tensor(a), graphnn.tensor(a + 1)])
    want = tud.default_collate([torch.tensor(a), torch.tensor(a + 1)])
    assert_same(got, want)
    for bad in ([object(), object()], [np.array(["x"]), np.array(["y"])]):
        with pytest.raises(TypeError) as theirs:
            tud.default_collate(bad)
        with pytest.raises(TypeError) as ours:
            gud.default_collate(bad)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal"):
        gud.default_collate([[1, 2], [3]])


def test_shuffle_is_a_permutation_reproduced_by_manual_seed_and_new_each_epoch():
    x = graphnn.arange(50)
    loader = gud.DataLoader(gud.TensorDataset(x), batch_size=8, shuffle=True)
    graphnn.manual_seed(7)
    first = [torch.tensor(b[0].numpy()).tolist() for b in loader]
    second = [torch.tensor(b[0].numpy()).tolist() for b in loader]
    graphnn.manual_seed(7)
    again = [torch.tensor(b[0].numpy()).tolist() for b in loader]
    assert first == again and first != second
    for epoch in (first, second):
        assert sorted(sum(epoch, [])) == list(range(50))
        assert [len(b) for b in epoch] == [8] * 6 + [2]


def test_a_generator_drives_the_order_and_leaves_the_global_stream_alone():
    ds = gud.TensorDataset(graphnn.arange(20))
    g = graphnn.Generator().manual_seed(3)
    graphnn.manual_seed(0)
    state = graphnn.get_rng_state()
    order = [b[0].tolist() for b in gud.DataLoader(ds, batch_size=5, shuffle=True, generator=g)]
    assert graphnn.get_rng_state() == state
    g.manual_seed(3)
    assert order == [b[0].tolist() for b in gud.DataLoader(ds, batch_size=5, shuffle=True,
                                                           generator=g)]
    assert sorted(sum(order, [])) == list(range(20))


def test_samplers_as_torch():
    data = list(range(10))
    assert list(gud.SequentialSampler(data)) == list(tud.SequentialSampler(data))
    for batch_size, drop_last in [(3, False), (3, True), (5, True), (20, False)]:
        ours = gud.BatchSampler(gud.SequentialSampler(data), batch_size, drop_last)
        theirs = tud.BatchSampler(tud.SequentialSampler(data), batch_size, drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    drawn = list(gud.RandomSampler(data, num_samples=25))
    assert len(drawn) == 25 and sorted(drawn[:10]) == data and sorted(drawn[10:20]) == data
    drawn = list(gud.RandomSampler(data, replacement=True, num_samples=40))
    assert len(drawn) == 40 and set(drawn) <= set(data)
    assert len(gud.RandomSampler(data, num_samples=25)) == 25
    picked = list(gud.SubsetRandomSampler([2, 4, 6]))
    assert sorted(picked) == [2, 4, 6]


@pytest.mark.parametrize("make", [
    lambda m: m.RandomSampler([1], replacement=1),
    lambda m: m.RandomSampler([1], num_samples=0),
    lambda m: m.RandomSampler([], num_samples=None),
    lambda m: m.BatchSampler([1], 0, False),
    lambda m: m.BatchSampler([1], True, False),
    lambda m: m.BatchSampler([1], 2, 1),
    lambda m: m.DataLoader([1], num_workers=-1),
    lambda m: m.DataLoader([1], timeout=-1),
    lambda m: m.DataLoader([1], prefetch_factor=2),
    lambda m: m.DataLoader([1], persistent_workers=True),
    lambda m: m.DataLoader([1], multiprocessing_context="spawn"),
    lambda m: m.DataLoader([1], sampler=[0], shuffle=True),
    lambda m: m.DataLoader([1], batch_sampler=[[0]], batch_size=2),
    lambda m: m.DataLoader([1], batch_sampler=[[0]], drop_last=True),
    lambda m: m.DataLoader([1], batch_size=None, drop_last=True),
    lambda m: m.ConcatDataset([]),
    lambda m: m.TensorDataset(*[(graphnn if m is gud else torch).zeros(n) for n in (2, 3)]),
    lambda m: m.random_split(range(5), [2, 2]),
    lambda m: m.random_split(range(5), [1.5, -0.5]),
])
def test_errors_as_torch(make):
    with pytest.raises(Exception) as theirs:
        make(tud)
    with pytest.raises(type(theirs.value)) as ours:
        make(gud)
    assert isinstance(ours.value, graphnn.GraphnnError)
    assert str(ours.value) == str(theirs.value)


def test_fixed_attributes_and_in_process_workers():
    ours, theirs = datasets()
    loader = gud.DataLoader(ours, batch_size=2, num_workers=3, pin_memory=True)
    assert loader.prefetch_factor == 2 and gud.get_worker_info() is None
    for x, y in itertools.zip_longest(loader, tud.DataLoader(theirs, batch_size=2)):
        assert_same(x, y)
    for name in ("batch_size", "sampler", "dataset", "drop_last"):
        with pytest.raises(ValueError, match=f"{name} attribute should not be set after "
                                             f"DataLoader is initialized"):
            setattr(loader, name, None)
    loader.collate_fn = gud.default_collate  # not fixed, as in PyTorch


def test_batch_size_none_and_batch_sampler():
    samples = [{"a": np.float32(i), "b": np.arange(2) + i} for i in range(3)]
    for x, y in itertools.zip_longest(gud.DataLoader(samples, batch_size=None),
                                      tud.DataLoader(samples, batch_size=None)):
        assert_same(x, y)
    batches = [[2, 0], [1]]
    got = list(gud.DataLoader(samples, batch_sampler=batches))
    want = list(tud.DataLoader(samples, batch_sampler=batches))
    for x, y in itertools.zip_longest(got, want):
        assert_same(x, y)


def test_subset_concat_and_random_split():
    ours, theirs = datasets(10)
    idx = [9, 2, 4]
    for a, b in zip(gud.Subset(ours, idx), tud.Subset(theirs, idx)):
        assert_same(a, b)
    both_a, both_b = ours + gud.Subset(ours, idx), theirs + tud.Subset(theirs, idx)
    assert len(both_a) == len(both_b) == 13
    for i in (0, 11, -1, -13):
        assert_same(both_a[i], both_b[i])
    for lengths in ([3, 7], [0.3, 0.7], [0.25, 0.25, 0.5], [1 / 3] * 3, [0.5, 0.5, 0.0]):
        with warnings.catch_warnings(record=True) as got_warnings:
            warnings.simplefilter("always")
            parts = gud.random_split(range(10), lengths)
        with warnings.catch_warnings(record=True) as torch_warnings:
            warnings.simplefilter("always")
            want = tud.random_split(range(10), lengths)
        assert [len(p) for p in parts] == [len(p) for p in want]
        assert [str(w.message) for w in got_warnings] == [str(w.message) for w in torch_warnings]
        assert sorted(i for p in parts for i in p) == list(range(10))
    g = graphnn.Generator()
    first = [list(p) for p in gud.random_split(range(10), [4, 6], generator=g.manual_seed(1))]
    again = [list(p) for p in gud.random_split(range(10), [4, 6], generator=g.manual_seed(1))]
    assert first == again
    graphnn.manual_seed(2)
    first = [list(p) for p in gud.random_split(range(10), [4, 6])]
    graphnn.manual_seed(2)
    assert first == [list(p) for p in gud.random_split(range(10), [4, 6])]


def test_a_training_loop_reads_every_sample_once_per_epoch():
    x = graphnn.randn(23, 4)
    y = graphnn.randint(0, 3, (23,))
    loader = gud.DataLoader(gud.TensorDataset(x, y), batch_size=5, shuffle=True)
    model = graphnn.nn.Linear(4, 3)
    opt = graphnn.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for xb, yb in loader:
        loss = graphnn.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen.append(xb.numpy())
    np.testing.assert_array_equal(np.sort(np.concatenate(seen), axis=0),
                                  np.sort(x.numpy(), axis=0))
