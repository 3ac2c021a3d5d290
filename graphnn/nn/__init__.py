"""graphnn.nn: Modules, Parameters, containers, layers, losses, hooks and initialisation."""
from . import functional, init, parallel, utils  # noqa: F401
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .hooks import (register_module_forward_hook, register_module_forward_pre_hook,
                    register_module_full_backward_hook, register_module_full_backward_pre_hook)
from .layers import *  # noqa: F401,F403
from .layers.sync_batchnorm import SyncBatchNorm
from .module import Module
from .parameter import Buffer, Parameter
