"""graphnn fuzz reproducer: crash in graphnn:eager:native:infer (mode infer).

ShapeError: Program (root module): view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead. at /work/main/graphnn/frontend/tensor_shape.py:68

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": [2, 1, 3, 4]}}], "kind": "module", "layers": [{"attrs": {"bias": true, "dilation": 1, "groups": 1, "in": 1, "kernel": [2, 3], "out": 2, "padding": 0, "stride": 1}, "family": "conv_layer", "name": "m0"}], "notes": {}, "outputs": ["v1"], "random": false, "seed": 1938163333, "statements": [{"attrs": {}, "family": "conv", "outs": [["v0", {"dtype": "float32", "shape": [2, 2, 2, 2]}]], "reads": ["self.m0", "x1"]}, {"attrs": {"number": "1.77", "op": "ne"}, "family": "compare", "outs": [["v1", {"dtype": "bool", "shape": [2, 2, 2, 2]}]], "reads": ["v0"]}, {"attrs": {"form": "view", "shape": [16]}, "family": "reshape", "outs": [["v2", {"dtype": "float32", "shape": [16]}]], "reads": ["v0"]}]}'
FAILURE = '{"kind": "crash", "mode": "infer", "run": "graphnn:eager:native:infer", "detail": "ShapeError: Program (root module): view size is not compatible with input tensor\'s size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead. at /work/main/graphnn/frontend/tensor_shape.py:68"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.m0 = T.nn.Conv2d(1, 2, (2, 3), stride=1, padding=0, dilation=1, groups=1, bias=True)
        def forward(self, x1):
            v0 = self.m0(x1)
            v1 = v0 != 1.77
            v2 = v0.view(16)
            return (v1,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
