"""``graphnn.device`` and the registry of device runtimes.

A device is a type (``cpu`` or ``cuda``) and an optional index, written and compared as
PyTorch does: ``device("cuda")`` has no index and differs from ``device("cuda:0")``; a device is
never equal to a string. Tensors on the CPU hold NumPy arrays; tensors on another device hold
that device's arrays, which only its *runtime* knows how to make and run ops on. The frontend
may not import the compiler or the backends (the layer rule), so a runtime is registered here
from below the frontend's users: ``graphnn/compiler/device_runner.py`` registers the Triton
backend's runtime for ``cuda``. A runtime is any object with:

- ``available() -> bool`` and ``unavailable_reason() -> str`` (why not, for error messages);
- ``device_count() -> int``;
- ``upload(host ndarray) -> array`` and ``download(array) -> ndarray`` (both copy);
- ``device_of(array) -> device or None``: the device of one of its arrays (None: not one);
- ``run(op, arrays, attrs, out_types) -> list of arrays``: registry op ``op`` on device arrays;
  a view op (``OpDef.view``) gives a view of its input's memory where the host would give one
  (a reshape the strides do not allow copies), so writes through it reach the input, as on
  the host;
- ``shares_memory(a, b) -> bool``: whether two of its arrays view the same memory;
- ``overlapping(array) -> bool``: whether two elements of an array share memory (an expanded
  view), which cannot be written in place.
"""
from __future__ import annotations

from ..ir.errors import GraphnnError, UnsupportedError

DEVICE_TYPES = ("cpu", "cuda")


class DeviceError(GraphnnError, RuntimeError):
    """A bad device string or index, or an op given tensors on different devices."""


class device:
    """``device("cuda")``, ``device("cuda:0")``, ``device("cuda", 0)``, ``device(other)``."""

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool) and index is None:
            type, index = "cuda", type  # an int names a CUDA device, as in PyTorch
        if not isinstance(type, str):
            raise DeviceError(f"graphnn.device: expected a string or a device, got "
                              f"{type!r}")
        name, _, number = type.partition(":")
        if name not in DEVICE_TYPES:
            raise DeviceError(f"graphnn.device: expected one of {', '.join(DEVICE_TYPES)} "
                              f"device type at start of device string: {type}")
        if number:
            if index is not None or not number.isdigit():
                raise DeviceError(f"graphnn.device: invalid device string: {type!r}")
            index = int(number)
        if index is not None and (isinstance(index, bool) or int(index) < 0):
            raise DeviceError(f"graphnn.device: device index must be a non-negative integer, "
                              f"got {index!r}")
        object.__setattr__(self, "type", name)
        object.__setattr__(self, "index", None if index is None else int(index))

    def __setattr__(self, name, value):
        raise AttributeError(f"graphnn.device is immutable (cannot set {name})")

    def __eq__(self, other):
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"

    def __reduce__(self):
        return device, (self.type, self.index)


CPU = device("cpu")
RUNTIMES: dict = {}  # device type -> its registered runtime (see the module docstring)


def register_device_runner(device_type: str, runtime) -> None:
    """Make ``runtime`` the one that holds and runs tensors of ``device_type``."""
    if device_type not in DEVICE_TYPES or device_type == "cpu":
        raise ValueError(f"register_device_runner: no device type {device_type!r} to register")
    RUNTIMES[device_type] = runtime


def runtime_of(device_type: str, what: str):
    """The runtime of ``device_type``, available; ``UnsupportedError`` saying why not (and what
    needed it: ``what``) otherwise."""
    runtime = RUNTIMES.get(device_type)
    if runtime is None:
        raise UnsupportedError(f"graphnn: {what}: device {device_type!r} is not available "
                               f"(no runtime is registered for it)")
    if not runtime.available():
        raise UnsupportedError(f"graphnn: {what}: device {device_type!r} is not available: "
                               f"{runtime.unavailable_reason()}")
    return runtime


def is_available(device_type: str) -> bool:
    """Whether tensors can live on ``device_type`` here."""
    runtime = RUNTIMES.get(device_type)
    return runtime is not None and runtime.available()


def device_count(device_type: str) -> int:
    return RUNTIMES[device_type].device_count() if is_available(device_type) else 0


def resolve(spec, what: str) -> device:
    """The concrete device a tensor moved to ``spec`` lives on: CPU, or ``cuda:i`` of an
    available runtime with ``i`` below its device count (``cuda`` means ``cuda:0``)."""
    d = spec if isinstance(spec, device) else device(spec)
    if d.type == "cpu":
        return CPU
    count = runtime_of(d.type, what).device_count()
    index = 0 if d.index is None else d.index
    if index >= count:
        raise DeviceError(f"graphnn: {what}: invalid device ordinal {d} ({count} {d.type} "
                          f"device{'s' if count != 1 else ''} available)")
    return device(d.type, index)
