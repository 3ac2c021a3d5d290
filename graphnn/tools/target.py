"""What ``graphnn dump-ir`` and ``graphnn explain`` share: naming a model on the command line
(TARGET and --input), building it, tracing it, and turning errors into exit statuses.

TARGET names a Module class (constructed with no arguments), a function returning a Module
(called with no arguments), a Module instance, or a function of tensors, in a file
(``path/to/file.py:NAME``) or an importable module (``package.module:NAME``). Usage errors (a bad
TARGET or --input, a missing file or name, a factory needing arguments, inputs that do not fit
the forward's arguments, and any exception raised while importing the target or building the
Module, SystemExit included) exit with status 2; errors raised while tracing (a shape that does
not fit the model, data-dependent control flow) exit with status 1. Both print one line to
stderr. A KeyboardInterrupt is never caught.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
import typing
import warnings
from dataclasses import dataclass

from .. import GraphnnError, nn, trace
from .inputs import ALLOCATION_LIMIT, parse_input
from .usage import UsageError, fail
from ..compiler.step import trace_function
from ..compiler.step_state import StepState
from ..frontend.tracer import TraceError, TraceWarning

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def add_target_arguments(p) -> None:
    """TARGET, --input and --eval/--train on an argparse (sub)parser."""
    p.add_argument("target", metavar="TARGET",
                   help="path/to/file.py:NAME or package.module:NAME, where NAME is a Module "
                        "class (constructed with no arguments), a function returning a Module "
                        "(called with no arguments), a Module instance, or a function of tensors")
    p.add_argument("--input", "-i", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="shape of one example input, dims joined by 'x' (32x3x32x32; 'scalar' "
                        "for a 0-d tensor), optionally with a dtype (8x16:int64); float32 by "
                        "default. Repeat it for each tensor argument, in order. Tracing never "
                        "allocates the inputs, so any shape a NumPy array can have works (at "
                        "most 64 dims and 2**63-1 bytes); --dynamic runs the target and "
                        f"allocates them, {ALLOCATION_LIMIT >> 30} GiB at most in all")
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


def pass_names(text):
    """``--passes``/``--disable``'s ``P1,P2`` as a list of names (None when not given)."""
    return [n.strip() for n in text.split(",") if n.strip()] if text else None


def run_command(command: str, args, produce) -> int:
    """Prepare the target named by ``args`` and write ``produce(name, callee, inputs)``'s text
    to ``args.output`` (when the command has it and it is given) or stdout. Returns the exit
    status: 0; 2 for a UsageError; 1 for an error while tracing or compiling (a GraphnnError,
    or any exception of the user's code, SystemExit included, shown with its traceback)."""
    callee = None
    try:
        name, callee, inputs = prepare_target(args)
        text = produce(name, callee, inputs)
        output = getattr(args, "output", None)
        if output:
            try:
                with open(output, "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as e:
                raise UsageError(f"cannot write {output}: {e.strerror}") from None
        else:
            sys.stdout.write(text)
        return 0
    except UsageError as e:
        return fail(command, e, 2)
    except GraphnnError as e:
        return fail(command, e, 1, callee)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the user's code failed while tracing: show where
        traceback.print_exc()
        return fail(command, f"{type(e).__name__}: {e}", 1, callee)


@contextlib.contextmanager
def _user_code(doing: str):
    """Run the user's code that loads or builds the target: any exception it raises (any
    BaseException but KeyboardInterrupt) becomes a one-line UsageError, ``DOING raised
    ERROR at FILE:LINE``. UsageErrors raised inside go through unchanged."""
    try:
        yield
    except (KeyboardInterrupt, UsageError):
        raise
    except BaseException as e:
        raise UsageError(f"{doing} raised {_one_line(e)}{_raised_at(e)}") from None


def _one_line(error: BaseException) -> str:
    """``repr(error)`` (``SystemExit(0)``, ``ValueError('...')``) with line breaks escaped."""
    try:
        text = repr(error)
    except Exception:  # a hostile __repr__
        text = type(error).__name__
    return "\\n".join(text.splitlines())


def _raised_at(error: BaseException) -> str:
    """`` at FILE:LINE`` of the innermost frame of ``error``'s traceback outside graphnn and
    importlib (where the user's code raised it), or ``""``."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(("<", _PACKAGE_DIR))]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def load_target(target: str):
    """(NAME, the object it names) for ``file.py:NAME`` or ``package.module:NAME``. Anything
    the import raises is a UsageError, and leaves sys.modules and sys.path as they were."""
    location, _, name = target.rpartition(":")
    if not location or not name:
        raise UsageError(f"TARGET {target!r} must be path/to/file.py:NAME or "
                         f"package.module:NAME")
    with _user_code(f"importing {location}"):
        if location.endswith(".py") or "/" in location or os.sep in location:
            module = _import_file(location)
        else:
            module = _import_module(location)
    obj = module
    with _user_code(f"getting {name} from {location}"):
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
    with _searching(os.path.dirname(path)):  # the file's own imports of its neighbours
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
    return module


def _import_module(location: str):
    with _searching(os.getcwd()):
        try:
            return importlib.import_module(location)
        except ModuleNotFoundError as e:
            if e.name and location.startswith(e.name):
                raise UsageError(f"no module named {location!r} (and no file of that name)") \
                    from None
            raise


@contextlib.contextmanager
def _searching(folder: str):
    """Put ``folder`` first on sys.path (where it stays, for the target's later imports)
    unless it is first already; take it out again if the block raises."""
    added = sys.path[:1] != [folder]
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    except BaseException:
        if added:
            sys.path.remove(folder)
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
    """The Module to trace (in the requested mode), or the function of tensors. Anything
    the constructor or factory raises is a UsageError."""
    if inspect.isclass(obj):
        if not issubclass(obj, nn.Module):
            raise UsageError(f"{name} is a class but not a graphnn.nn.Module")
        needed = _required(obj)
        if needed:
            raise UsageError(f"{name} needs constructor arguments ({', '.join(needed)}); "
                             f"dump-ir constructs a Module class with no arguments: give them "
                             f"defaults, or name a function that builds the model")
        with _user_code(f"constructing {name}()"):
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
        with _user_code(f"calling {name}()"):
            obj = obj()
        if not isinstance(obj, nn.Module):
            raise UsageError(f"{name}() returned a {type(obj).__name__}, not a Module: a "
                             f"factory takes no arguments and returns a graphnn.nn.Module, a "
                             f"function of tensors takes its tensors as arguments")
    with _user_code(f"{name}.train({training})"):
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
        traced, changes, _ = trace_function(callee, tuple(inputs), {}, StepState(callee))
    except TraceError:  # not traceable as a step (e.g. it reads unreachable tensors)
        return None
    graph = traced.graph
    if traced.backward is None and not (graph.output("update") or graph.output("rebound")
                                        or changes.cleared):
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
