# graphnn fuzz reproducer: compile_failure in graphnn:numpy:native:step:sgd (mode step:sgd):
# 'graphnn: compiling train_step failed (VerifyError: graph invalid at node `%53: f32[1] = mul(%52, %k6)  at "/root/.pyenv/versions/3.11.7/bin/graphnn:8"`: result types f32[1] differ from the shape rule\'s f32[8]); running eagerly'
# Run it: python {this file} (exit status 1 while it fails); or
# graphnn fuzz --replay {this file}.
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x2", "requires_grad": false, "type": {"dtype": "float32", "shape": [1, 1, 4, 6]}}], "kind": "module", "layers": [{"attrs": {"kind": "BatchNorm2d", "n": 1}, "family": "layer", "name": "m0"}, {"attrs": {"bias": false, "dilation": 2, "groups": 1, "in": 1, "kernel": [3, 3], "out": 2, "padding": 1, "padding_mode": "replicate", "stride": 1}, "family": "conv_layer", "name": "m1"}], "notes": {}, "outputs": ["v5"], "random": false, "seed": 763149734, "statements": [{"attrs": {}, "family": "layer", "outs": [["v1", {"dtype": "float32", "shape": [1, 1, 4, 6]}]], "reads": ["self.m0", "x2"]}, {"attrs": {}, "family": "conv", "outs": [["v5", {"dtype": "float32", "shape": [1, 2, 2, 4]}]], "reads": ["self.m1", "v1"]}]}'
FAILURE = '{"kind": "compile_failure", "mode": "step:sgd", "run": "graphnn:numpy:native:step:sgd", "detail": "graphnn: compiling train_step failed (VerifyError: graph invalid at node `%53: f32[1] = mul(%52, %k6)  at \\"/root/.pyenv/versions/3.11.7/bin/graphnn:8\\"`: result types f32[1] differ from the shape rule\'s f32[8]); running eagerly"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    class Program(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.m0 = T.nn.BatchNorm2d(1)
            self.m1 = T.nn.Conv2d(1, 2, (3, 3), stride=1, padding=1, dilation=2, groups=1, bias=False, padding_mode='replicate')
        def forward(self, x2):
            v1 = self.m0(x2)
            v5 = self.m1(v1)
            return (v5,)
    return Program()


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
