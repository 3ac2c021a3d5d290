# graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:step:sgd (mode step:sgd):
# 'graphnn: compiling train_step failed (VerifyError: graph invalid at node `%82: f16[2,2] = mul(%81, %k6)  at "/root/.pyenv/versions/3.11.7/bin/graphnn:8"`: the op\'s shape rule rejects its inputs: mul: shapes [2, 2], [5] are not broadcastable); running eagerly'
# Run it: python {this file} (exit status 1 while it fails); or
# graphnn fuzz --replay {this file}.
PROGRAM = '{"batch": 3, "dtype": "float16", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float16", "shape": ["B", 2, 3, 3]}}, {"high": 0, "low": 0, "name": "x2", "requires_grad": false, "type": {"dtype": "float16", "shape": [2, 1, 2, 1]}}, {"high": 0, "low": 0, "name": "x3", "requires_grad": false, "type": {"dtype": "float16", "shape": [2]}}], "kind": "module", "layers": [{"attrs": {"kind": "BatchNorm2d", "n": 2}, "family": "layer", "name": "m2"}, {"attrs": {"bias": true, "dilation": 2, "groups": 1, "in": 2, "kernel": [1, 1], "out": 2, "padding": 1, "padding_mode": "replicate", "stride": 2}, "family": "conv_layer", "name": "m3"}], "notes": {}, "outputs": ["v7"], "random": false, "seed": 1381656279, "statements": [{"attrs": {"dilation": 2, "groups": 2, "padding": 1, "stride": 1}, "family": "conv", "outs": [["v1", {"dtype": "float16", "shape": ["B", 2, 3, 5]}]], "reads": ["x1", "x2", "x3"]}, {"attrs": {}, "family": "layer", "outs": [["v5", {"dtype": "float16", "shape": ["B", 2, 3, 5]}]], "reads": ["self.m2", "v1"]}, {"attrs": {}, "family": "conv", "outs": [["v6", {"dtype": "float16", "shape": ["B", 2, 3, 4]}]], "reads": ["self.m3", "v5"]}, {"attrs": {"op": "float64"}, "family": "cast", "outs": [["v7", {"dtype": "float64", "shape": ["B", 2, 3, 4]}]], "reads": ["v6"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "step:sgd", "run": "graphnn:numpy:native:step:sgd", "detail": "graphnn: compiling train_step failed (VerifyError: graph invalid at node `%82: f16[2,2] = mul(%81, %k6)  at \\"/root/.pyenv/versions/3.11.7/bin/graphnn:8\\"`: the op\'s shape rule rejects its inputs: mul: shapes [2, 2], [5] are not broadcastable); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.m2 = T.nn.BatchNorm2d(2)
            self.m3 = T.nn.Conv2d(2, 2, (1, 1), stride=2, padding=1, dilation=2, groups=1, bias=True, padding_mode='replicate')
        def forward(self, x1, x2, x3):
            B = x1.shape[0]
            v1 = F.conv2d(x1, x2, x3, stride=1, padding=1, dilation=2, groups=2)
            v5 = self.m2(v1)
            v6 = self.m3(v5)
            v7 = v6.double()
            return (v7,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
