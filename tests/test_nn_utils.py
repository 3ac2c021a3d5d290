"""graphnn.nn.utils against torch.nn.utils: gradient clipping and parameter vectors."""
import math

import numpy as np
import pytest

from module_oracle import same_as_torch

RNG = np.random.default_rng(3)
A, B, C = RNG.standard_normal((3, 4)), RNG.standard_normal(5), RNG.standard_normal(2)


def _params(lib, dtypes=("float64", "float64", "float64"), grads=(3.0, -2.0, None)):
    """Three parameters; gradients are scaled copies of their values (or None)."""
    params = []
    for value, dtype, scale in zip((A, B, C), dtypes, grads):
        p = lib.nn.Parameter(lib.tensor(value, dtype=getattr(lib, dtype)))
        if scale is not None:
            p.grad = lib.tensor(value * scale, dtype=getattr(lib, dtype))
        params.append(p)
    return params


NORMS = [2.0, 1, 3.5, math.inf, -math.inf, 0, 0.5]


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("norm_type", NORMS)
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    def scenario(lib):
        params = _params(lib)
        total = lib.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        return total, [p.grad for p in params]
    same_as_torch(scenario, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_mixed_dtypes_and_generators(norm_type):
    def scenario(lib):
        params = _params(lib, dtypes=("float32", "float64", "float32"), grads=(3.0, -2.0, 1.0))
        total = lib.nn.utils.clip_grad_norm_((p for p in params), 1.0, norm_type)
        return total, [p.grad for p in params]
    same_as_torch(scenario, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", ["empty", "no_grads", "single_tensor", "nan", "inf",
                                  "nan_error", "inf_error", "string_norm"])
def test_clip_grad_norm_edge_cases(case):
    def scenario(lib):
        params = _params(lib)
        clip = lib.nn.utils.clip_grad_norm_
        if case == "empty":
            return clip([], 1.0)
        if case == "no_grads":
            return clip(params[2:], 1.0)
        if case == "single_tensor":
            return clip(params[0], 1.0), params[0].grad
        if case == "string_norm":
            return clip(params, 1.0, norm_type="inf"), params[0].grad
        params[0].grad[0, 0] = float("nan" if "nan" in case else "inf")
        total = clip(params, 1.0, error_if_nonfinite=case.endswith("error"))
        return total, [p.grad for p in params]
    same_as_torch(scenario, rtol=1e-9)


def test_get_total_norm_and_clip_grads_with_norm():
    def scenario(lib):
        params = _params(lib)
        grads = [p.grad for p in params if p.grad is not None]
        total = lib.nn.utils.get_total_norm(grads, norm_type=3.0)
        lib.nn.utils.clip_grads_with_norm_(params, 2.0, total)
        return total, [p.grad for p in params]
    same_as_torch(scenario, rtol=1e-9)


@pytest.mark.parametrize("clip_value", [0.5, 2, 100.0])
def test_clip_grad_value_matches_torch(clip_value):
    def scenario(lib):
        params = _params(lib)
        returned = lib.nn.utils.clip_grad_value_((p for p in params), clip_value)
        single = _params(lib)[1]
        lib.nn.utils.clip_grad_value_(single, clip_value)
        return returned, [p.grad for p in params], single.grad
    same_as_torch(scenario)


def test_clipping_after_backward_in_a_training_step():
    def scenario(lib):
        model = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.Tanh(), lib.nn.Linear(3, 1))
        model.load_state_dict({"0.weight": lib.tensor(A[:, :4].astype(np.float32)),
                               "0.bias": lib.tensor(B[:3].astype(np.float32)),
                               "2.weight": lib.tensor(C[None, [0, 1, 0]].astype(np.float32)),
                               "2.bias": lib.tensor(B[3:4].astype(np.float32))})
        (model(lib.tensor(A.astype(np.float32))) ** 2).sum().backward()
        total = lib.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        return total, [p.grad for p in model.parameters()]
    same_as_torch(scenario, rtol=1e-5, atol=1e-6)


def test_parameters_to_vector_matches_torch_with_gradients():
    def scenario(lib):
        params = _params(lib, dtypes=("float32", "float64", "float32"))
        vec = lib.nn.utils.parameters_to_vector(params)
        (vec * lib.arange(vec.numel(), dtype=lib.float64)).sum().backward()
        return vec, [p.grad for p in params]
    same_as_torch(scenario, rtol=1e-6)


@pytest.mark.parametrize("case", ["exact", "longer", "shorter", "float32_into_float64",
                                  "not_a_tensor", "empty_list"])
def test_vector_to_parameters_matches_torch(case):
    def scenario(lib):
        params = _params(lib)[:2]
        weight = params[0]
        n = {"exact": 17, "longer": 20, "shorter": 10}.get(case, 17)
        vec = lib.arange(n, dtype=lib.float32 if case.startswith("float32") else lib.float64)
        if case == "not_a_tensor":
            vec = vec.tolist()
        if case == "empty_list":
            return lib.nn.utils.parameters_to_vector([])
        lib.nn.utils.vector_to_parameters(vec, params)
        with lib.no_grad():
            vec.add_(100)  # the parameters now share the vector's memory
        return params, params[0] is weight, params[0].is_leaf
    same_as_torch(scenario, message=case not in ("empty_list", "shorter"))  # frontend wording
