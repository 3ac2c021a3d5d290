"""graphnn.nn.functional: the functional form of every layer, with PyTorch's signatures.

Each family lives in its own file; this package re-exports their ``__all__``.
"""
from .activation import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .batchnorm import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .normalization import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .activation_extra import *  # noqa: F401,F403
from .losses_extra import *  # noqa: F401,F403
from .encoding import *  # noqa: F401,F403
from .padding import *  # noqa: F401,F403
from .interpolation import *  # noqa: F401,F403
from .conv1d import *  # noqa: F401,F403
from .conv_transpose import *  # noqa: F401,F403
from .pool1d import *  # noqa: F401,F403
from .group_norm import *  # noqa: F401,F403
