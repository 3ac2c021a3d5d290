"""The ``Backend`` protocol: what the compiler and the runtime need from a code generator.

A backend is a ``Backend`` object (one per folder under ``graphnn/codegen/``, exported as
``BACKEND`` from the folder's ``__init__``):

- ``name`` and ``version``: the version is part of every kernel's cache key, so it must change
  whenever the generated source would (the NumPy backend hashes its own files);
- ``device``: where its kernels' arrays live (a ``Device``: allocate, upload, download,
  copy, type_of, owner). The runtime's launcher keeps parameters, buffers and optimizer state
  there between calls;
- ``kernel_kinds``: the kernel kinds (``graphnn.ir.schedule.KernelKind``) its generator has
  templates for; the scheduling pass receives this set as data (passes never import codegen);
- ``native_ops``: the registry ops it lowers itself; the decompose pass rewrites the others
  into core ops before generation;
- ``generate(schedule, plan=None, kernel_id=None) -> source``: a Python module that defines
  ``kernel(inputs, params, buffers)`` for ``schedule.graph``, running its kernels in schedule
  order; ``plan`` (a memory plan made over ``schedule``, or None) places the values that cross
  kernel boundaries; ``kernel_id`` names the kernel's entries in ``buffers``;
- ``load(path) -> kernel``: the kernel of a generated module, imported from its file.
- ``conv_layout``: None, or the layout its convolutions' im2col columns take,
  ``conv_layout(x_shape, w_shape, stride, padding, dilation, groups, role) -> str`` (``role``:
  ``"forward"``, ``"input_grad"`` or ``"weight_grad"``); the ``conv_columns`` pass receives
  it as data and writes the choices into the graph (``layout``, ``columns`` attributes).

Generated modules are always imported from a real file (``import_kernel_file``), never run by
``exec`` of a string: Triton's interpreter rewrites kernel source it finds through the file
name and silently skips the rewrite for code that has none (wrong results), and its compiler
refuses such code. The module is compiled from the ``.py`` source at every import: no bytecode
is read from or written to ``__pycache__``, so a planted ``.pyc`` is never run.
"""
from __future__ import annotations

import abc
import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass
from typing import Callable, Hashable

import numpy as np

from ..ir.registry import type_of_array
from ..ir.schedule import KernelKind


class Device(abc.ABC):
    """Where a backend's kernels read and write arrays.

    ``shares_host`` is True when a device array IS a host NumPy array (upload and download
    return their argument): the launcher then never copies and nothing is ever stale. ``owner``
    names the allocation an array lives in, so two arrays with the same owner may share memory
    (the launcher copies a kernel's value before handing it out to a second place)."""

    name: str = "device"
    shares_host: bool = False

    @abc.abstractmethod
    def allocate(self, type):
        """A new uninitialized device array of ``type`` (an IR ``TensorType``)."""

    @abc.abstractmethod
    def upload(self, host: np.ndarray):
        """A device array holding ``host``'s values (``host`` itself when ``shares_host``)."""

    @abc.abstractmethod
    def download(self, array) -> np.ndarray:
        """A host array holding ``array``'s values (``array`` itself when ``shares_host``)."""

    @abc.abstractmethod
    def copy(self, src, dst) -> None:
        """Write ``src``'s values into the device array ``dst`` (same shape and dtype)."""

    @abc.abstractmethod
    def type_of(self, array):
        """The IR ``TensorType`` (shape and dtype) of the device array ``array``."""

    @abc.abstractmethod
    def owner(self, array) -> Hashable:
        """A key of the allocation ``array`` lives in: arrays that may share memory have equal
        keys."""


def numpy_owner(array: np.ndarray) -> int:
    """The id of the array owning ``array``'s memory (the root of its ``.base`` chain): NumPy
    keeps no allocation handle, so this walk is how a host device tells owners apart."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return id(array)


class HostDevice(Device):
    """The CPU's memory, as NumPy holds it: device arrays are host arrays, upload and download
    are the identity (no copy), so a host backend's state is never stale."""

    name = "host"
    shares_host = True

    def allocate(self, type):
        return np.empty(tuple(type.shape), type.dtype.np)

    def upload(self, host):
        return host

    def download(self, array):
        return array

    def copy(self, src, dst):
        np.copyto(dst, src)

    def type_of(self, array):
        return type_of_array(array)

    def owner(self, array):
        return numpy_owner(array)


HOST = HostDevice()


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the file's source at every import: reads no bytecode from ``__pycache__`` and
    writes none there."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def import_kernel_file(path: str):
    """Import the file ``path`` as a fresh module (not entered in ``sys.modules``) and return
    its ``kernel``; errors of the import propagate."""
    name = "graphnn_kernel_" + os.path.basename(path)[:16]
    loader = _SourceOnlyLoader(name, path)
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location(name, path, loader=loader))
    loader.exec_module(module)
    return module.kernel


@dataclass(frozen=True)
class Backend:
    """A code generator and the device its kernels run on (see the module docstring)."""

    name: str
    version: str
    device: Device
    kernel_kinds: frozenset
    native_ops: frozenset
    generate: Callable[..., str]
    load: Callable[[str], Callable] = import_kernel_file
    conv_layout: Callable[..., str] | None = None
    symbolic_sizes: bool = False  # ``generate`` writes symbolic sizes (``ir.symbolic``) as code

    def __post_init__(self):
        unknown = {k for k in self.kernel_kinds if not isinstance(k, KernelKind)}
        if unknown:
            raise TypeError(f"backend {self.name!r}: kernel kinds must be KernelKind members, "
                            f"got {sorted(map(repr, unknown))}")

    def __repr__(self):
        return f"<Backend {self.name} {self.version} on {self.device.name}>"
