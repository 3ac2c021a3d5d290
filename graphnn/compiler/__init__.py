"""graphnn.compiler: ``graphnn.compile`` and ``Module.compile``, from a traced call to a running
kernel. Not named ``compile``: importing a submodule would replace the ``graphnn.compile``
function on the package."""
from .function import CompiledFunction, CompileWarning, compile, compile_module

__all__ = ["CompileWarning", "CompiledFunction", "compile", "compile_module"]
