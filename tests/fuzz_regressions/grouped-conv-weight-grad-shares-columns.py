"""graphnn fuzz reproducer: crash in graphnn:numpy:native:grad (mode grad).

ValueError: cannot reshape array of size 16 into shape (2,1,16) (a grouped 1x1 convolution's
weight gradient took the forward's columns, groups * K rows, for K rows and a ones row)

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": [1, 2, 7, 7]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": false, "type": {"dtype": "float32", "shape": [1, 4, 4, 4]}}], "kind": "module", "layers": [{"attrs": {"bias": false, "dilation": 2, "groups": 2, "in": 2, "kernel": [1, 1], "out": 4, "padding": 0, "padding_mode": "zeros", "stride": 2}, "family": "conv_layer", "name": "m0"}], "notes": {}, "outputs": ["v4"], "random": false, "seed": 1280412912, "statements": [{"attrs": {"act": "silu", "anchor": "conv", "residual": true}, "family": "epilogue", "outs": [["v0", {"dtype": "float32", "shape": [1, 4, 4, 4]}]], "reads": ["self.m0", "x1", "x2"]}, {"attrs": {"dim": 4, "form": "stack"}, "family": "join", "outs": [["v4", {"dtype": "float32", "shape": [1, 4, 4, 4, 2]}]], "reads": ["x2", "v0"]}]}'
FAILURE = '{"kind": "crash", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "ValueError: cannot reshape array of size 16 into shape (2,1,16) at /work/main/graphnn/codegen/numpy/conv.py:253"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.m0 = T.nn.Conv2d(2, 4, (1, 1), stride=2, padding=0, dilation=2, groups=2, bias=False, padding_mode='zeros')
        def forward(self, x1, x2):
            v0 = F.silu(self.m0(x1) + x2)
            v4 = T.stack([x2, v0], dim=4)
            return (v4,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
