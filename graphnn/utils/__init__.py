"""``graphnn.utils``: PyTorch's ``torch.utils`` names that training programs use."""
from . import data  # noqa: F401
