"""graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:grad (mode grad).

graphnn: compiling Program failed (KeyError: 'k16'); running eagerly

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": false, "type": {"dtype": "float32", "shape": [3]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": true, "type": {"dtype": "float32", "shape": [1]}}], "kind": "module", "layers": [], "notes": {}, "outputs": ["x0"], "random": false, "seed": 677052670, "statements": [{"attrs": {"op": "lt"}, "family": "compare", "outs": [["v0", {"dtype": "bool", "shape": [3]}]], "reads": ["x0", "x2"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "graphnn: compiling Program failed (KeyError: \'k16\'); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
        def forward(self, x0, x2):
            v0 = x0 < x2
            return (x0,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
