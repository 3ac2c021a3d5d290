"""graphnn.load on hostile input: non-regular files, lying headers, bounded reads, fuzzed bytes.

Whatever a file holds, ``graphnn.load`` returns a value or raises ``SerializationError``; it
never blocks on a FIFO, never reads an endless device, and never asks for more bytes than the
header declares and the file holds.
"""
import copy
import gzip
import io
import json
import math
import os
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import graphnn
from graphnn import serialization as ser
from graphnn.ir.errors import GraphnnError, SerializationError


def _craft(root, data: bytes = b"", **fields) -> bytes:
    """A file with a valid prefix, header CRC and data CRC around ``root`` and ``data``."""
    header = {"format": "graphnn", "version": 1, "data_size": len(data),
              "data_crc32": zlib.crc32(data), "root": root}
    header.update(fields)
    return _reseal(json.dumps(header, separators=(",", ":")).encode(), data)


def _reseal(header_json: bytes, data: bytes) -> bytes:
    """A file around a header's JSON text and data, with the prefix and header CRC fixed."""
    raw = header_json + b" " * (-len(header_json) % 8)
    return struct.pack("<8sIIQ", ser.MAGIC, 1, zlib.crc32(raw), len(raw)) + raw + data


def _tensor(dtype, shape, offsets):
    return {"t": "tensor", "dtype": dtype, "shape": list(shape), "offsets": list(offsets)}


def _load_bytes(tmp_path, blob: bytes, name="crafted.gnn"):
    path = tmp_path / name
    path.write_bytes(blob)
    return ser.load(path)


def test_serialization_error_is_what_pytorch_raises():
    # torch.load raises RuntimeError for a truncated or corrupt checkpoint; ValueError stays
    # for code written against earlier graphnn versions
    assert issubclass(SerializationError, GraphnnError)
    assert issubclass(SerializationError, RuntimeError)
    assert issubclass(SerializationError, ValueError)


# ---- files that are not regular files ---------------------------------------------------------

