"""graphnn: a deep-learning graph compiler with a PyTorch-style API.

Eager tensors and autograd live in ``graphnn.frontend``; every op they run is defined once in the
registry of ``graphnn.ir``.
"""
from . import ir  # noqa: F401  (registers every op)
from .frontend import functions as _functions
from .frontend import ops_sorting as _ops_sorting
from .frontend.einsum import einsum
from .frontend.creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full,
                                full_like, linspace, ones, ones_like, rand, rand_like, randint,
                                randint_like, randn, randn_like, tensor, zeros, zeros_like)
from .frontend.functions import add, bmm, mm, mul, pow, sub
from .frontend.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                 is_inference_mode_enabled, no_grad, set_grad_enabled)
from .frontend.matmul_precision import get_float32_matmul_precision, set_float32_matmul_precision
from .frontend.random import (Generator, default_generator, get_rng_state, initial_seed,
                              manual_seed, seed, set_rng_state)
from .frontend.type_info import finfo, iinfo
from .frontend.device import device
from .frontend.dlpack import from_dlpack
from .frontend.tensor import Size, Tensor
from .frontend.nonzero import nonzero
from .frontend.tensor_math import where
from .frontend.sampling import multinomial, randperm
from .frontend.scatter import scatter, scatter_reduce
from .frontend.tensor_shape import cat, concat, concatenate, pad, stack
from .frontend.tracer import trace
from .ir.dtypes import (DType as dtype, bfloat16, bool_ as bool, float16, float32, float64, int8,
                        int16, int32, int64, uint8)
from .ir.errors import GraphnnError

float = float32
double = float64
half = float16
long = int64
int = int32
short = int16

globals().update({k: v for k, v in _functions.FUNCTIONS.items() if k not in globals()})
globals().update(_ops_sorting.FUNCTIONS)

__version__ = "0.1.0"


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(t) -> int:
    return t.numel()


from . import amp, autograd, nn, optim, utils  # noqa: E402
from . import distributed  # noqa: E402  (imports torch only when used)
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
from .serialization import load, save  # noqa: E402
from .tools.explain import explain  # noqa: E402
from .compiler import compile  # noqa: E402,A001  (graphnn.compile, as torch.compile)
from .compiler import device_runner as _device_runner  # noqa: E402
from . import cuda  # noqa: E402
from .runtime import tuning_store as _tuning_store  # noqa: E402

_device_runner.register()  # eager tensors on cuda run through the Triton backend
_tuning_store.register()  # the Triton autotuner remembers its choices on disk
