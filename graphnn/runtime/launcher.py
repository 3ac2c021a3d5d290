"""Runs compiled kernels on their backend's device, with state resident between calls.

A ``Launcher`` belongs to one device (``launcher_for(backend, wrap)``: one per device, shared by
every compiled entry that runs there) and keeps a device copy of each state tensor (parameter,
buffer, ``.grad``, optimizer state) a kernel has read or written:

- ``run(artifact, arrays, state)`` checks the call's host input arrays against the artifact's
  signature, uploads them, and launches the kernel with the device copies of the state tensors
  it reads (``state``: graph parameter name -> tensor). A copy is uploaded only when the tensor
  is new to the launcher, its version counter moved (an eager in-place write, on it or on a
  view) or its host array was replaced (``x.data = y``). ``launch`` is the same for inputs
  already on the device (a training forward's saved values feeding its backward).
- ``write_updates(updates, state)`` writes a kernel's state updates (state name -> device
  array) into the tensors' device copies and moves each version counter as an eager in-place
  write does. On a device with its own memory the host array is then stale: the tensor is
  marked (``Tensor._mark_host_stale``) and the first eager read of it downloads the values
  into its host array in place (a dirty flag: version counters change only on writes, so they
  cannot say that the host is behind). A write through an alias the mark does not reach (a
  view made before the call) while the host is behind is refused at the next upload.
- ``rebind(values, state)`` makes tensors for the values a kernel stored in Python slots (a
  new ``.grad``, a new optimizer state entry): a value whose memory belongs to a state tensor
  or to a value already handed out is copied first (two slots set to one value must not share
  memory), asking the device who owns an array (``Device.owner``).
- ``to_host(structure)`` brings results and gradients to the host for eager code.

On a host device (``Device.shares_host``: the NumPy and reference backends) a device array is
the tensor's own host array: nothing is copied, uploaded or ever stale. A tensor that lives on
the device (``tensor._on_device``: its storage is a device array, as a cuda tensor's) is its
own device copy in the same way: kernels read and update its storage, and the tensors a kernel
hands out for a call on such tensors live on the device too (``rebind(..., wrap_device)``,
the compiler's ``wrap_device(device_array) -> tensor``).

The runtime does not import the frontend: tensors are used through ``_data``,
``_version_counter``, ``_host_array()`` and ``_mark_host_stale()``, and new tensors are made by
the ``wrap(host_array)`` the compiler gives (``Tensor._wrap``), or ``wrap_device``.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from ..ir.errors import GraphnnError
from ..ir.graph import map_structure


class StaleWriteError(GraphnnError, RuntimeError):
    """A state tensor's host memory was written while a kernel's newer values were still only
    on the device (through a view or alias made before the compiled call)."""


@dataclass(eq=False)
class _Copy:
    """A state tensor's device copy: ``host`` is the host array it mirrors, ``version`` the
    tensor's version when the two last agreed, ``dirty`` whether the device is ahead."""

    array: object
    host: np.ndarray
    version: int
    dirty: bool = False


