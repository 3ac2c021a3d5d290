"""graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:grad (mode grad).

graphnn: compiling Program failed (RuntimeError: the forward returns one differentiable value twice); running eagerly

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": false, "type": {"dtype": "float32", "shape": [1, 6, 6]}}, {"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": ["B"]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": true, "type": {"dtype": "float32", "shape": [2, 6]}}], "kind": "module", "layers": [], "notes": {}, "outputs": ["x1"], "random": false, "seed": 1967836688, "statements": [{"attrs": {"form": "linear"}, "family": "matmul", "outs": [["v1", {"dtype": "float32", "shape": [1, 6, 2]}]], "reads": ["x0", "x2"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "graphnn: compiling Program failed (RuntimeError: the forward returns one differentiable value twice); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
        def forward(self, x0, x1, x2):
            B = x1.shape[0]
            v1 = F.linear(x0, x2)
            return (x1,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
