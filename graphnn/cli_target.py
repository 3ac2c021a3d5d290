"""What ``graphnn dump-ir`` and ``graphnn explain`` share: naming a model on the command line
(TARGET and --input), building it, and tracing it.

TARGET names a Module class (constructed with no arguments), a function returning a Module
(called with no arguments), a Module instance, or a function of tensors, in a file
(``path/to/file.py:NAME``) or an importable module (``package.module:NAME``). Usage errors (a bad
TARGET or --input, a missing file or name, a factory needing arguments, inputs that do not fit
the forward's arguments) exit with status 2; errors raised while tracing (a shape that does not
fit the model, data-dependent control flow) exit with status 1. Both print one line to stderr.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import typing
import warnings
from dataclasses import dataclass

from . import nn, trace, zeros
from .compiled_step import trace_function
from .step_state import StepState
from .frontend.tracer import TraceError, TraceWarning
from .ir.dtypes import dtype_from_name


class UsageError(Exception):
    """A TARGET or option that the command cannot use (exit status 2)."""


def add_target_arguments(p) -> None:
    """TARGET, --input and --eval/--train on an argparse (sub)parser."""
    p.add_argument("target", metavar="TARGET",
                   help="path/to/file.py:NAME or package.module:NAME, where NAME is a Module "
                        "class (constructed with no arguments), a function returning a Module "
                        "(called with no arguments), a Module instance, or a function of tensors")
    p.add_argument("--input", "-i", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="shape of one example input, dims joined by 'x' (32x3x32x32; 'scalar' "
                        "for a 0-d tensor), optionally with a dtype (8x16:int64); float32 by "
                        "default. Repeat it for each tensor argument, in order")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--eval", dest="training", action="store_false",
                      help="trace the model in eval mode (the default)")
    mode.add_argument("--train", dest="training", action="store_true",
                      help="trace the model in training mode (dropout is recorded, batch norm "
                           "uses batch statistics)")
    p.set_defaults(training=False)


def prepare_target(args):
    """(name, callee, example inputs) for the parsed TARGET/--input/--train arguments."""
    inputs = [parse_input(spec) for spec in args.input]
    name, obj = load_target(args.target)
    return name, build(name, obj, args.training), inputs


def traced_target(command: str, name: str, callee, inputs):
    """(traced graph, step) of a prepared target; trace warnings are printed to stderr.

    ``step`` is None, or the ``BackwardRequest`` (None when it has no backward) of a function
    that changes state (a training step), whose graph is traced as ``graphnn.compile`` traces
    it: with the state it reaches bound, gradients as inputs, and the state it writes returned.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        _check_inputs(name, callee, inputs)
        step = _traced_step(callee, inputs)
        result = step if step is not None else (trace(callee, *inputs), None)
    for w in caught:
        print(f"graphnn {command}: warning: {w.message}", file=sys.stderr)
    return result


def fail(command: str, message, status: int, callee=None) -> int:
    """Print ``graphnn COMMAND: error: ...`` (and a hint for functions of tensors); return
    ``status``."""
    print(f"graphnn {command}: error: {message}", file=sys.stderr)
    needed = getattr(callee, "needed_arguments", None)
    if needed:
        print(f"graphnn {command}: note: {callee.__name__} was traced as a function of tensors "
              f"(it takes {', '.join(needed)}); a factory must take no arguments",
              file=sys.stderr)
    return status


def parse_input(spec: str):
    """``32x3x32x32`` or ``8x16:int64`` (or ``scalar``) as a zero tensor of that shape."""
    m = re.fullmatch(r"(scalar|\d+(?:x\d+)*)(?::(\w+))?", spec.strip())
    if m is None:
        raise UsageError(f"--input {spec!r} is not a shape such as 32x3x32x32 or 8x16:int64")
    shape = () if m.group(1) == "scalar" else tuple(int(d) for d in m.group(1).split("x"))
    try:
        dtype = dtype_from_name(m.group(2) or "float32")
    except TypeError:
        raise UsageError(f"--input {spec!r}: unknown dtype {m.group(2)!r} (use float32, "
                         f"float64, float16, int64, int32, bool...)") from None
    return zeros(shape, dtype=dtype)


