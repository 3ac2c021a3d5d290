"""graphnn fuzz reproducer: crash in graphnn:numpy:native:grad (mode grad).

GuardError: compiled program: input 3 expected a tensor of rank 0 (shape []), got rank 1 (shape [1]) at /tmp/old35/graphnn/runtime/guards.py:152

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x0", "requires_grad": true, "type": {"dtype": "float32", "shape": ["B", 6, 6]}}, {"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": [5, 4]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v1", "v5"], "random": false, "seed": 971477686, "statements": [{"attrs": {"dim": 2, "form": "narrow", "start": 1, "step": 1, "stop": 6}, "family": "slice", "outs": [["v0", {"dtype": "float32", "shape": ["B", 6, 5]}]], "reads": ["x0"]}, {"attrs": {"dims": [2, 1], "form": "transpose"}, "family": "permute", "outs": [["v1", {"dtype": "float32", "shape": ["B", 5, 6]}]], "reads": ["v0"]}, {"attrs": {"dim": 2, "form": "stack"}, "family": "join", "outs": [["v3", {"dtype": "float32", "shape": ["B", 6, 2, 5]}]], "reads": ["v0", "v0"]}, {"attrs": {"form": "matmul"}, "family": "matmul", "outs": [["v4", {"dtype": "float32", "shape": ["B", 6, 2, 4]}]], "reads": ["v3", "x1"]}, {"attrs": {"dims": null, "keepdim": false, "op": "sum"}, "family": "reduce", "outs": [["v5", {"dtype": "float32", "shape": []}]], "reads": ["v4"]}]}'
FAILURE = '{"kind": "crash", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "GuardError: compiled program: input 3 expected a tensor of rank 0 (shape []), got rank 1 (shape [1]) at /tmp/old35/graphnn/runtime/guards.py:152"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x0, x1):
        B = x0.shape[0]
        v0 = x0.narrow(2, 1, 5)
        v1 = v0.transpose(2, 1)
        v3 = T.stack([v0, v0], dim=2)
        v4 = T.matmul(v3, x1)
        v5 = v4.sum()
        return (v1, v5,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