def test_directory_is_refused(tmp_path):
    with pytest.raises(SerializationError, match="is a directory, not a regular file"):
        ser.load(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.gnn"
    os.mkfifo(fifo)
    link = tmp_path / "link.gnn"
    link.symlink_to(fifo)
    for path in (fifo, link):
        outcome = {}

        def attempt():
            try:
                outcome["value"] = ser.load(path)
            except BaseException as e:  # noqa: BLE001 - reported below
                outcome["error"] = e
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        thread.join(timeout=20)
        if thread.is_alive():
            # a regression blocks in open(); opening the writing end releases it
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(timeout=20)
            pytest.fail("graphnn.load blocked on a FIFO")
        assert isinstance(outcome.get("error"), SerializationError), outcome
        assert "is a FIFO, not a regular file" in str(outcome["error"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /dev/zero and /proc")
def test_dev_zero_is_refused_without_reading_it():
    # In a child process whose address space is capped one GiB above what it uses after import,
    # so a regression that reads /dev/zero to its (missing) end fails with MemoryError instead
    # of taking the machine's memory; the timeout catches a regression that spins.
    script = textwrap.dedent("""
        import os, resource
        import graphnn
        from graphnn.ir.errors import SerializationError
        used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30),) * 2)
        try:
            graphnn.load("/dev/zero")
        except SerializationError as e:
            print("path:", e)
        with open("/dev/zero", "rb") as f:
            try:
                graphnn.load(f)
            except SerializationError as e:
                print("file object:", e)
    """)
    package_root = os.path.dirname(os.path.dirname(graphnn.__file__))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert lines[0].startswith("path:") and "is a character device, not a regular file" in lines[0]
    assert lines[1].startswith("file object:") and "bad magic bytes" in lines[1]


# ---- file objects -----------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_text_mode_file_object(tmp_path, encoding):
    path = tmp_path / "x.gnn"
    ser.save({"w": graphnn.ones(3)}, path)
    with open(path, "r", encoding=encoding) as f:
        with pytest.raises(SerializationError, match=r"opened in text mode.*needs a binary file"):
            ser.load(f)
    with pytest.raises(SerializationError, match="needs a binary file"):
        ser.load(io.StringIO("\x89GNN"))


class _Stream:
    """A non-seekable binary stream that records every byte count it is asked for."""

    def __init__(self, blob: bytes):
        self._buf = io.BytesIO(blob)
        self.requests = []

    def read(self, n=-1):
        self.requests.append(n)
        return self._buf.read(n)


def test_reads_are_bounded_by_declared_sizes():
    blob = io.BytesIO()
    ser.save({"w": graphnn.ones(1000), "b": [1, 2]}, blob)
    blob = blob.getvalue()
    stream = _Stream(blob)
    out = ser.load(stream)
    np.testing.assert_array_equal(out["w"].numpy(), np.ones(1000, np.float32))
    assert stream.requests and all(0 <= n <= len(blob) for n in stream.requests)
    # a stream that holds more than the header declares is still an error
    with pytest.raises(SerializationError, match="unexpected bytes after the data section"):
        ser.load(_Stream(blob + b"\0"))


def test_stream_file_object_round_trips_and_reports_truncation():
    buf = io.BytesIO()
    ser.save({"w": graphnn.arange(10)}, buf)
    blob = buf.getvalue()
    np.testing.assert_array_equal(ser.load(_Stream(blob))["w"].numpy(), np.arange(10))
    for cut, message in ((10, "shorter than the 24-byte prefix"), (30, "the header claims"),
                         (len(blob) - 1, "the data section has")):
        with pytest.raises(SerializationError, match=message):
            ser.load(_Stream(blob[:cut]))


def test_compressed_file_object_round_trips(tmp_path):
    # a GzipFile reports the descriptor of the compressed file: its size bounds nothing
    state = {"w": graphnn.from_numpy(np.zeros((64, 64), np.float32)), "n": 3}
    with gzip.open(tmp_path / "x.gnn.gz", "wb") as f:
        ser.save(state, f)
    assert (tmp_path / "x.gnn.gz").stat().st_size < 1000
    with gzip.open(tmp_path / "x.gnn.gz", "rb") as f:
        out = ser.load(f)
    assert out["n"] == 3
    np.testing.assert_array_equal(out["w"].numpy(), np.zeros((64, 64), np.float32))


# ---- lying headers ----------------------------------------------------------------------------

def _peak_bytes_while(fn):
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("case", ["header length", "data size", "tensor"])
def test_declared_sizes_beyond_the_file_allocate_nothing(tmp_path, case):
    big = 1 << 40
    if case == "header length":
        blob = struct.pack("<8sIIQ", ser.MAGIC, 1, 0, big) + b" " * 76
        message = f"the header claims {big} bytes but only 76"
    elif case == "data size":
        blob = _craft(None, data_size=big)
        message = f"the data section has 0 of {big} bytes"
    else:
        blob = _craft(_tensor("float64", [big // 8], [0, big]), data_size=big)
        message = f"the data section has 0 of {big} bytes"
    assert len(blob) <= 200
    for source in (lambda: tmp_path / "lie.gnn", lambda: io.BytesIO(blob),
                   lambda: _Stream(blob)):
        (tmp_path / "lie.gnn").write_bytes(blob)

        def load():
            with pytest.raises(SerializationError, match=message):
                ser.load(source())
        assert _peak_bytes_while(load) < (1 << 20)


def test_float_node_with_unhashable_value(tmp_path):
    with pytest.raises(SerializationError, match=r"expected a plain value, got \{'t': 'float'"):
        _load_bytes(tmp_path, _craft({"t": "float", "v": [1]}))


def test_json_overflowing_float_is_not_a_plain_value(tmp_path):
    header = json.dumps({"format": "graphnn", "version": 1, "data_size": 0, "data_crc32": 0,
                         "root": 0}).replace('"root": 0', '"root": 1e999')
    blob = _reseal(header.encode(), b"")
    with pytest.raises(SerializationError, match="expected a plain value, got inf"):
        _load_bytes(tmp_path, blob)


def test_bad_dict_value_is_reported_as_a_value(tmp_path):
    root = {"t": "dict", "items": [["layer", {"t": "float", "v": {"x": 1}}]]}
    with pytest.raises(SerializationError) as info:
        _load_bytes(tmp_path, _craft(root))
    message = str(info.value)
    assert "corrupt header at 'layer': expected a plain value" in message
    assert "key" not in message


@pytest.mark.parametrize("dtype,shape,message", [
    ("float32", [0, 2 ** 70], "too large for NumPy"),
    ("float64", [0, 2 ** 62], "too large for NumPy"),  # 2**62 elements of 8 bytes
    ("int8", [0, 2 ** 32, 2 ** 31], "too large for NumPy"),
    ("float32", [0] + [1] * 64, "65 dimensions, more than 64"),
    ("float32", [1] * 100, "100 dimensions, more than 64"),
])
def test_shapes_numpy_cannot_make(tmp_path, dtype, shape, message):
    with pytest.raises(SerializationError, match=message):
        _load_bytes(tmp_path, _craft(_tensor(dtype, shape, [0, 0])))


@pytest.mark.parametrize("dtype,shape", [
    ("int8", (0, 2 ** 63 - 1)),
    ("float64", (0, 2 ** 60 - 1)),
    ("float32", (0,) + (1,) * 63),
])
def test_largest_empty_shapes_round_trip(tmp_path, dtype, shape):
    t = graphnn.from_numpy(np.zeros(shape, dtype=dtype))
    ser.save({"t": t}, tmp_path / "x")
    out = ser.load(tmp_path / "x")["t"]
    assert tuple(out.shape) == shape and out.dtype.name == dtype


# ---- save errors ------------------------------------------------------------------------------

def test_save_refuses_integers_python_cannot_read_back(tmp_path):
    limit = sys.int_info.default_max_str_digits
    bits = (10 ** limit).bit_length()
    for obj, where in (({"a": 10 ** 5000}, "'a'"), ({"b": [-(10 ** limit)]}, "'b.0'"),
                       ({"c": {10 ** limit: 1}}, f"'c.<int of {bits} bits>'")):
        with pytest.raises(ser.SaveTypeError, match=f"integer with more than {limit} "
                                                    f"decimal digits at {where}"):
            ser.save(obj, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []
    widest = 10 ** limit - 1  # exactly `limit` digits
    ser.save({"n": -widest, widest: 1}, tmp_path / "x")
    assert ser.load(tmp_path / "x") == {"n": -widest, widest: 1}


# ---- fuzzing ----------------------------------------------------------------------------------

_DTYPES = [graphnn.bool, graphnn.uint8, graphnn.int32, graphnn.int64, graphnn.float16,
           graphnn.float32, graphnn.float64]


@st.composite
def _tensors(draw):
    dtype = draw(st.sampled_from(_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    values = np.arange(math.prod(shape)).reshape(shape) % 7
    t = graphnn.from_numpy(values.astype(dtype.np))
    if dtype.is_floating_point and draw(st.booleans()):
        t.requires_grad_(True)
    return t


_LEAVES = st.one_of(_tensors(), st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                    st.floats(), st.text(max_size=6))
_KEYS = st.one_of(st.text(max_size=4), st.integers(-5, 5), st.none(), st.booleans())
_STATES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=8)


def _empty_tensor(dtype, shape):
    return {"t": "tensor", "dtype": dtype, "shape": shape, "offsets": [0, 0]}


# what a hostile header puts where a node belongs, and where a number, name or shape belongs
_HOSTILE_NODES = st.sampled_from([
    {"t": "float", "v": [1]}, {"t": "float", "v": {}}, {"t": "float", "v": "1e400"},
    {"t": "dict", "items": [[[1], 2]]}, {"t": "dict", "items": [["a", {"t": "float", "v": [1]}]]},
    {"t": "dict", "items": [["a"]]}, {"t": "list", "items": {}}, {"t": "tensor"}, {"t": []},
    _empty_tensor("float32", [0, 2 ** 70]), _empty_tensor("float64", [0, 2 ** 62]),
    _empty_tensor("int8", [0, 2 ** 63 - 1]), _empty_tensor("bool", [0] * 65),
    _empty_tensor("float16", [1] * 64 + [0]), _empty_tensor("float32", [0, -1]),
    _tensor("int8", [2 ** 40], [0, 2 ** 40]), _tensor("float64", [2 ** 61], [0, 2 ** 64]),
    [1, 2], "x", None, True, 2 ** 70, -0.0])
_HOSTILE_VALUES = st.one_of(
    st.sampled_from([2 ** 70, 2 ** 64, 2 ** 63, 2 ** 62, 2 ** 40, -1, -(2 ** 63), 0, 1, 8,
                     1.5, 1e308, True, None, "", "float64", "int8", "complex64", "tensor",
                     "dict", "odict", "float", "nan", [], {}, [0, 2 ** 70], [2 ** 40], [0] * 65,
                     [1] * 70, [-1, 2], [[1]], [0, 8], [8, 0]]),
    st.integers(-(2 ** 64), 2 ** 64), st.text(max_size=8))


def _value_spots(node, out):
    """Every (container, key) pair in a JSON tree, nested containers included."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        out.append((node, key))
        if isinstance(value, (dict, list)):
            _value_spots(value, out)
    return out


def _node_spots(parent, key, out):
    """Every (container, key) pair of the header that holds a NODE, starting at parent[key]."""
    out.append((parent, key))
    node = parent[key]
    items = node.get("items") if isinstance(node, dict) else None
    if not isinstance(items, list):
        return out
    if node.get("t") in ("list", "tuple"):
        for i in range(len(items)):
            _node_spots(items, i, out)
    elif node.get("t") in ("dict", "odict"):
        for pair in items:
            if isinstance(pair, list) and len(pair) == 2:
                _node_spots(pair, 1, out)
    return out


@st.composite
def _hostile_files(draw):
    """A saved state dict, with values spliced into its header (resealed), then bytes damaged."""
    buf = io.BytesIO()
    ser.save(draw(_STATES), buf)
    blob = buf.getvalue()
    hlen = struct.unpack_from("<Q", blob, 16)[0]
    header, data = json.loads(blob[24:24 + hlen]), blob[24 + hlen:]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            spots, values = _node_spots(header, "root", []), _HOSTILE_NODES
        else:
            spots, values = _value_spots(header, []), _HOSTILE_VALUES
        node, key = spots[draw(st.integers(0, len(spots) - 1))]
        node[key] = copy.deepcopy(draw(values))  # the samples are shared constants
    if draw(st.booleans()):
        header["data_crc32"] = zlib.crc32(data)
    blob = _reseal(json.dumps(header).encode(), data)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        at = draw(st.integers(0, len(blob)))
        if kind == "flip" and at < len(blob):
            blob = blob[:at] + bytes([blob[at] ^ draw(st.integers(1, 255))]) + blob[at + 1:]
        elif kind == "truncate":
            blob = blob[:at]
        elif kind == "insert":
            blob = blob[:at] + draw(st.binary(min_size=1, max_size=16)) + blob[at:]
        elif kind == "delete":
            blob = blob[:at] + blob[at + draw(st.integers(1, 16)):]
    return blob


@settings(max_examples=500, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(blob=_hostile_files(), as_path=st.booleans())
def test_any_bytes_load_or_raise_serialization_error(tmp_path, blob, as_path):
    if as_path:
        (tmp_path / "fuzz.gnn").write_bytes(blob)
        source = tmp_path / "fuzz.gnn"
    else:
        source = io.BytesIO(blob)
    try:
        ser.load(source)
    except SerializationError as e:  # anything else fails the test
        assert str(e).startswith("graphnn.load: ")
