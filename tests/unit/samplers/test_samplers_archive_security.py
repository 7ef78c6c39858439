"""A hostile sampler zip is rejected with ValueError before anything large is read or any tensor is built."""

from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest
import torch
from safetensors.torch import save as save_safetensors

from inference_core.samplers import GeneratorNetwork, Sampler, load
from inference_core.samplers.archive import MAX_CONFIG_BYTES


@pytest.fixture(scope="module")
def sampler() -> Sampler:
    network = GeneratorNetwork(input_dim=2, hidden=[4], output_dim=3, activation="relu", lam=1.0,
                               generator=torch.Generator().manual_seed(2))
    return Sampler.from_generator(network, method="gpvi", target_kind="gaussian")


def build_zip(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, payload in members:
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), payload,
                             compress_type=compression)
    return buffer.getvalue()


def members_of(sampler: Sampler) -> tuple[bytes, bytes]:
    with zipfile.ZipFile(io.BytesIO(sampler.to_zip_bytes())) as archive:
        return archive.read("config.json"), archive.read("weights.safetensors")


def test_the_untouched_archive_loads(sampler: Sampler) -> None:
    config, weights = members_of(sampler)
    assert torch.equal(load(build_zip([("config.json", config), ("weights.safetensors", weights)])).sample(5, 0),
                       sampler.sample(5, 0))
    deflated = build_zip([("config.json", config), ("weights.safetensors", weights)], zipfile.ZIP_DEFLATED)
    assert torch.equal(load(deflated).sample(5, 0), sampler.sample(5, 0))


def expect_rejected(blob: bytes, match: str | None = None) -> None:
    with pytest.raises(ValueError, match=match):
        load(blob)


def test_not_a_zip() -> None:
    expect_rejected(b"PK\x03\x04 definitely not a zip", "not a readable zip")
    expect_rejected(b"", "not a readable zip")


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("names", [
    ["../config.json", "weights.safetensors"],
    ["config.json", "/etc/weights.safetensors"],
    ["config.json", "sub/../weights.safetensors"],
    ["config.json"],
    ["config.json", "weights.safetensors", "extra.txt"],
    ["config.json", "weights.safetensors", "config.json"],
])
def test_member_names_must_be_exactly_the_two_files(sampler: Sampler, names: list[str]) -> None:
    config, weights = members_of(sampler)
    payload = {"config.json": config, "weights.safetensors": weights}
    blob = build_zip([(name, payload.get(name.rsplit("/", 1)[-1], b"x")) for name in names])
    expect_rejected(blob, "members must be exactly")


def test_an_oversized_config_is_refused_even_when_it_compresses_to_nothing(sampler: Sampler) -> None:
    _, weights = members_of(sampler)
    bomb = b"{" + b" " * (MAX_CONFIG_BYTES + 10) + b"}"
    blob = build_zip([("config.json", bomb), ("weights.safetensors", weights)], zipfile.ZIP_DEFLATED)
    assert len(blob) < MAX_CONFIG_BYTES // 100
    expect_rejected(blob, "over the cap")


def patch_central_size(blob: bytes, name: bytes, size: int) -> bytes:
    """Rewrite the uncompressed-size field of `name` in the central directory (a lying header)."""
    data = bytearray(blob)
    at = data.find(b"PK\x01\x02")
    while at != -1:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if bytes(data[at + 46: at + 46 + name_len]) == name:
            struct.pack_into("<I", data, at + 24, size)
            return bytes(data)
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError("member not found")


def test_huge_declared_sizes_are_refused_before_reading(sampler: Sampler) -> None:
    blob = patch_central_size(sampler.to_zip_bytes(), b"weights.safetensors", 0xFFFFFFF0)
    with pytest.raises(ValueError, match="over the cap"):
        load(blob, max_weights_bytes=2**20)


def test_a_declared_size_that_lies_is_refused(sampler: Sampler) -> None:
    config, _ = members_of(sampler)
    blob = patch_central_size(sampler.to_zip_bytes(), b"config.json", len(config) - 5)
    expect_rejected(blob)


def test_the_weights_cap_applies_to_the_whole_archive(sampler: Sampler) -> None:
    with pytest.raises(ValueError, match="over the cap"):
        load(sampler.to_zip_bytes(), max_weights_bytes=16)


def test_encrypted_members_are_refused(sampler: Sampler) -> None:
    data = bytearray(sampler.to_zip_bytes())
    at = data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, at + 8, struct.unpack_from("<H", data, at + 8)[0] | 0x1)
    expect_rejected(bytes(data), "encrypted")


def with_weights(sampler: Sampler, tensors: dict[str, torch.Tensor]) -> bytes:
    config, _ = members_of(sampler)
    return build_zip([("config.json", config), ("weights.safetensors", save_safetensors(tensors))])


def test_wrong_tensor_shapes_for_the_config_are_refused(sampler: Sampler) -> None:
    tensors = sampler.tensors()
    tensors["hidden.0.weight"] = torch.zeros(5, 2)
    expect_rejected(with_weights(sampler, tensors), "shape")


def test_missing_extra_and_renamed_tensors_are_refused(sampler: Sampler) -> None:
    tensors = sampler.tensors()
    expect_rejected(with_weights(sampler, {**tensors, "evil": torch.zeros(1)}), "do not match")
    tensors.pop("output.bias")
    expect_rejected(with_weights(sampler, tensors), "do not match")


def test_non_float32_and_non_finite_weights_are_refused(sampler: Sampler) -> None:
    tensors = sampler.tensors()
    expect_rejected(with_weights(sampler, {**tensors, "output.bias": tensors["output.bias"].double()}), "float32")
    bad = tensors["output.weight"].clone()
    bad[0, 0] = float("nan")
    expect_rejected(with_weights(sampler, {**tensors, "output.weight": bad}), "NaN")


def test_a_corrupt_safetensors_header_is_refused(sampler: Sampler) -> None:
    config, weights = members_of(sampler)
    huge_header = struct.pack("<Q", 2**40) + weights[8:]
    expect_rejected(build_zip([("config.json", config), ("weights.safetensors", huge_header)]), "header length")
    expect_rejected(build_zip([("config.json", config), ("weights.safetensors", b"\x01")]), "truncated")
    header_len = struct.unpack("<Q", weights[:8])[0]
    header = json.loads(weights[8: 8 + header_len])
    header["output.bias"]["data_offsets"] = [0, 10**9]
    raw = json.dumps(header).encode()
    forged = struct.pack("<Q", len(raw)) + raw + weights[8 + header_len:]
    expect_rejected(build_zip([("config.json", config), ("weights.safetensors", forged)]), "offsets")


@pytest.mark.parametrize("config_text", [
    b"not json",
    b"[1, 2, 3]",
    b'{"format": "parvis.sampler", "format_version": NaN}',
    b'{"format": "parvis.sampler", "format_version": 99}',
    b"\xff\xfe",
])
def test_bad_config_json_is_refused(sampler: Sampler, config_text: bytes) -> None:
    _, weights = members_of(sampler)
    expect_rejected(build_zip([("config.json", config_text), ("weights.safetensors", weights)]))


def test_unknown_architecture_is_refused(sampler: Sampler) -> None:
    config, weights = members_of(sampler)
    raw = json.loads(config)
    raw["generator"]["kind"] = "convnet"
    expect_rejected(build_zip([("config.json", json.dumps(raw).encode()), ("weights.safetensors", weights)]),
                    "architecture")


def test_load_rejects_other_source_types() -> None:
    with pytest.raises(ValueError):
        load(12345)
    with pytest.raises(ValueError):
        load(io.StringIO("text mode"))
