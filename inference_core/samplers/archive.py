"""The sampler archive: a `.zip` holding exactly `config.json` and `weights.safetensors` (never pickle).

Writing is deterministic: members in a fixed order, stored (no compression), timestamp 1980-01-01 00:00,
fixed permissions and host system, `config.json` as sorted, indented JSON. The same sampler gives the same
bytes.

Reading treats the archive as hostile: a size cap on the whole archive and on each member (declared and
actually read), exactly the two expected member names (no others, no duplicates, so no path traversal),
no encryption, stored or deflated only, JSON without NaN/Infinity, a safetensors header checked before any
tensor is materialised, float32 tensors whose names and shapes match the config exactly, finite values.
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import zipfile
from typing import IO, Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from torch import Tensor

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "weights.safetensors"
MEMBERS = (CONFIG_NAME, WEIGHTS_NAME)
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
MAX_CONFIG_BYTES = 4 * 2**20
MAX_HEADER_BYTES = 4 * 2**20
#: Default cap on weights.safetensors (and, plus a margin, on the archive): 1 GiB + header.
MAX_WEIGHTS_BYTES = 2**30 + MAX_HEADER_BYTES + 8


def _reject(message: str) -> ValueError:
    return ValueError(f"invalid sampler archive: {message}")


def _forbid_constant(name: str) -> Any:
    raise _reject(f"config.json contains {name}, which is not JSON")


def config_bytes(config: dict[str, Any]) -> bytes:
    return (json.dumps(config, sort_keys=True, indent=2, allow_nan=False) + "\n").encode("utf-8")


def write_zip(config: dict[str, Any], tensors: dict[str, Tensor]) -> bytes:
    weights = save_safetensors({name: t.contiguous() for name, t in tensors.items()})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, payload in ((CONFIG_NAME, config_bytes(config)), (WEIGHTS_NAME, weights)):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = 3  # unix, whatever machine writes it
            info.external_attr = 0o100644 << 16
            archive.writestr(info, payload)
    return buffer.getvalue()


def read_source(source: bytes | bytearray | memoryview | str | os.PathLike | IO[bytes],
                max_bytes: int = MAX_WEIGHTS_BYTES + MAX_CONFIG_BYTES) -> bytes:
    """The archive's bytes from a path, a bytes-like object or a binary file object, capped at max_bytes."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    elif isinstance(source, str | os.PathLike):
        size = os.path.getsize(source)
        if size > max_bytes:
            raise _reject(f"the file is {size} bytes, over the cap of {max_bytes}")
        with open(source, "rb") as handle:
            data = handle.read(max_bytes + 1)
    elif hasattr(source, "read"):
        data = source.read(max_bytes + 1)
        if not isinstance(data, bytes | bytearray):
            raise ValueError("the file object must be opened in binary mode")
        data = bytes(data)
    else:
        raise ValueError(f"cannot load a sampler from a {type(source).__name__}; give a path, bytes or a file")
    if len(data) > max_bytes:
        raise _reject(f"over the cap of {max_bytes} bytes")
    return data


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    if info.file_size > cap:
        raise _reject(f"{info.filename} declares {info.file_size} bytes, over the cap of {cap}")
    with archive.open(info) as handle:
        payload = handle.read(cap + 1)
    if len(payload) > cap or len(payload) != info.file_size:
        raise _reject(f"{info.filename} does not hold the {info.file_size} bytes it declares")
    return payload


def read_zip(data: bytes, max_weights_bytes: int = MAX_WEIGHTS_BYTES) -> tuple[dict[str, Any], bytes]:
    """(config dict, raw safetensors bytes) from an archive, after the structural checks above."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise _reject(f"not a readable zip file ({type(exc).__name__})") from None
    with archive:
        infos = archive.infolist()
        names = [info.filename for info in infos]
        if sorted(names) != sorted(MEMBERS):
            shown = ", ".join(repr(n[:80]) for n in names[:5]) + (" ..." if len(names) > 5 else "")
            raise _reject(f"members must be exactly {CONFIG_NAME} and {WEIGHTS_NAME}, got {shown}")
        by_name: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if info.flag_bits & 0x1:
                raise _reject(f"{info.filename} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise _reject(f"{info.filename} uses an unsupported compression method {info.compress_type}")
            by_name[info.filename] = info
        try:
            raw_config = _read_member(archive, by_name[CONFIG_NAME], MAX_CONFIG_BYTES)
            weights = _read_member(archive, by_name[WEIGHTS_NAME], max_weights_bytes)
        except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
            raise _reject(f"a member could not be read ({type(exc).__name__})") from None
    try:
        config = json.loads(raw_config.decode("utf-8"), parse_constant=_forbid_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _reject("config.json is not valid UTF-8 JSON") from None
    return config, weights


_DTYPES = {"F32": torch.float32}


def read_weights(weights: bytes, expected: dict[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """Tensors of a safetensors blob whose header lists exactly `expected` (float32, those shapes)."""
    if len(weights) < 8:
        raise _reject("weights.safetensors is truncated")
    (header_len,) = struct.unpack("<Q", weights[:8])
    if header_len > MAX_HEADER_BYTES or 8 + header_len > len(weights):
        raise _reject("weights.safetensors has an invalid header length")
    try:
        header = json.loads(weights[8 : 8 + header_len].decode("utf-8"), parse_constant=_forbid_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _reject("weights.safetensors has an unreadable header") from None
    if not isinstance(header, dict):
        raise _reject("weights.safetensors has an unreadable header")
    header.pop("__metadata__", None)
    if set(header) != set(expected):
        missing, extra = sorted(set(expected) - set(header)), sorted(set(header) - set(expected))
        raise _reject(f"tensor names do not match the config (missing {missing[:5]}, unexpected {extra[:5]})")
    body = len(weights) - 8 - header_len
    for name, entry in header.items():
        if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPES:
            raise _reject(f"tensor {name!r} must be float32 (F32)")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if list(expected[name]) != shape:
            raise _reject(f"tensor {name!r} has shape {shape}, the config implies {list(expected[name])}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= body
                or offsets[1] - offsets[0] != 4 * math.prod(expected[name])):
            raise _reject(f"tensor {name!r} has invalid data offsets")
    try:
        tensors = load_safetensors(weights)
    except Exception as exc:  # safetensors raises its own error types for malformed buffers
        raise _reject(f"weights.safetensors could not be parsed ({type(exc).__name__})") from None
    for name, tensor in tensors.items():
        if tensor.dtype != torch.float32 or tuple(tensor.shape) != tuple(expected[name]):
            raise _reject(f"tensor {name!r} does not match the config")
        if not bool(torch.isfinite(tensor).all()):
            raise _reject(f"tensor {name!r} holds NaN or infinite values")
    return tensors


def frozen_tensors(expected: dict[str, tuple[int, ...]], tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """float32 CPU copies of `tensors`, which must be exactly the names and shapes a config expects."""
    if set(tensors) != set(expected):
        raise ValueError(f"tensors {sorted(tensors)} do not match the config's {sorted(expected)}")
    frozen: dict[str, Tensor] = {}
    for name, shape in expected.items():
        tensor = tensors[name]
        if not isinstance(tensor, Tensor) or tuple(tensor.shape) != shape:
            raise ValueError(f"tensor {name!r} must have shape {list(shape)}")
        frozen[name] = tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().clone()
    return frozen
