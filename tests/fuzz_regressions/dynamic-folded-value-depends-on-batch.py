"""graphnn fuzz reproducer: mismatch in graphnn:numpy+dynamic:native:infer (mode infer).

b3:out:v5: differs at 1 positions, first (np.int64(3),): True vs False
(a constant folded at the probe batch sizes, all true from B = 4, reused at B = 3)

Run it: python {this file} (exit status 1 while it fails); or
graphnn fuzz --replay {this file}.
"""
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": true, "inputs": [{"high": 0, "low": 0, "name": "x1", "requires_grad": false, "type": {"dtype": "float32", "shape": ["B", 4]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v5"], "random": false, "seed": 1771187799, "statements": [{"attrs": {"diagonal": 0, "op": "tril", "spelling": "mask"}, "family": "triangle", "outs": [["v4", {"dtype": "bool", "shape": ["B", 4]}]], "reads": ["x1"]}, {"attrs": {"dims": [0], "keepdim": false, "op": "any"}, "family": "reduce", "outs": [["v5", {"dtype": "bool", "shape": [4]}]], "reads": ["v4"]}]}'
FAILURE = '{"kind": "mismatch", "mode": "infer", "run": "graphnn:numpy+dynamic:native:infer", "detail": "b3:out:v5: differs at 1 positions, first (np.int64(3),): True vs False"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x1):
        B = x1.shape[0]
        v4 = T.tril(T.ones(x1.shape[-2], x1.shape[-1], dtype=T.bool), diagonal=0)
        v5 = v4.any(dim=0, keepdim=False)
        return (v5,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
