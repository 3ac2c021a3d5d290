"""The layer rule of ARCHITECTURE.md: imports only point down the table.

ir imports nothing else of graphnn; frontend and passes import ir; codegen imports ir; runtime
imports ir and codegen; optim and nn (frontend-level packages) import ir and the frontend; the
compiler uses every layer below it, and the tools (the command line, explain, the fuzzer) the
compiler and the public API. No backend folder under codegen imports another.
"""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "graphnn"
ALLOWED = {"ir": {"ir"}, "frontend": {"ir", "frontend"}, "passes": {"ir", "passes"},
           "codegen": {"ir", "codegen"}, "runtime": {"ir", "codegen", "runtime"},
           "optim": {"ir", "frontend", "optim"}, "nn": {"ir", "frontend", "nn"},
           "compiler": {"ir", "frontend", "nn", "optim", "passes", "codegen", "runtime",
                        "compiler"},
           "fuzz": {"ir", "frontend", "nn", "optim", "passes", "codegen", "runtime", "compiler",
                    "fuzz"}}
ALLOWED["utils"] = {"ir", "frontend", "utils"}
ALLOWED["distributed"] = {"ir", "frontend", "distributed"}  # frontend-level collectives
ALLOWED["nn"].add("distributed"); ALLOWED["utils"].add("distributed")  # DDP, sampler
ALLOWED["tools"] = set(ALLOWED) | {"tools"}
for _layer in ALLOWED:  # the bottom layer: native loops and the private-directory checks
    ALLOWED[_layer].add("native")
ALLOWED["native"] = {"native"}
BACKENDS = sorted(p.name for p in (ROOT / "codegen").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def _imported_layers(path: pathlib.Path):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts  # ('graphnn', layer, ...)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(parts[:-1])[: len(parts) - node.level]
            module = base + (node.module.split(".") if node.module else [])
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module.split(".")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")
            continue
        else:
            continue
        yield node.lineno, module


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_down_the_layer_table(layer):
    bad = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for lineno, module in _imported_layers(path):
            if len(module) > 1 and module[0] == "graphnn" and module[1] in ALLOWED \
                    and module[1] not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(ROOT.parent)}:{lineno} imports {'.'.join(module)}")
    assert not bad, "imports pointing up the layer table:\n" + "\n".join(bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_backend_imports_another(backend):
    bad = []
    for path in sorted((ROOT / "codegen" / backend).rglob("*.py")):
        for lineno, module in _imported_layers(path):
            if module[:2] == ["graphnn", "codegen"] and len(module) > 2 \
                    and module[2] in BACKENDS and module[2] != backend:
                bad.append(f"{path.relative_to(ROOT.parent)}:{lineno} imports {'.'.join(module)}")
    assert not bad, "a backend imports another:\n" + "\n".join(bad)


def test_every_package_is_in_the_layer_table():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages - set(ALLOWED) <= {"autograd", "serialization"}
