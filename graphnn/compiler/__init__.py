"""graphnn.compiler: ``graphnn.compile`` and ``Module.compile``, from a traced call to a running
kernel. Not named ``compile``: importing a submodule would replace the ``graphnn.compile``
function on the package."""
from .function import PROBE_SIZES, CompiledFunction, CompileWarning, compile, compile_module

__all__ = ["PROBE_SIZES", "CompileWarning", "CompiledFunction", "compile", "compile_module"]
