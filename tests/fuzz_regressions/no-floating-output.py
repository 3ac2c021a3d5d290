"""graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:grad (mode grad).

graphnn: compiling Program failed (RuntimeError: the forward has no floating output to differentiate); running eagerly

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float64", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": true, "type": {"dtype": "float64", "shape": ["B", 1, 2]}}], "kind": "module", "layers": [], "notes": {}, "outputs": ["v1"], "random": false, "seed": 150803808, "statements": [{"attrs": {"op": "lt"}, "family": "compare", "outs": [["v1", {"dtype": "bool", "shape": ["B", 1, 2]}]], "reads": ["x1", "x1"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "graphnn: compiling Program failed (RuntimeError: the forward has no floating output to differentiate); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
        def forward(self, x1):
            B = x1.shape[0]
            v1 = x1 < x1
            return (v1,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
