"""Op-table entries for the fused attention op (graphnn/ir/ops/attention.py)."""
ATTENTION = []
