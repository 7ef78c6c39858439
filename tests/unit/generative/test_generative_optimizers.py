"""`optimizer_step` / `zero_grads` are bit-identical to torch.optim's `step()` / `zero_grad(set_to_none=False)`
(the reference: the same optimiser driven the ordinary way, on the same gradients), and fall back to `step()`
wherever the direct path does not apply."""

from __future__ import annotations

import copy

import pytest
import torch

from inference_core.methods.generative.optimizers import make_optimizer, optimizer_step, zero_grads
from inference_core.schemas.methods import OptimizerOptions


def parameters(dtype: torch.dtype) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=dtype)) for shape in [(7, 3), (7,), (1,)]]


def run(direct: bool, options: OptimizerOptions, dtype: torch.dtype, steps: int = 6,
        ordinary_steps: list | None = None) -> list[torch.Tensor]:
    params = parameters(dtype)
    optimizer = make_optimizer(params, options)
    if ordinary_steps is not None:
        ordinary_step = optimizer.step
        optimizer.step = lambda: (ordinary_steps.append(1), ordinary_step())
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        if direct:
            zero_grads(optimizer)
        else:
            optimizer.zero_grad(set_to_none=False)
        loss = sum((p * torch.randn(p.shape, generator=g, dtype=dtype)).sum() + p.square().sum() for p in params[:2])
        if step == 0:
            loss = loss + params[2].sum()  # the last parameter gets a gradient only on the first step
        loss.backward()
        if direct:
            optimizer_step(optimizer)
        else:
            optimizer.step()
    keys = ("step", "exp_avg", "exp_avg_sq") if options.name == "adam" else ()
    state = [optimizer.state[p][key] for p in params for key in keys]
    return [p.detach().clone() for p in params] + [p.grad.clone() for p in params] + state


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", [OptimizerOptions(name="adam", lr=3e-2, betas=(0.8, 0.95)),
                                     OptimizerOptions(name="sgd", lr=1e-2)])
def test_direct_steps_are_bit_identical_to_torch_optim(options: OptimizerOptions, dtype: torch.dtype) -> None:
    ordinary: list = []
    direct, reference = run(True, options, dtype, ordinary_steps=ordinary), run(False, options, dtype)
    # fused Adam: only the first step (which creates the state) goes through step(); anything else always does
    assert len(ordinary) == (1 if options.name == "adam" else 6)
    assert not torch.equal(direct[0], parameters(dtype)[0])  # the steps moved the parameters
    for a, b in zip(direct, reference, strict=True):
        assert torch.equal(a, b)


def test_a_hooked_optimizer_takes_the_ordinary_step() -> None:
    params = parameters(torch.float32)
    optimizer = make_optimizer(params, OptimizerOptions(name="adam", lr=1e-2))
    calls = []
    optimizer.register_step_post_hook(lambda *_: calls.append(1))
    for _ in range(3):
        zero_grads(optimizer)
        sum(p.square().sum() for p in params).backward()
        optimizer_step(optimizer)
    assert calls == [1, 1, 1]


def test_zero_grads_keeps_missing_gradients_missing() -> None:
    params = parameters(torch.float32)
    optimizer = make_optimizer(params, OptimizerOptions(name="adam", lr=1e-2))
    params[0].sum().backward()
    zero_grads(optimizer)
    assert torch.equal(params[0].grad, torch.zeros_like(params[0]))
    assert params[1].grad is None and params[2].grad is None


def test_a_loaded_state_replaces_the_direct_steps_tensors() -> None:
    def train(direct: bool) -> torch.Tensor:
        params = parameters(torch.float64)
        optimizer = make_optimizer(params, OptimizerOptions(name="adam", lr=5e-2))

        def steps(count: int) -> None:
            for _ in range(count):
                zero_grads(optimizer) if direct else optimizer.zero_grad(set_to_none=False)
                sum((p - 1).square().sum() for p in params).backward()
                optimizer_step(optimizer) if direct else optimizer.step()

        steps(3)
        saved_state = copy.deepcopy(optimizer.state_dict())
        saved_params = [p.detach().clone() for p in params]
        steps(2)  # then back to step 3: the optimiser's state (new tensors) and the parameters as they were
        optimizer.load_state_dict(saved_state)
        with torch.no_grad():
            for p, value in zip(params, saved_params, strict=True):
                p.copy_(value)
        steps(2)
        return torch.cat([p.detach().reshape(-1) for p in params])

    assert torch.equal(train(True), train(False))
