"""graphnn.serialization: round trips, corrupt/truncated/foreign files, atomic writes."""
import collections
import io
import json
import math
import os
import pathlib
import pickle
import struct
import zlib

import numpy as np
import pytest

import graphnn
from graphnn import serialization as ser
from graphnn.ir.errors import GraphnnError, SerializationError

ALL_DTYPES = [graphnn.bool, graphnn.uint8, graphnn.int8, graphnn.int16, graphnn.int32,
              graphnn.int64, graphnn.float16, graphnn.float32, graphnn.float64]


def _array(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == graphnn.bool:
        return rng.random(shape) > 0.5
    if dtype.is_floating_point:
        return (rng.standard_normal(shape) * 100).astype(dtype.np)
    info = np.iinfo(dtype.np)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype.np, endpoint=True)


def assert_same(a, b):
    """Deep equality: same container types, same tensor dtype/shape/bytes, same plain values."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, graphnn.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
        assert a.requires_grad == b.requires_grad
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys())
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def _state_dict():
    base = graphnn.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
    return collections.OrderedDict([
        ("layer.weight", base.t()),  # non-contiguous view
        ("layer.bias", graphnn.tensor([0.5, -1.25, 3.0])),
        ("strided", base[:, ::2]),
        ("scalar", graphnn.tensor(7, dtype=graphnn.int32)),
        ("empty", graphnn.zeros(0, 3, dtype=graphnn.float16)),
        ("mask", graphnn.tensor([[True, False], [False, True]])),
        ("param", graphnn.ones(2, requires_grad=True)),
        ("nested", {"a": {"b": [graphnn.tensor([1, 2]), (3, 4.5, "five", None, True)]}}),
        ("optimizer", {"state": {0: {"step": 10, "exp_avg": graphnn.zeros(3)}, 1: {}},
                       "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1],
                                         "nesterov": False, "name": None}]}),
        ("floats", [0.1, -0.0, 1e308, float("inf"), float("-inf"), float("nan"), 5e-324]),
        ("ints", [0, -1, 2 ** 62, -(2 ** 63), 10 ** 30]),
        ("text", "ünïcødé \"quoted\" \n newline"),
        ("weird keys", {1.5: "f", None: "n", True: "t", -3: "i", "": "empty"}),
        ("empty containers", ({}, [], ())),
    ])


# ---- round trips ------------------------------------------------------------------------------

def test_round_trip_state_dict(tmp_path):
    sd = _state_dict()
    path = tmp_path / "model.gnn"
    ser.save(sd, path)
    out = ser.load(path)
    assert_same(sd, out)
    assert isinstance(out, collections.OrderedDict)
    np.testing.assert_array_equal(out["layer.weight"].numpy(force=True),
                                  np.arange(12, dtype=np.float32).reshape(3, 4).T)
    np.testing.assert_array_equal(out["strided"].numpy(), [[0, 2], [4, 6], [8, 10]])
    assert out["scalar"].shape == () and out["scalar"].item() == 7
    assert out["empty"].shape == (0, 3) and out["empty"].dtype == graphnn.float16
    assert out["optimizer"]["state"][0]["step"] == 10
    assert out["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert math.copysign(1.0, out["floats"][1]) == -1.0
    assert out["ints"][-1] == 10 ** 30


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3, 4), (3, 0, 2)])
def test_round_trip_every_dtype(tmp_path, dtype, shape):
    array = _array(dtype, shape)
    t = graphnn.from_numpy(array.copy())
    ser.save({"t": t}, str(tmp_path / "x"))
    out = ser.load(str(tmp_path / "x"))["t"]
    assert out.dtype == dtype and tuple(out.shape) == shape
    np.testing.assert_array_equal(out.numpy(), array)
    assert out.numpy().flags.writeable and out.numpy().dtype.isnative


def test_loaded_tensors_own_their_memory(tmp_path):
    t = graphnn.arange(6).reshape(2, 3)
    ser.save({"a": t, "b": t}, tmp_path / "x")
    out = ser.load(tmp_path / "x")
    out["a"].fill_(0)
    np.testing.assert_array_equal(out["b"].numpy(), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(t.numpy(), [[0, 1, 2], [3, 4, 5]])


def test_requires_grad_is_kept(tmp_path):
    ser.save({"p": graphnn.ones(2, requires_grad=True), "q": graphnn.ones(2)}, tmp_path / "x")
    out = ser.load(tmp_path / "x")
    assert out["p"].requires_grad and out["p"].is_leaf and not out["q"].requires_grad
    out["p"].sum().backward()
    np.testing.assert_array_equal(out["p"].grad.numpy(), [1, 1])


def test_bare_tensor_and_plain_roots(tmp_path):
    for obj in (graphnn.tensor([1.5, 2.5]), 3, "x", None, [1, (2,)]):
        ser.save(obj, tmp_path / "x")
        assert_same(obj, ser.load(tmp_path / "x"))


def test_numpy_scalars_save_as_python_values(tmp_path):
    ser.save({"a": np.float32(1.5), "b": np.int64(3), "c": np.bool_(True)}, tmp_path / "x")
    out = ser.load(tmp_path / "x")
    assert out == {"a": 1.5, "b": 3, "c": True}
    assert type(out["a"]) is float and type(out["b"]) is int and type(out["c"]) is bool


def test_file_objects(tmp_path):
    sd = _state_dict()
    buf = io.BytesIO()
    ser.save(sd, buf)
    buf.seek(0)
    assert_same(sd, ser.load(buf))
    with open(tmp_path / "f.gnn", "wb") as f:
        ser.save(sd, f)
    with open(tmp_path / "f.gnn", "rb") as f:
        assert_same(sd, ser.load(f))
    with open(tmp_path / "f.gnn", "r", encoding="latin-1") as f:
        with pytest.raises(SerializationError, match="needs a binary file"):
            ser.load(f)


def test_same_bytes_every_time(tmp_path):
    sd = _state_dict()
    ser.save(sd, tmp_path / "a")
    ser.save(sd, tmp_path / "b")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_file_layout(tmp_path):
    ser.save({"w": graphnn.tensor([1.0, 2.0], dtype=graphnn.float32)}, tmp_path / "x")
    blob = (tmp_path / "x").read_bytes()
    magic, version, crc, hlen = struct.unpack_from("<8sIIQ", blob)
    assert magic == b"\x89GNN\r\n\x1a\n" and version == 1 and hlen % 8 == 0
    header = json.loads(blob[24:24 + hlen])
    assert zlib.crc32(blob[24:24 + hlen]) == crc
    assert header["root"] == {"t": "dict", "items": [["w", {"t": "tensor", "dtype": "float32",
                                                            "shape": [2],
                                                            "offsets": [0, 8]}]]}
    assert blob[24 + hlen:] == np.array([1.0, 2.0], dtype="<f4").tobytes()


def test_load_map_location(tmp_path):
    ser.save([1], tmp_path / "x")
    assert ser.load(tmp_path / "x", map_location="cpu") == [1]
    with pytest.raises(NotImplementedError, match="map_location='cuda'"):
        ser.load(tmp_path / "x", map_location="cuda")


# ---- unsupported values -----------------------------------------------------------------------

@pytest.mark.parametrize("obj,where,typename", [
    ({"layer": {"foo": {1, 2}}}, "'layer.foo'", "set"),
    ({"fn": lambda x: x}, "'fn'", "function"),
    ({"groups": [{"lr": 0.1}, {"lr": object()}]}, "'groups.1.lr'", "object"),
    ({"a": np.zeros(3)}, "'a'", "numpy.ndarray"),
    ({"c": 1 + 2j}, "'c'", "complex"),
    ({"b": b"bytes"}, "'b'", "bytes"),
    (frozenset(), "the top level", "frozenset"),
])
def test_unsupported_values(tmp_path, obj, where, typename):
    path = tmp_path / "x"
    with pytest.raises(TypeError, match=f"graphnn.save: cannot save value of type {typename} "
                                        f"at {where}") as info:
        ser.save(obj, path)
    assert isinstance(info.value, GraphnnError)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_unsupported_key_and_cycle(tmp_path):
    with pytest.raises(TypeError, match=r"cannot save dict key of type tuple at 'm.\(1, 2\)'"):
        ser.save({"m": {(1, 2): 3}}, tmp_path / "x")
    loop = {"a": []}
    loop["a"].append(loop)
    with pytest.raises(TypeError, match="cyclic reference at 'a.0'"):
        ser.save(loop, tmp_path / "x")
    shared = [1]
    ser.save({"a": shared, "b": shared}, tmp_path / "x")  # a DAG is fine
    assert ser.load(tmp_path / "x") == {"a": [1], "b": [1]}


def test_failed_save_keeps_existing_file(tmp_path):
    path = tmp_path / "x"
    ser.save({"v": 1}, path)
    with pytest.raises(TypeError):
        ser.save({"v": {1}}, path)
    assert ser.load(path) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


# ---- atomic writes ----------------------------------------------------------------------------

def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "ckpt.gnn"
    for i in range(3):
        ser.save({"i": i, "w": graphnn.ones(100)}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.gnn"]
    assert ser.load(path)["i"] == 2


def test_write_error_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.gnn"
    ser.save({"old": True}, path)

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        ser.save({"new": True}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.gnn"]
    monkeypatch.undo()
    assert ser.load(path) == {"old": True}


def test_file_permissions_follow_umask(tmp_path):
    path = tmp_path / "x"
    ser.save([1], path)
    old = os.umask(0o022)
    os.umask(old)
    assert (path.stat().st_mode & 0o777) == (0o666 & ~old)


# ---- bad files --------------------------------------------------------------------------------

def _saved(tmp_path):
    path = tmp_path / "good.gnn"
    ser.save(_state_dict(), path)
    return path.read_bytes()


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        ser.load(tmp_path / "nope.gnn")


def test_every_truncation_raises(tmp_path):
    blob = _saved(tmp_path)
    bad = tmp_path / "cut.gnn"
    cuts = sorted(set(range(0, 64)) | set(range(64, len(blob), 7)) | {len(blob) - 1})
    for cut in cuts:
        bad.write_bytes(blob[:cut])
        with pytest.raises(SerializationError, match=r"graphnn\.load: '.*cut\.gnn': ") as info:
            ser.load(bad)
        assert isinstance(info.value, ValueError)
        assert ("truncated" in str(info.value) or "empty file" in str(info.value)), cut


def test_trailing_garbage_raises(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(_saved(tmp_path) + b"\0")
    with pytest.raises(SerializationError, match="1 unexpected bytes after the data section"):
        ser.load(bad)


def test_every_header_byte_flip_raises(tmp_path):
    blob = _saved(tmp_path)
    hlen = struct.unpack_from("<Q", blob, 16)[0]
    bad = tmp_path / "flip.gnn"
    for pos in range(0, 24 + hlen, 3):
        corrupt = bytearray(blob)
        corrupt[pos] ^= 0x20
        bad.write_bytes(bytes(corrupt))
        with pytest.raises(SerializationError, match="flip.gnn"):
            ser.load(bad)


def test_data_byte_flip_raises(tmp_path):
    blob = _saved(tmp_path)
    bad = tmp_path / "flip.gnn"
    for pos in (len(blob) - 1, len(blob) - 40):
        corrupt = bytearray(blob)
        corrupt[pos] ^= 0x01
        bad.write_bytes(bytes(corrupt))
        with pytest.raises(SerializationError, match="corrupt data: CRC-32 mismatch"):
            ser.load(bad)


def test_pickle_is_rejected(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"w": Evil()}))
    with pytest.raises(SerializationError, match="not a graphnn file.*pickle"):
        ser.load(path)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("content,what", [
    (b"PK\x03\x04" + b"\0" * 40, "zip"),
    (b"hello world, definitely not a checkpoint", "bad magic"),
    (b"", "empty file"),
])
def test_foreign_files_rejected(tmp_path, content, what):
    path = tmp_path / "foreign"
    path.write_bytes(content)
    with pytest.raises(SerializationError, match=what):
        ser.load(path)


def _craft(header: dict, data: bytes = b"", version: int = 1) -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<8sIIQ", ser.MAGIC, version, zlib.crc32(raw), len(raw)) + raw + data


def _header(root, data=b"", **extra):
    h = {"format": "graphnn", "version": 1, "data_size": len(data),
         "data_crc32": zlib.crc32(data), "root": root}
    h.update(extra)
    return h


def _tensor(dtype="float32", shape=(2,), offsets=(0, 8)):
    return {"t": "tensor", "dtype": dtype, "shape": list(shape), "offsets": list(offsets)}


DATA = np.arange(2, dtype="<f4").tobytes()


@pytest.mark.parametrize("root,data,message", [
    (_tensor(offsets=(0, 16)), DATA, r"point outside the data section of 8 bytes"),
    (_tensor(offsets=(-8, 0)), DATA, r"point outside the data section"),
    (_tensor(offsets=(4, 12)), DATA + DATA, r"do not match its shape"),
    (_tensor(shape=(3,)), DATA, r"do not match its shape \[3\]"),
    ({"t": "list", "items": [_tensor(), _tensor()]}, DATA, r"do not match"),
    (_tensor(), DATA + DATA, r"tensors cover 8 of the 16 data bytes"),
    (_tensor(dtype="complex64"), DATA, r"unknown tensor dtype 'complex64'"),
    (_tensor(shape=(-2,)), DATA, r"shape must be a list of non-negative ints"),
    (_tensor(shape=(2.0,)), DATA, r"shape must be a list of non-negative ints"),
    ({"t": "pickle", "v": "gASV"}, b"", r"unknown node type 'pickle'"),
    ({"t": "dict", "items": [["a"]]}, b"", r"\[key, value\] pair"),
    ({"t": "dict", "items": [[[1], 2]]}, b"", r"expected a plain value"),
    ({"t": "list", "items": "abc"}, b"", r"malformed list node"),
    ({"t": "float", "v": "1e400x"}, b"", r"expected a plain value"),
    ([1, 2], b"", r"expected a plain value"),
    ({"t": "dict", "items": [["a", {"t": "tuple", "items": [[0]]}]]}, b"", r"at 'a.0'"),
])
def test_crafted_headers_rejected(tmp_path, root, data, message):
    path = tmp_path / "crafted"
    path.write_bytes(_craft(_header(root, data), data))
    with pytest.raises(SerializationError, match=message):
        ser.load(path)


def test_crafted_header_checks(tmp_path):
    path = tmp_path / "crafted"
    cases = [
        (_craft(_header(1), version=2), "unsupported format version 2"),
        (_craft(_header(1, format="torch")), "unexpected top-level fields"),
        (_craft({"format": "graphnn", "version": 1, "root": 1}), "unexpected top-level fields"),
        (_craft(_header(1, b"xy"), b"xy"[:1]), "truncated file: the data section has 1 of 2"),
        (_craft(dict(_header(1), data_crc32=5)), "corrupt data: CRC-32 mismatch"),
        (_craft(dict(_header(1), data_size=-1)), "non-negative integers"),
        (ser.MAGIC + struct.pack("<IIQ", 1, zlib.crc32(b"{no json"), 8) + b"{no json",
         "not valid JSON"),
        (ser.MAGIC + struct.pack("<IIQ", 1, zlib.crc32(b"NaN     "), 8) + b"NaN     ",
         "not valid JSON"),
        (ser.MAGIC + struct.pack("<IIQ", 1, 0, 2 ** 63), "header claims"),
    ]
    for depth, message in ((150, "nested deeper than 100 levels"), (5000, "nested too deeply")):
        text = '{"t":"list","items":[' * depth + "1" + "]}" * depth
        h = '{"format":"graphnn","version":1,"data_size":0,"data_crc32":0,"root":%s}' % text
        raw = h.encode() + b" " * (-len(h) % 8)
        cases.append((ser.MAGIC + struct.pack("<IIQ", 1, zlib.crc32(raw), len(raw)) + raw,
                      message))
    for blob, message in cases:
        path.write_bytes(blob)
        with pytest.raises(SerializationError, match=message):
            ser.load(path)


def test_pathlike_and_str_paths(tmp_path):
    class P(os.PathLike):
        def __fspath__(self):
            return str(tmp_path / "pl")
    ser.save([1, 2], P())
    assert ser.load(str(tmp_path / "pl")) == [1, 2]
    assert ser.load(pathlib.Path(tmp_path / "pl")) == [1, 2]
    with pytest.raises(TypeError, match="expected a path or a binary file object"):
        ser.save([1], 42)


def test_deep_nesting_on_save(tmp_path):
    obj = [1]
    for _ in range(99):
        obj = [obj]
    ser.save({"x": obj}, tmp_path / "ok")
    assert ser.load(tmp_path / "ok") == {"x": obj}
    with pytest.raises(TypeError, match="nested deeper than 100 levels"):
        ser.save({"x": [obj, [[obj]]]}, tmp_path / "deep")


def test_a_cuda_state_dict_saves_its_values_and_loads_on_the_cpu(tmp_path):
    """``cuda`` tensors (Triton's interpreter here) are saved with their values, in graphnn's
    format as in safetensors; they load as CPU tensors, which ``load_state_dict`` copies into
    a model on the device (as ``torch.load(map_location="cpu")`` then loading does)."""
    pytest.importorskip("triton")
    graphnn.manual_seed(0)
    model = graphnn.nn.Sequential(graphnn.nn.Linear(3, 4), graphnn.nn.BatchNorm1d(4)).cuda()
    for name in ("state.gnn", "state.safetensors"):
        path = tmp_path / name
        graphnn.save(model.state_dict(), path)
        loaded = graphnn.load(path)
        assert all(t.device == graphnn.device("cpu") for t in loaded.values())
        again = graphnn.nn.Sequential(graphnn.nn.Linear(3, 4), graphnn.nn.BatchNorm1d(4)).cuda()
        again.load_state_dict(loaded)
        for (key, a), b in zip(model.state_dict().items(), again.state_dict().values()):
            assert b.device == a.device
            np.testing.assert_array_equal(a.cpu().numpy(), b.cpu().numpy(), err_msg=key)
