"""Sorts and scans have their own registry group (``OpGroup.SCAN``) and kernel kind
(``KernelKind.SCAN``): the schedule gives ``sort``, ``cumsum`` and ``cumprod`` one ``scan``
kernel each, outside the fused elementwise kernels around them; a backend without the kind runs
them as extern kernels; the Triton backend launches its scan kernels for ``cumsum`` and
``cumprod`` and runs ``sort`` on the host, with PyTorch's results. ``multinomial`` stays an
indexing op."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphnn
from graphnn.ir import get_op
from graphnn.ir.registry import OpGroup
from graphnn.ir.schedule import ALL_KINDS, KernelKind
from graphnn.passes.pipeline import run_pipeline
from graphnn.passes.schedule import build_schedule
from graphnn.runtime.backends import get_backend

from compile_helpers import isolated_cache  # noqa: F401  (fixture)
from triton_helpers import INTERPRETER_WARNINGS, SMALL

pytestmark = INTERPRETER_WARNINGS

SCANS = ["cumprod", "cumsum", "sort"]
# distinct values (no ties, so sort's indices are unique), a column long enough that the small
# blocks scan it in several column blocks
X = (np.random.default_rng(9).permutation(4 * 40).reshape(4, 40) / 80.0 - 1.0).astype(np.float32)


def _program(lib, x):
    """Elementwise work before and after each of the three ops."""
    values, indices = lib.sort(lib.exp(x), dim=-1)
    running = lib.cumsum(values * 2.0, dim=1)
    product = lib.cumprod(x * 0.5 + 1.0, dim=0)
    return lib.tanh(running + product), indices


def _schedule(kinds=ALL_KINDS):
    graph = run_pipeline(graphnn.trace(lambda x: _program(graphnn, x), graphnn.tensor(X))).graph
    return build_schedule(graph, kinds)


def test_sorts_and_scans_are_in_the_scan_group_and_multinomial_in_indexing():
    assert {get_op(name).group for name in SCANS} == {OpGroup.SCAN}
    assert get_op("multinomial").group is OpGroup.INDEXING


def test_each_sort_and_scan_is_one_scan_kernel():
    schedule = _schedule()
    scans = [k for k in schedule.kernels if k.kind is KernelKind.SCAN]
    assert sorted(n.op for k in scans for n in k.nodes) == SCANS, str(schedule)
    assert all(len(k.nodes) == 1 and k.nodes[0].fusion is None for k in scans), str(schedule)
    assert all(k.space == (4, 40) for k in scans)
    others = {n.op for k in schedule.kernels if k.kind is not KernelKind.SCAN for n in k.nodes}
    assert not others & set(SCANS) and {"exp", "mul", "tanh"} <= others
    assert any(len(k.nodes) > 1 for k in schedule.kernels), "the elementwise work fuses"


def test_a_backend_without_the_scan_kind_runs_them_as_extern_kernels():
    schedule = _schedule(ALL_KINDS - {KernelKind.SCAN})
    kinds = {n.op: k.kind for k in schedule.kernels for n in k.nodes}
    assert {kinds[name] for name in SCANS} == {KernelKind.EXTERN}
    assert KernelKind.SCAN not in {k.kind for k in schedule.kernels}


@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_backends_support_the_scan_kind(backend):
    assert KernelKind.SCAN in get_backend(backend).kernel_kinds


@pytest.mark.parametrize("backend", ["triton", SMALL])
def test_triton_runs_scans_as_kernels_and_sort_on_the_host(backend, isolated_cache):  # noqa: F811
    compiled = graphnn.compile(lambda x: _program(graphnn, x), backend=backend)
    got, got_indices = compiled(graphnn.tensor(X, device="cuda"))
    want, want_indices = _program(torch, torch.from_numpy(X))
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got_indices.cpu().numpy(), want_indices.numpy())
    source = "".join(p.read_text() for p in isolated_cache.rglob("*.py"))
    assert "tl.cumsum(" in source and "tl.cumprod(" in source
    assert "# on the host: no Triton template for sort" in source
    hosted = [line for line in source.splitlines() if "_rt.host_op(" in line]
    assert len(hosted) == 1 and hosted[0].endswith("# sort"), hosted
    assert sum(" scan [4, 40]" in line for line in source.splitlines()) == 3
