"""graphnn.save/load of .safetensors files: files written by torch's safetensors load equal,
ours load in torch, every supported dtype, and hostile files (whatever the bytes, a value or
SerializationError; no code runs, nothing blocks)."""
import io
import json
import os
import struct
import sys
import threading

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import graphnn
from graphnn.ir.errors import SerializationError, UnsupportedError
from graphnn.ir.torch_arrays import from_torch, to_torch
from graphnn.serialization import SaveTypeError

TORCH_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


def torch_state():
    """One tensor of each supported dtype, odd shapes and an empty one, with specials."""
    g = torch.Generator().manual_seed(0)
    state = {}
    for i, dtype in enumerate(TORCH_DTYPES):
        shape = [(3, 5), (7,), (2, 1, 4), (), (0, 3)][i % 5]
        values = torch.randn(shape, generator=g, dtype=torch.float64) * 50
        state[f"layer{i}.{str(dtype)[6:]}"] = values.to(dtype)
    state["specials"] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    return state


def assert_equal(ours: graphnn.Tensor, theirs: torch.Tensor):
    assert ours.dtype.name == str(theirs.dtype)[6:]
    assert tuple(ours.shape) == tuple(theirs.shape)
    a, b = ours.numpy(), from_torch(theirs)
    if ours.dtype is graphnn.bfloat16:  # compare bits, NaN included
        a, b = a.view(np.int16), b.view(np.int16)
    np.testing.assert_array_equal(a, b)


def test_files_written_by_torch_load_equal(tmp_path):
    state = torch_state()
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(state, path, metadata={"format": "pt"})
    loaded = graphnn.load(path)
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert_equal(loaded[key], value)
        loaded[key].numpy()[...] = 0  # owning, writable copies
    assert graphnn.load(str(path))["specials"].numpy()[0] != 0


def test_ours_load_in_torch_and_round_trip(tmp_path):
    state = {k: graphnn.Tensor._wrap(from_torch(v).copy()) for k, v in torch_state().items()}
    state["view"] = graphnn.arange(12.0).reshape(3, 4).t()[1:]  # not contiguous
    state["param"] = graphnn.nn.Parameter(graphnn.ones(2))
    path = tmp_path / "ours.safetensors"
    graphnn.save(state, path)
    theirs = safetensors.torch.load_file(path)
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
    assert set(theirs) == set(state)
    back = graphnn.load(path)
    for key, value in theirs.items():
        assert_equal(state[key].detach(), value)
        assert_equal(back[key], value)
        assert not back[key].requires_grad