def load_target(target: str):
    """(NAME, the object it names) for ``file.py:NAME`` or ``package.module:NAME``."""
    location, _, name = target.rpartition(":")
    if not location or not name:
        raise UsageError(f"TARGET {target!r} must be path/to/file.py:NAME or "
                         f"package.module:NAME")
    if location.endswith(".py") or "/" in location or os.sep in location:
        module = _import_file(location)
    else:
        module = _import_module(location)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{location} has no {name!r}; it defines: {_offer(module)}")
        obj = getattr(obj, part)
    return name, obj


def _import_file(location: str):
    path = os.path.abspath(location)
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {location}")
    module_name = "_graphnn_target_" + re.sub(r"\W", "_", os.path.splitext(
        os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(path))  # the file's own imports of its neighbours
    spec.loader.exec_module(module)
    return module


def _import_module(location: str):
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(location)
    except ModuleNotFoundError as e:
        if e.name and location.startswith(e.name):
            raise UsageError(f"no module named {location!r} (and no file of that name)") \
                from None
        raise


def _offer(module) -> str:
    names = [n for n, v in vars(module).items() if not n.startswith("_") and
             getattr(v, "__module__", None) == module.__name__ and callable(v)]
    names += [n for n, v in vars(module).items() if isinstance(v, nn.Module)]
    return ", ".join(sorted(names)) or "nothing usable (no Module classes or functions)"


def _required(fn) -> list:
    """Names of the parameters of ``fn`` without defaults (not *args/**kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and
            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _returns_module(fn) -> bool:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # unresolvable annotations: read them as written
        hint = getattr(fn, "__annotations__", {}).get("return")
        return isinstance(hint, str) and "Module" in hint
    return inspect.isclass(hint) and issubclass(hint, nn.Module)


def build(name: str, obj, training: bool):
    """The Module to trace (in the requested mode), or the function of tensors."""
    if inspect.isclass(obj):
        if not issubclass(obj, nn.Module):
            raise UsageError(f"{name} is a class but not a graphnn.nn.Module")
        needed = _required(obj)
        if needed:
            raise UsageError(f"{name} needs constructor arguments ({', '.join(needed)}); "
                             f"dump-ir constructs a Module class with no arguments: give them "
                             f"defaults, or name a function that builds the model")
        obj = obj()
    elif not isinstance(obj, nn.Module):
        if not callable(obj):
            raise UsageError(f"{name} is a {type(obj).__name__}, not a Module, a Module class "
                             f"or a function")
        needed = _required(obj)
        if needed and _returns_module(obj):
            raise UsageError(f"{name} is a factory that needs arguments ({', '.join(needed)}); "
                             f"dump-ir calls a factory with no arguments: give them defaults")
        if needed:
            return _function_of_tensors(name, obj, needed)
        obj = obj()
        if not isinstance(obj, nn.Module):
            raise UsageError(f"{name}() returned a {type(obj).__name__}, not a Module: a "
                             f"factory takes no arguments and returns a graphnn.nn.Module, a "
                             f"function of tensors takes its tensors as arguments")
    return obj.train(training)


def _function_of_tensors(name, fn, needed):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, nn.Module):
            raise UsageError(f"{name} returned a Module when called with the --input tensors: "
                             f"it is a factory that needs arguments ({', '.join(needed)}); "
                             f"dump-ir calls a factory with no arguments: give them defaults")
        return out
    call.needed_arguments = needed
    return call


def _traced_step(callee, inputs):
    """(graph, StepRequest) when ``callee`` is a function that changes state, else None."""
    if isinstance(callee, nn.Module):
        return None
    try:
        traced, changes = trace_function(callee, tuple(inputs), {}, StepState(callee))
    except TraceError:  # not traceable as a step (e.g. it reads unreachable tensors)
        return None
    _, updates, rebound = traced.graph.outputs
    if traced.backward is None and not (updates or rebound or changes.cleared):
        return None
    return traced.graph, StepRequest(traced.backward)


@dataclass
class StepRequest:
    backward: object  # the traced loss.backward() (a BackwardRequest), or None


def _check_inputs(name: str, callee, inputs) -> None:
    forward = callee.forward if isinstance(callee, nn.Module) else callee
    try:
        inspect.signature(forward).bind(*inputs)
    except TypeError as e:
        where = getattr(forward, "__qualname__", name)
        raise UsageError(f"{name}: {len(inputs)} --input given, which does not fit "
                         f"{where}{inspect.signature(forward)} ({e}); give one --input per "
                         f"tensor argument") from None
    except ValueError:  # no signature to check against
        pass
