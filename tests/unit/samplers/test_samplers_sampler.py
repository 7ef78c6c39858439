"""inference_core.samplers: seeded draws, the zip round trip, ONNX export, config validation."""

from __future__ import annotations

import io
import json
import math
import zipfile

import numpy as np
import pytest
import torch

from inference_core.samplers import ACTIVATIONS, NOISE_DRAW, GeneratorNetwork, Sampler, load
from inference_core.samplers.config import Activation
from inference_core.samplers.generator import parameter_shapes


def make_sampler(hidden=(6, 5), activation="tanh", k=3, d=4, lam=0.5, seed=0, layout=None) -> Sampler:
    network = GeneratorNetwork(input_dim=k, hidden=list(hidden), output_dim=d, activation=activation, lam=lam,
                               generator=torch.Generator().manual_seed(seed))
    return Sampler.from_generator(network, method="gpvi", target_kind="gaussian", layout=layout)


def reference_forward(sampler: Sampler, z: torch.Tensor) -> torch.Tensor:
    """f(z) written out in float64 from the config and tensors alone (an independent implementation)."""
    config, tensors = sampler.config["generator"], sampler.tensors()
    act = {"tanh": np.tanh, "relu": lambda a: np.maximum(a, 0)}[config["activation"]]
    h = z.numpy().astype(np.float64)[:, : config["input_dim"]]
    for layer in range(len(config["hidden"])):
        w, b = tensors[f"hidden.{layer}.weight"].double().numpy(), tensors[f"hidden.{layer}.bias"].double().numpy()
        h = act(h @ w.T + b)
    out = h @ tensors["output.weight"].double().numpy().T + tensors["output.bias"].double().numpy()
    return torch.from_numpy(out + config["lambda"] * z.numpy().astype(np.float64))


def test_noise_follows_the_documented_draw() -> None:
    sampler = make_sampler()
    expected = torch.randn((7, sampler.noise_dim), generator=torch.Generator("cpu").manual_seed(11), dtype=torch.float32)
    assert torch.equal(sampler.sample_noise(7, 11), expected)
    assert sampler.config["noise"]["draw"] == NOISE_DRAW


@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_sample_is_the_generator_applied_to_the_seeded_noise(lam: float) -> None:
    sampler = make_sampler(lam=lam, d=4 if lam else 3)
    x = sampler.sample(50, 3)
    assert x.shape == (50, sampler.output_dim) and x.dtype == torch.float32
    torch.testing.assert_close(x.double(), reference_forward(sampler, sampler.sample_noise(50, 3)), atol=1e-5, rtol=1e-5)


def test_sample_is_bit_identical_for_the_same_n_and_seed_and_differs_across_seeds() -> None:
    sampler = make_sampler()
    a, b = sampler.sample(1000, 7), sampler.sample(1000, 7)
    assert torch.equal(a, b)
    c = sampler.sample(1000, 8)
    assert not torch.equal(a, c)
    assert (a - c).abs().mean() > 0.1


def test_zip_round_trip_reproduces_sample_exactly_and_bytes_are_deterministic() -> None:
    layout = [{"name": "layer0.weight", "shape": [2, 1], "offset": 0}, {"name": "layer0.bias", "shape": [2], "offset": 2}]
    sampler = make_sampler(layout=layout)
    blob = sampler.to_zip_bytes()
    assert blob == make_sampler(layout=layout).to_zip_bytes()
    with zipfile.ZipFile(io.BytesIO(blob)) as archive:
        assert archive.namelist() == ["config.json", "weights.safetensors"]
        assert all(info.date_time == (1980, 1, 1, 0, 0, 0) for info in archive.infolist())
        config = json.loads(archive.read("config.json"))
    assert config["generator"] == {"kind": "mlp", "noise_dim": 4, "input_dim": 3, "hidden": [6, 5],
                                   "activation": "tanh", "output_dim": 4, "lambda": 0.5}
    assert config["layout"] == layout and config["target"] == {"kind": "gaussian", "dim": 4}
    again = load(blob)
    assert torch.equal(again.sample(333, 5), sampler.sample(333, 5))
    assert again.config == sampler.config
    assert again.to_zip_bytes() == blob


def test_load_accepts_a_path_and_a_file_object(tmp_path) -> None:
    sampler = make_sampler()
    path = tmp_path / "sampler.zip"
    path.write_bytes(sampler.to_zip_bytes())
    expected = sampler.sample(20, 1)
    assert torch.equal(load(path).sample(20, 1), expected)
    assert torch.equal(load(str(path)).sample(20, 1), expected)
    with open(path, "rb") as handle:
        assert torch.equal(load(handle).sample(20, 1), expected)


def test_a_trained_lambda_is_snapshotted_as_the_float32_value_the_forward_uses() -> None:
    network = GeneratorNetwork(input_dim=2, hidden=[3], output_dim=3, activation="relu", lam=0.3, lam_trainable=True,
                               generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        network.log_lambda.add_(0.1234567)
    sampler = Sampler.from_generator(network, method="gpvi", target_kind="gaussian")
    assert sampler.config["generator"]["lambda"] == float(torch.tensor(0.3 * math.exp(0.1234567), dtype=torch.float32))
    z = sampler.sample_noise(10, 0)
    torch.testing.assert_close(sampler.sample(10, 0), network.float()(z), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(("n", "seed"), [(0, 1), (-3, 1), (2.5, 1), (True, 1), (3, -1), (3, 2**63), (3, 1.0)])
def test_bad_counts_and_seeds_are_value_errors(n, seed) -> None:
    with pytest.raises(ValueError):
        make_sampler().sample(n, seed)


def test_every_activation_has_a_config_entry() -> None:
    assert set(Activation.__args__) == set(ACTIVATIONS)


@pytest.mark.parametrize("change", [
    {"format_version": 2},
    {"format_version": "1"},
    {"format": "something.else"},
    {"generator": {"kind": "transformer"}},
    {"dtype": "float64"},
    {"generator.activation": "swish"},
    {"generator.noise_dim": 5},
    {"generator.lambda": -1.0},
    {"target.dim": 9},
    {"extra_field": 1},
    {"layout": [{"name": "w", "shape": [5], "offset": 0}]},
])
def test_bad_configs_are_rejected(change: dict) -> None:
    sampler = make_sampler()
    config = sampler.config
    for key, value in change.items():
        if "." in key:
            outer, inner = key.split(".")
            config[outer][inner] = value
        else:
            config[key] = value
    with pytest.raises(ValueError):
        Sampler(config, sampler.tensors())


def test_tensors_must_match_the_config() -> None:
    sampler = make_sampler()
    tensors = sampler.tensors()
    tensors["output.bias"] = torch.zeros(7)
    with pytest.raises(ValueError, match="output.bias"):
        Sampler(sampler.config, tensors)
    tensors = sampler.tensors()
    del tensors["hidden.1.weight"]
    with pytest.raises(ValueError):
        Sampler(sampler.config, tensors)


def test_parameter_shapes_cover_every_layer() -> None:
    assert parameter_shapes(3, [5], 2) == {"hidden.0.weight": (5, 3), "hidden.0.bias": (5,),
                                           "output.weight": (2, 5), "output.bias": (2,)}
