# graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:infer (mode infer):
# "graphnn: compiling Program failed (TraceError: Embedding at 'm1': graphnn/nn/functional/sparse.py:55 (reached from <graphnn fuzz program 1282850133>:14): indexing with a 0-d tensor (use a 1-d index tensor) reads a tensor value, which is unknown while tracing (the tensor is graph value %7: i64[]); control flow that depends on tensor values cannot be traced. Compute both branches and select with graphnn.where, or make the decision outside the traced forward); running eagerly"
# Run it: python {this file} (exit status 1 while it fails); or
# graphnn fuzz --replay {this file}.
PROGRAM = '{"batch": 3, "dtype": "float64", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": false, "type": {"dtype": "float64", "shape": ["B"]}}, {"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "bool", "shape": ["B"]}}], "kind": "module", "layers": [{"attrs": {"dim": 1, "kind": "Embedding", "n": 3}, "family": "layer", "name": "m1"}], "notes": {}, "outputs": ["v2"], "random": false, "seed": 1282850133, "statements": [{"attrs": {"dims": [-1], "keepdim": false, "op": "argmax"}, "family": "reduce", "outs": [["v0", {"dtype": "int64", "shape": []}]], "reads": ["x0"]}, {"attrs": {"dims": [0], "keepdim": false, "op": "any"}, "family": "reduce", "outs": [["v2", {"dtype": "bool", "shape": []}]], "reads": ["x1"]}, {"attrs": {"modulo": 3}, "family": "layer", "outs": [["v5", {"dtype": "float64", "shape": [1]}]], "reads": ["self.m1", "v0"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "infer", "run": "graphnn:numpy:native:infer", "detail": "graphnn: compiling Program failed (TraceError: Embedding at \'m1\': graphnn/nn/functional/sparse.py:55 (reached from <graphnn fuzz program 1282850133>:14): indexing with a 0-d tensor (use a 1-d index tensor) reads a tensor value, which is unknown while tracing (the tensor is graph value %7: i64[]); control flow that depends on tensor values cannot be traced. Compute both branches and select with graphnn.where, or make the decision outside the traced forward); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.m1 = T.nn.Embedding(3, 1)
        def forward(self, x0, x1):
            B = x0.shape[0]
            v0 = x0.argmax(dim=-1, keepdim=False)
            v2 = x1.any(dim=0, keepdim=False)
            v5 = self.m1(v0 % 3)
            return (v2,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
