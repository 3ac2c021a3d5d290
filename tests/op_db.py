"""The op table: one ``OpInfo`` per registry op (Thunder's OpInfo, JAX's check_grads).

Each entry gives a sample generator (NumPy arrays + attributes covering broadcasting,
non-contiguous views, empty and size-1 dims, negative axes and the dtypes the op accepts), a
PyTorch reference computing the same thing, the indices of the differentiable inputs, the error
cases the op must reject, and (random ops only) a property check instead of a reference. The
entries live in one file per op family (``op_db_*.py``, as ``graphnn/ir/ops/`` is split); the
generic tests in ``test_op_forward.py`` / ``test_op_gradients.py`` / ``test_op_registry.py``
are parametrized over ``OP_DB``, and ``test_op_registry.py`` fails naming any registry op that
has no entry here.
"""
from __future__ import annotations

from op_db_attention import ATTENTION
from op_db_collective import COLLECTIVE
from op_db_elementwise import ELEMENTWISE
from op_db_epilogue import EPILOGUE
from op_db_network import CREATION, NETWORK
from op_db_normalization import NORMALIZATION
from op_db_reductions import REDUCTIONS
from op_db_scatter import SCATTER
from op_db_shape import INDEXING, SHAPE
from op_db_sorting import SORTING
from op_info import F16, F32, F64, Err, Maker, OpInfo, Sample, tdtype

__all__ = ["OP_DB", "F16", "F32", "F64", "Err", "Maker", "OpInfo", "Sample", "tdtype"]


def _table(families) -> dict:
    table = {}
    for info in (info for family in families for info in family):
        assert info.name not in table, f"op {info.name!r} has two entries in the op table"
        table[info.name] = info
    return table


OP_DB = _table([ELEMENTWISE, REDUCTIONS, SHAPE, INDEXING, NETWORK, CREATION, EPILOGUE,
                ATTENTION, SORTING, SCATTER, COLLECTIVE, NORMALIZATION])
