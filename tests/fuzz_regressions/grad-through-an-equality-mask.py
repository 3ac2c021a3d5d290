"""graphnn fuzz reproducer: mismatch in graphnn:numpy:native:grad (mode grad).

grad:x0: a gradient vs no gradient

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": true, "type": {"dtype": "float32", "shape": ["B", 1]}}, {"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": ["B", 1]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": false, "type": {"dtype": "float32", "shape": [1, 1, "B"]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v2"], "random": false, "seed": 973206040, "statements": [{"attrs": {"op": "eq"}, "family": "compare", "outs": [["v0", {"dtype": "bool", "shape": ["B", 1]}]], "reads": ["x0", "x1"]}, {"attrs": {"form": "reshape", "shape": [1, 1, "B"]}, "family": "reshape", "outs": [["v1", {"dtype": "bool", "shape": [1, 1, "B"]}]], "reads": ["v0"]}, {"attrs": {"form": "masked_fill", "number": 0.0}, "family": "select", "outs": [["v2", {"dtype": "float32", "shape": [1, 1, "B"]}]], "reads": ["v1", "x2"]}]}'
FAILURE = '{"kind": "mismatch", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "grad:x0: a gradient vs no gradient"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x0, x1, x2):
        B = x0.shape[0]
        v0 = x0 == x1
        v1 = v0.reshape(1, 1, B)
        v2 = x2.masked_fill(v1, 0.0)
        return (v2,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
