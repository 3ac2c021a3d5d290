"""What the disk cache of kernels trusts: a private directory, entries only this user can have
written, source files and never bytecode. Each planted entry carries a correct checksum, as an
attacker who can write the directory would write it; code that would write a marker file shows
whether it ran."""
import hashlib
import importlib.util
import marshal
import os
import pathlib
import stat
import warnings

import numpy as np
import pytest
from compile_helpers import isolated_cache  # noqa: F401  (autouse)

import graphnn
from graphnn import nn
from graphnn.runtime import cache
from graphnn.runtime.artifact import CompiledArtifact
from graphnn.runtime.backends import get_backend


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _plant(entry, body: str) -> None:
    """Rewrite ``entry`` with ``body`` under a header whose sum matches it (mode kept)."""
    digest = hashlib.sha256(body.encode()).hexdigest()
    entry.write_text(f"{cache.HEADER}{digest}\n{body}")


def _marker_line(marker) -> str:
    return f"open({str(marker)!r}, 'w').close()\n"


def _body(entry) -> str:
    return entry.read_text().partition("\n")[2]


def _cache_warnings(caught) -> list:
    return [w for w in caught if issubclass(w.category, getattr(cache, "KernelCacheWarning", ()))]


def _pytorch(model, x) -> np.ndarray:
    """``model``'s output for ``x`` computed by PyTorch from its weights (the oracle)."""
    torch = pytest.importorskip("torch")
    w = {k: torch.from_numpy(v.detach().numpy()) for k, v in model.state_dict().items()}
    hidden = torch.relu(torch.nn.functional.linear(torch.from_numpy(x.numpy()), w["fc1.weight"],
                                                   w["fc1.bias"]))
    return torch.nn.functional.linear(hidden, w["fc2.weight"], w["fc2.bias"]).numpy()


def _assert_like_pytorch(output, model, x) -> None:
    np.testing.assert_allclose(output.numpy(), _pytorch(model, x), rtol=2e-5, atol=2e-6)


def _compiled_copy(model):
    copy = Net()
    copy.load_state_dict(model.state_dict())
    copy.compile()
    return copy


def _compiled_once(x):
    """A Net and the one cache entry that compiling it and calling it on ``x`` wrote."""
    model = Net()
    with graphnn.no_grad():
        _assert_like_pytorch(_compiled_copy(model)(x), model, x)
    (entry,) = cache_dir_path().glob("*.py")
    return model, entry


def cache_dir_path() -> pathlib.Path:
    return pathlib.Path(cache.cache_dir())


def test_cache_directory_and_its_missing_parents_are_created_private(tmp_path, monkeypatch):
    root = tmp_path / "shared" / "deeper" / "kernels"
    monkeypatch.setenv("GRAPHNN_CACHE_DIR", str(root))
    old_umask = os.umask(0o002)  # a permissive umask must not widen them
    try:
        _compiled_once(graphnn.randn(4, 6))
    finally:
        os.umask(old_umask)
    for directory in (root, root.parent, root.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for entry in root.iterdir():
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777], ids=oct)
def test_tampered_entry_in_a_directory_others_can_write_is_not_run(tmp_path, mode):
    x = graphnn.randn(4, 6)
    model, entry = _compiled_once(x)
    marker = tmp_path / "planted-code-ran"
    _plant(entry, _marker_line(marker) + _body(entry))
    os.chmod(entry.parent, mode)
    cache.clear_memory()  # a new process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with graphnn.no_grad():
            second = _compiled_copy(model)
            _assert_like_pytorch(second(x), model, x)
            wider = graphnn.randn(5, 6)  # a second signature: a second kernel, no new warning
            _assert_like_pytorch(second(wider), model, wider)
    assert not marker.exists()
    (warning,) = _cache_warnings(caught)
    assert str(entry.parent) in str(warning.message) and "group or others" in str(warning.message)
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # nothing written there


def test_tampered_entry_that_others_can_write_is_replaced(tmp_path):
    x = graphnn.randn(4, 6)
    model, entry = _compiled_once(x)
    good = entry.read_text()
    marker = tmp_path / "planted-code-ran"
    _plant(entry, _marker_line(marker) + _body(entry))
    os.chmod(entry, 0o666)
    cache.clear_memory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with graphnn.no_grad():
            second = _compiled_copy(model)
            _assert_like_pytorch(second(x), model, x)
    assert not marker.exists()
    assert len(_cache_warnings(caught)) == 1
    assert entry.read_text() == good and stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_entry_in_a_directory_owned_by_another_user_is_not_run(tmp_path, monkeypatch):
    x = graphnn.randn(4, 6)
    model, entry = _compiled_once(x)
    marker = tmp_path / "planted-code-ran"
    _plant(entry, _marker_line(marker) + _body(entry))
    cache.clear_memory()
    someone_else = os.getuid() + 4242  # the files stay owned by the real uid
    monkeypatch.setattr(os, "getuid", lambda: someone_else)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with graphnn.no_grad():
            second = _compiled_copy(model)
            _assert_like_pytorch(second(x), model, x)
    assert not marker.exists()
    (warning,) = _cache_warnings(caught)
    assert f"uid {someone_else}" in str(warning.message)


