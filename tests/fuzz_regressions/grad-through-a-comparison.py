"""graphnn fuzz reproducer: mismatch in graphnn:numpy:native:grad (mode grad).

grad:x2: a gradient vs no gradient

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": false, "type": {"dtype": "float32", "shape": [3]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": true, "type": {"dtype": "float32", "shape": [1]}}], "kind": "module", "layers": [], "notes": {}, "outputs": ["v5"], "random": false, "seed": 677052670, "statements": [{"attrs": {"op": "lt"}, "family": "compare", "outs": [["v0", {"dtype": "bool", "shape": [3]}]], "reads": ["x0", "x2"]}, {"attrs": {"form": "masked_fill_"}, "family": "inplace", "outs": [["v3", {"dtype": "float32", "shape": [3]}]], "reads": ["x0", "v0"]}, {"attrs": {"dims": [0], "keepdim": false, "op": "norm"}, "family": "reduce", "outs": [["v5", {"dtype": "float32", "shape": []}]], "reads": ["v3"]}]}'
FAILURE = '{"kind": "mismatch", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "grad:x2: a gradient vs no gradient"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
        def forward(self, x0, x2):
            v0 = x0 < x2
            v3 = x0.clone()
            v3.masked_fill_(v0, 0.25)
            v5 = v3.norm(dim=0, keepdim=False)
            return (v5,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
