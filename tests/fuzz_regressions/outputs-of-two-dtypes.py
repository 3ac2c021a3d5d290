"""graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:grad (mode grad).

graphnn: compiling program failed (RuntimeError: differentiable outputs of different dtypes); running eagerly

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float16", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": true, "type": {"dtype": "float16", "shape": [6, 3]}}, {"high": 6, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "int64", "shape": [4]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v1"], "random": false, "seed": 1586809769, "statements": [{"attrs": {"dim": 0, "form": "index_select"}, "family": "advanced_index", "outs": [["v0", {"dtype": "float16", "shape": [4, 3]}]], "reads": ["x0", "x1"]}, {"attrs": {"dims": [1], "keepdim": true, "op": "argmax"}, "family": "reduce", "outs": [["v1", {"dtype": "int64", "shape": [4, 1]}]], "reads": ["v0"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "graphnn: compiling program failed (RuntimeError: differentiable outputs of different dtypes); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x0, x1):
        v0 = T.index_select(x0, 0, x1)
        v1 = v0.argmax(dim=1, keepdim=True)
        return (v1,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