def test_module_state_dict_round_trips_into_torch(tmp_path):
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    ours = graphnn.nn.Sequential(graphnn.nn.Linear(4, 3), graphnn.nn.LayerNorm(3))
    safetensors.torch.save_file(theirs.state_dict(), tmp_path / "m.safetensors")
    ours.load_state_dict(graphnn.load(tmp_path / "m.safetensors"))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(ours(graphnn.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)
    with graphnn.no_grad():
        for p in ours.parameters():
            p.mul_(2.0)
    graphnn.save(ours.state_dict(), tmp_path / "back.safetensors")
    theirs.load_state_dict(safetensors.torch.load_file(tmp_path / "back.safetensors"))
    np.testing.assert_allclose(ours(graphnn.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_save_refuses_what_safetensors_cannot_hold(tmp_path):
    path = tmp_path / "x.safetensors"
    for obj, match in [([graphnn.ones(1)], "flat dict of tensors"),
                       ({1: graphnn.ones(1)}, "keys tensors by strings"),
                       ({"a": 3}, "holds only tensors, got int at 'a'"),
                       ({"a": {"b": graphnn.ones(1)}}, "holds only tensors, got dict"),
                       ({"__metadata__": graphnn.ones(1)}, "reserves for its metadata")]:
        with pytest.raises(SaveTypeError, match=match):
            graphnn.save(obj, path)
    assert not path.exists()
    graphnn.save({}, path)
    assert graphnn.load(path) == {}


def test_a_graphnn_file_object_holding_safetensors_says_so(tmp_path):
    path = tmp_path / "w.safetensors"
    graphnn.save({"a": graphnn.ones(2)}, path)
    with pytest.raises(SerializationError, match="looks like a safetensors file"):
        graphnn.load(io.BytesIO(path.read_bytes()))


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    for call in (lambda: graphnn.save({"a": graphnn.ones(1)}, tmp_path / "a.safetensors"),
                 lambda: graphnn.load(tmp_path / "a.safetensors")):
        with pytest.raises(UnsupportedError, match=r"pip install 'graphnn\[safetensors\]'"):
            call()


# ---- hostile files --------------------------------------------------------------------------

def craft(header, data: bytes = b"", length=None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def f32(shape, offsets):
    return {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}


HOSTILE = {
    "empty": (b"", "not a valid safetensors file"),
    "short prefix": (b"\x10\x00\x00", "not a valid safetensors file"),
    "truncated header": (craft({"a": f32([2], [0, 8])}, b"\0" * 8)[:20],
                         "not a valid safetensors file"),
    "huge header length": (struct.pack("<Q", 2 ** 63) + b"{}", "not a valid safetensors file"),
    "header length past the file": (craft({}, length=10 ** 6), "not a valid safetensors file"),
    "bad json": (craft(b"{\"a\": [1,"), "not a valid safetensors file"),
    "not an object": (craft([1, 2]), "not a valid safetensors file"),
    "offsets out of range": (craft({"a": f32([2], [0, 16])}, b"\0" * 8),
                             "not a valid safetensors file"),
    "offsets against shape": (craft({"a": f32([3], [0, 8])}, b"\0" * 8),
                              "not a valid safetensors file"),
    "overlapping offsets": (craft({"a": f32([2], [0, 8]), "b": f32([1], [4, 8])}, b"\0" * 8),
                            "not a valid safetensors file"),
    "gap before data": (craft({"a": f32([1], [4, 8])}, b"\0" * 8),
                        "not a valid safetensors file"),
    "bytes after data": (craft({"a": f32([1], [0, 4])}, b"\0" * 8),
                         "not a valid safetensors file"),
    "negative size": (craft({"a": f32([-1], [0, 4])}, b"\0" * 4),
                      "not a valid safetensors file"),
    "overflowing shape": (craft({"a": f32([2 ** 40, 2 ** 40], [0, 4])}, b"\0" * 4),
                          "not a valid safetensors file"),
    "unknown dtype": (craft({"a": {"dtype": "XX", "shape": [1], "data_offsets": [0, 4]}},
                            b"\0" * 4), "not a valid safetensors file"),
    "dtype graphnn lacks": (craft({"w": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]}},
                                  b"\0" * 4), "tensor 'w' has dtype U16"),
    "pickle": (b"\x80\x04\x95" + b"\0" * 40, "not a valid safetensors file"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_files_raise_serialization_error(tmp_path, name):
    blob, match = HOSTILE[name]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(SerializationError, match=match) as e:
        graphnn.load(path)
    assert str(e.value).startswith(f"graphnn.load: {str(path)!r}: ")


def test_non_regular_files_are_refused_without_blocking(tmp_path):
    (tmp_path / "dir.safetensors").mkdir()
    with pytest.raises(SerializationError, match="is a directory"):
        graphnn.load(tmp_path / "dir.safetensors")
    if not hasattr(os, "mkfifo"):
        return
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    result = []
    thread = threading.Thread(target=lambda: result.append(pytest.raises(
        SerializationError, graphnn.load, fifo)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and "FIFO" in str(result[0].value)


@st.composite
def _mutated(draw):
    names = draw(st.lists(st.sampled_from(["a", "b.w", "c"]), min_size=0, max_size=3,
                          unique=True))
    arrays = {n: np.arange(draw(st.integers(0, 4)), dtype=np.float32) for n in names}
    blob = safetensors.numpy.save(arrays) if arrays else craft({})
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(blob)))
        kind = draw(st.sampled_from(["flip", "truncate", "insert"]))
        if kind == "flip" and at < len(blob):
            blob = blob[:at] + bytes([blob[at] ^ draw(st.integers(1, 255))]) + blob[at + 1:]
        elif kind == "truncate":
            blob = blob[:at]
        else:
            blob = blob[:at] + draw(st.binary(min_size=1, max_size=8)) + blob[at:]
    return blob


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=_mutated())
def test_any_bytes_load_or_raise_serialization_error(tmp_path, blob):
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(blob)
    try:
        loaded = graphnn.load(path)
    except SerializationError as e:  # anything else fails the test
        assert str(e).startswith("graphnn.load: ")
        return
    assert isinstance(loaded, dict)
    assert all(isinstance(v, graphnn.Tensor) for v in loaded.values())


def test_to_torch_of_loaded_bf16_shares_bits(tmp_path):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    state = {"all": bits.view(torch.bfloat16)}
    safetensors.torch.save_file(state, tmp_path / "bf.safetensors")
    loaded = graphnn.load(tmp_path / "bf.safetensors")["all"]
    assert torch.equal(to_torch(loaded.numpy()).view(torch.int16), bits)
