"""graphnn fuzz reproducer: crash in graphnn:eager:native:infer (mode infer).

ShapeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead. at /work/main/graphnn/frontend/tensor_shape.py:68

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float16", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": false, "type": {"dtype": "float16", "shape": ["B", 1, 2, 3]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v4"], "random": false, "seed": 1301136197, "statements": [{"attrs": {"form": "expand_clone", "shape": [2, "B", 4, 2, 3]}, "family": "expand", "outs": [["v2", {"dtype": "float16", "shape": [2, "B", 4, 2, 3]}]], "reads": ["x0"]}, {"attrs": {"op": "ge"}, "family": "compare", "outs": [["v3", {"dtype": "bool", "shape": [2, "B", 4, 2, 3]}]], "reads": ["v2", "x0"]}, {"attrs": {"form": "view", "shape": ["B", 48]}, "family": "reshape", "outs": [["v4", {"dtype": "bool", "shape": ["B", 48]}]], "reads": ["v3"]}]}'
FAILURE = '{"kind": "crash", "mode": "infer", "run": "graphnn:eager:native:infer", "detail": "ShapeError: view size is not compatible with input tensor\'s size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead. at /work/main/graphnn/frontend/tensor_shape.py:68"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x0):
        B = x0.shape[0]
        v2 = x0.expand(2, B, 4, 2, 3).clone()
        v3 = v2 >= x0
        v4 = v3.view(B, 48)
        return (v4,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
