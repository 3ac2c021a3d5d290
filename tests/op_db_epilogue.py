"""Op-table entries for the fused conv/matmul epilogue ops (graphnn/ir/ops/epilogue.py)."""
EPILOGUE = []