def _plant_bytecode(entry, code_text: str) -> None:
    """A timestamp .pyc for ``entry`` in its __pycache__ that matches the source's mtime and
    size, so that a plain import of ``entry`` runs ``code_text`` instead of the source."""
    pyc = importlib.util.cache_from_source(str(entry))
    os.makedirs(os.path.dirname(pyc), mode=0o700, exist_ok=True)
    st = entry.stat()
    with open(pyc, "wb") as f:
        f.write(importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
                + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
                + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
                + marshal.dumps(compile(code_text, str(entry), "exec")))


def test_planted_bytecode_is_never_used_instead_of_the_source(tmp_path):
    graph = graphnn.trace(lambda x: x * 2.0 + 1.0, graphnn.randn(2, 3))
    CompiledArtifact(graph, get_backend("numpy"))
    (entry,) = cache_dir_path().glob("*.py")
    marker = tmp_path / "planted-bytecode-ran"
    _plant_bytecode(entry, _marker_line(marker)
                    + "def kernel(inputs, params, buffers):\n    return inputs[0]\n")
    spec = importlib.util.spec_from_file_location("plain_import_of_the_entry", entry)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert marker.exists()  # the plant works on a plain import
    marker.unlink()

    cache.clear_memory()
    artifact = CompiledArtifact(graph, get_backend("numpy"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(artifact.run([x], {}), x * 2.0 + 1.0)
    assert not marker.exists()
    assert cache.stats.disk_hits == 1
    assert artifact.kernel.__code__.co_filename == str(entry)  # imported from the .py source


def test_kernels_are_imported_without_writing_bytecode():
    graph = graphnn.trace(lambda x: x - 3.0, graphnn.randn(2, 3))
    artifact = CompiledArtifact(graph, get_backend("numpy"))
    (entry,) = cache_dir_path().iterdir()
    assert artifact.kernel.__code__.co_filename == str(entry)
    assert not (entry.parent / "__pycache__").exists()


def test_entry_that_fails_to_import_is_discarded_and_regenerated():
    graph = graphnn.trace(lambda x: x * 3.0, graphnn.randn(2, 3))
    CompiledArtifact(graph, get_backend("numpy"))
    (entry,) = cache_dir_path().glob("*.py")
    good = entry.read_text()
    _plant(entry, "def kernel(inputs, params, buffers:\n    return inputs\n")  # SyntaxError
    cache.clear_memory()
    before = cache.stats.generated
    artifact = CompiledArtifact(graph, get_backend("numpy"))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(artifact.run([x], {}), x * 3.0)
    assert cache.stats.generated == before + 1 and cache.stats.disk_corrupt == 1
    assert entry.read_text() == good
    assert artifact.kernel.__code__.co_filename == str(entry)  # the regenerated file, imported


def test_kernel_that_raises_when_run_runs_once_and_its_error_reaches_the_caller(tmp_path):
    x = graphnn.randn(4, 6)
    model, entry = _compiled_once(x)
    runs = tmp_path / "runs"
    _plant(entry, "def kernel(inputs, params, buffers):\n"
                  f"    with open({str(runs)!r}, 'a') as f:\n"
                  "        f.write('ran\\n')\n"
                  "    raise RuntimeError('kernel failed on purpose')\n")
    cache.clear_memory()
    second = _compiled_copy(model)
    with graphnn.no_grad(), pytest.raises(RuntimeError, match="failed on purpose") as caught:
        second(x)
    assert runs.read_text() == "ran\n"
    assert caught.traceback[-1].path == entry  # raised in the entry's file, as imported
    assert entry.exists() and cache.stats.disk_corrupt == 0  # not a cache problem


def test_a_symbolic_kernel_is_imported_from_its_private_cache_file_once_for_every_size():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    model.compile(dynamic=True)
    with graphnn.no_grad():
        for batch in (3, 6):
            x = graphnn.randn(batch, 4)
            np.testing.assert_allclose(model(x).numpy(),
                                       np.maximum(x.numpy() @ model[0].weight.detach().numpy().T
                                                  + model[0].bias.detach().numpy(), 0), rtol=1e-5)
    artifact = model.forward._entries[model.forward._last].latest.artifact
    assert len(artifact._kernels) == 2  # one kernel per set of sizes, from one module
    assert len({k.__code__.co_filename for k in artifact._kernels.values()}) == 1
    for kernel in artifact._kernels.values():
        path = pathlib.Path(kernel.__code__.co_filename)
        assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
