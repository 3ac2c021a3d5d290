"""graphnn fuzz reproducer: mismatch in graphnn:numpy:native:grad (mode grad).

grad:x2: a gradient vs no gradient

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": [6, 6, 6, 4]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": true, "type": {"dtype": "float32", "shape": [6, 6, 1, 4]}}, {"high": 0, "low": 0, "name": "x3", "requires_grad": false, "type": {"dtype": "float32", "shape": [6, 6, 6, 4]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v5"], "random": false, "seed": 1559867822, "statements": [{"attrs": {"op": "gt"}, "family": "compare", "outs": [["v2", {"dtype": "bool", "shape": [6, 6, 6, 4]}]], "reads": ["x1", "x2"]}, {"attrs": {"form": "where"}, "family": "select", "outs": [["v5", {"dtype": "float32", "shape": [6, 6, 6, 4]}]], "reads": ["v2", "x1", "x3"]}]}'
FAILURE = '{"kind": "mismatch", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "grad:x2: a gradient vs no gradient"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x1, x2, x3):
        v2 = x1 > x2
        v5 = T.where(v2, x1, x3)
        return (v5,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
