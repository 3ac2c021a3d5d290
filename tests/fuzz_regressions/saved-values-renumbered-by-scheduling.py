# graphnn fuzz reproducer: crash in graphnn:numpy:native:grad (mode grad):
# "KeyError: '27' at /work/main/graphnn/compiled_training.py:86"
# Run it: python {this file} (exit status 1 while it fails); or
# graphnn fuzz --replay {this file}.
PROGRAM = '{"batch": 3, "dtype": "float32", "dynamic": false, "inputs": [{"high": 0, "low": 0, "name": "x2", "requires_grad": false, "type": {"dtype": "float32", "shape": ["B", 2, 8]}}, {"high": 0, "low": 0, "name": "x3", "requires_grad": true, "type": {"dtype": "float32", "shape": ["B", 1, 8]}}, {"high": 0, "low": 0, "name": "x4", "requires_grad": false, "type": {"dtype": "float32", "shape": [2, 1]}}, {"high": 0, "low": 0, "name": "x5", "requires_grad": false, "type": {"dtype": "bool", "shape": [2, 2]}}, {"high": 2, "low": 0, "name": "x6", "requires_grad": false, "type": {"dtype": "int64", "shape": ["B", 3, 5]}}], "kind": "function", "layers": [], "notes": {}, "outputs": ["v6"], "random": false, "seed": 615218267, "statements": [{"attrs": {"explicit_scale": 0.5, "gqa": "enable_gqa", "heads": 2, "kv_heads": 2, "mask": "sdpa_additive", "scale": "before"}, "family": "attention", "outs": [["v0", {"dtype": "float32", "shape": ["B", 2, 8]}]], "reads": ["x2", "x3", "x3", "x4"]}, {"attrs": {"explicit_scale": null, "gqa": "enable_gqa", "heads": 1, "kv_heads": 1, "mask": "sdpa_bool", "scale": "after"}, "family": "attention", "outs": [["v4", {"dtype": "float32", "shape": ["B", 2, 8]}]], "reads": ["x2", "v0", "v0", "x5"]}, {"attrs": {"dim": 1, "form": "gather"}, "family": "advanced_index", "outs": [["v6", {"dtype": "float32", "shape": ["B", 3, 5]}]], "reads": ["v4", "x6"]}]}'
FAILURE = '{"kind": "crash", "mode": "grad", "run": "graphnn:numpy:native:grad", "detail": "KeyError: \'27\' at /work/main/graphnn/compiled_training.py:86"}'
BACKENDS = ('numpy',)

# The program as the fuzzer runs it, with T = graphnn (or torch) and
# F = T.nn.functional; its numbers come from graphnn.fuzz.values.
def build(T, F):
    def program(x2, x3, x4, x5, x6):
        B = x2.shape[0]
        v0_n, v0_t, v0_e = x2.shape
        v0_d = v0_e // 2
        v0_q = x2.reshape(v0_n, v0_t, 2, v0_d).transpose(1, 2)
        v0_k = x3.reshape(v0_n, x3.shape[1], 2, v0_d).transpose(1, 2)
        v0_v = x3.reshape(v0_n, x3.shape[1], 2, v0_d).transpose(1, 2)
        v0_o = F.scaled_dot_product_attention(v0_q, v0_k, v0_v, attn_mask=x4, scale=0.5)
        v0 = v0_o.transpose(1, 2).reshape(v0_n, v0_t, v0_e)
        v4_n, v4_t, v4_e = x2.shape
        v4_d = v4_e // 1
        v4_q = x2.reshape(v4_n, v4_t, 1, v4_d).transpose(1, 2)
        v4_k = v0.reshape(v4_n, v0.shape[1], 1, v4_d).transpose(1, 2)
        v4_v = v0.reshape(v4_n, v0.shape[1], 1, v4_d).transpose(1, 2)
        v4_o = F.scaled_dot_product_attention(v4_q, v4_k, v4_v, attn_mask=x5)
        v4 = v4_o.transpose(1, 2).reshape(v4_n, v4_t, v4_e)
        v6 = T.gather(v4, 1, x6)
        return (v6,)
    return program


if __name__ == "__main__":
    from graphnn.fuzz.reproducer import main
    raise SystemExit(main([__file__]))