class Launcher:
    """Compiled kernels on one backend's device (see the module docstring)."""

    def __init__(self, device, wrap):
        self.device = device
        self._wrap = wrap
        self._copies: dict = {}  # id(tensor) -> _Copy, dropped when the tensor dies

    # ---- state on the device --------------------------------------------------------------------

    def device_array(self, tensor):
        """``tensor``'s device copy, uploaded first when the launcher has none or the host
        changed since (new array or new version)."""
        if self.device.shares_host or tensor._on_device:
            return tensor._data
        key = id(tensor)
        copy = self._copies.get(key)
        host, version = tensor._host_array(), tensor._version_counter.value
        if copy is not None and copy.host is host:
            if copy.version == version:
                return copy.array
            if copy.dirty:
                raise StaleWriteError(
                    "a state tensor was written in place through a view or alias made before "
                    "a compiled call updated it on the device; its new values were never read "
                    "back, so the write would lose them (read the tensor itself, e.g. x.data, "
                    "before writing through older views)")
        if copy is None:
            weakref.finalize(tensor, self._copies.pop, key, None)
        host = tensor._data  # refreshed if another launcher's kernel wrote it
        self._copies[key] = copy = _Copy(self.device.upload(host), host, version)
        return copy.array

    def state_arrays(self, names, state: dict) -> dict:
        """{name: device copy} of the state tensors ``names`` (``state``: name -> tensor)."""
        return {name: self.device_array(state[name]) for name in names}

    # ---- running kernels ------------------------------------------------------------------------

    def run(self, artifact, arrays, state: dict):
        """The artifact's outputs (device arrays) for the host input ``arrays``, checked
        against its signature, with the state it reads resident on the device."""
        artifact.check(arrays)
        return self.launch(artifact, [self.upload(a) for a in arrays], state)

    def launch(self, artifact, device_arrays, state: dict, sizes=None):
        """``run`` for inputs already on the device (not checked); ``sizes``: the values of a
        ``SymbolicArtifact``'s size symbols, when its inputs do not carry them all."""
        params = self.state_arrays(artifact.param_names, state)
        if sizes is not None:
            return artifact.launch(device_arrays, params, self.to_host, sizes)
        return artifact.launch(device_arrays, params, self.to_host)

    def upload(self, host):
        """A device array of ``host``'s values (``host`` itself on a host device, or when it
        is a device array already)."""
        return self.device.upload(host) if isinstance(host, np.ndarray) else host

    def to_host(self, structure):
        """``structure`` (a kernel's nested outputs) with every array brought to the host."""
        if self.device.shares_host:
            return structure
        return map_structure(self.device.download, structure)

    # ---- what a kernel wrote --------------------------------------------------------------------

    def write_updates(self, updates: dict, state: dict) -> None:
        """Write each updated state value (name -> device array) into its tensor's device copy
        (the kernel may have written it there already), moving the tensor's version as an eager
        in-place write does; on a device with its own memory, the host copy becomes stale."""
        device = self.device
        for name, array in updates.items():
            tensor = state[name]
            target = self.device_array(tensor)
            if array is not target:
                device.copy(array, target)
            tensor._version_counter.value += 1
            if device.shares_host or tensor._on_device:
                continue
            copy = self._copies[id(tensor)]
            copy.version, copy.dirty = tensor._version_counter.value, True
            tensor._mark_host_stale(self._refresher(copy))

    def rebind(self, values: dict, state: dict, wrap_device=None) -> dict:
        """{name: new tensor} for the values (name -> device array) a kernel stored in Python
        slots; none shares memory with a state tensor or another of them. With
        ``wrap_device(device_array) -> tensor`` (a call on device tensors) the new tensors
        live on the device."""
        device = self.device
        owners = {device.owner(array) for array in self._state_on_device(state)}
        tensors = {}
        for name, array in values.items():
            array = self._apart(array, owners)
            owners.add(device.owner(array))
            tensors[name] = self._adopt(array) if wrap_device is None else wrap_device(array)
        return tensors

    def apart_from_state(self, structure, state: dict):
        """``structure`` (a kernel's results, nested) with each array that shares memory with
        a state tensor replaced by a copy, made before the call's updates are written."""
        owners = {self.device.owner(array) for array in self._state_on_device(state)}
        return map_structure(lambda array: self._apart(array, owners), structure)

    def _apart(self, array, owners):
        """``array``, or a copy of it when its memory is one of ``owners``'."""
        device = self.device
        if device.owner(array) not in owners:
            return array
        fresh = device.allocate(device.type_of(array))
        device.copy(array, fresh)
        return fresh

    def _state_on_device(self, state: dict) -> list:
        """The device arrays of ``state``'s tensors as they are now (nothing is uploaded: a
        tensor with no device copy shares no memory with a kernel's values)."""
        if self.device.shares_host:
            return [t._data for t in state.values()]
        copies = (self._copies.get(id(t)) for t in state.values() if not t._on_device)
        return [copy.array for copy in copies if copy is not None] + \
            [t._data for t in state.values() if t._on_device]

    def _adopt(self, array):
        """A new tensor whose device copy is ``array`` (its host copy made on first read)."""
        if self.device.shares_host:
            return self._wrap(array)
        host = np.empty(array.shape, self.device.type_of(array).dtype.np)
        tensor = self._wrap(host)
        copy = _Copy(array, host, tensor._version_counter.value, dirty=True)
        self._copies[id(tensor)] = copy
        weakref.finalize(tensor, self._copies.pop, id(tensor), None)
        tensor._mark_host_stale(self._refresher(copy))
        return tensor

    def _refresher(self, copy: _Copy):
        """The refresh a stale tensor runs before its host array is read: the device values
        written into the host array in place (its views and aliases share that memory)."""
        device = self.device

        def refresh():
            np.copyto(copy.host, device.download(copy.array))
            copy.dirty = False
        return refresh


_LAUNCHERS: dict = {}  # device -> its Launcher
_LOCK = threading.Lock()


def launcher_for(backend, wrap) -> Launcher:
    """The one launcher of ``backend``'s device (``wrap(host_array) -> tensor``)."""
    with _LOCK:
        launcher = _LAUNCHERS.get(backend.device)
        if launcher is None:
            launcher = _LAUNCHERS[backend.device] = Launcher(backend.device, wrap)
        return launcher
