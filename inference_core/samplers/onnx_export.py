"""ONNX export of a sampler's generator, built node by node with `onnx.helper` (no tracing, no torch.onnx):
the graph is exactly f(z) = output.weight · φ(z[:, :k]) + output.bias + λz.

    input  "z"       float32 [n, noise_dim]   (n symbolic: any batch size)
    output "samples" float32 [n, output_dim]

The graph is deterministic; the client draws z exactly as `Sampler.sample_noise(n, seed)` does (see
`config.NOISE_DRAW`), so `onnxruntime.InferenceSession(model).run(["samples"], {"z": noise})` reproduces
`Sampler.sample(n, seed)` to float32 rounding (the kernels differ, so not bit for bit).
Opset 17, IR version 8 (readable by onnxruntime ≥ 1.13). `onnx` is needed only here and is imported lazily.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from torch import Tensor

INPUT_NAME = "z"
OUTPUT_NAME = "samples"
OPSET = 17
IR_VERSION = 8


def _activation_nodes(helper: Any, name: str, x: str, out: str, prefix: str) -> list[Any]:
    simple = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus"}
    if name in simple:
        return [helper.make_node(simple[name], [x], [out], name=f"{prefix}_{name}")]
    if name == "elu":
        return [helper.make_node("Elu", [x], [out], alpha=1.0, name=f"{prefix}_elu")]
    if name == "leaky_relu":
        return [helper.make_node("LeakyRelu", [x], [out], alpha=0.01, name=f"{prefix}_leaky_relu")]
    if name == "silu":
        return [helper.make_node("Sigmoid", [x], [f"{prefix}_sig"], name=f"{prefix}_sigmoid"),
                helper.make_node("Mul", [x, f"{prefix}_sig"], [out], name=f"{prefix}_silu")]
    if name == "gelu":  # 0.5 x (1 + erf(x / √2)), the exact GELU of torch.nn.functional.gelu
        return [helper.make_node("Mul", [x, "const_inv_sqrt2"], [f"{prefix}_scaled"], name=f"{prefix}_scale"),
                helper.make_node("Erf", [f"{prefix}_scaled"], [f"{prefix}_erf"], name=f"{prefix}_erf"),
                helper.make_node("Add", [f"{prefix}_erf", "const_one"], [f"{prefix}_1perf"], name=f"{prefix}_add"),
                helper.make_node("Mul", [x, f"{prefix}_1perf"], [f"{prefix}_x1perf"], name=f"{prefix}_mul"),
                helper.make_node("Mul", [f"{prefix}_x1perf", "const_half"], [out], name=f"{prefix}_gelu")]
    raise ValueError(f"no ONNX form for activation {name!r}")


def export_onnx(config: dict[str, Any], tensors: dict[str, Tensor]) -> bytes:
    """Serialised ONNX ModelProto for the sampler described by (config, tensors)."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("ONNX export needs the `onnx` package (pip install onnx)") from exc
    gen = config["generator"]
    k, noise_dim, d = gen["input_dim"], gen["noise_dim"], gen["output_dim"]
    lam, activation, hidden = float(gen["lambda"]), gen["activation"], gen["hidden"]

    def const(name: str, value: np.ndarray) -> Any:
        return numpy_helper.from_array(np.ascontiguousarray(value), name=name)

    initializers = []
    if activation == "gelu" and hidden:
        initializers += [const("const_half", np.array(0.5, np.float32)), const("const_one", np.array(1.0, np.float32)),
                         const("const_inv_sqrt2", np.array(1 / math.sqrt(2), np.float32))]
    nodes = []
    current = INPUT_NAME
    if k < noise_dim:
        initializers += [const("slice_starts", np.array([0], np.int64)), const("slice_ends", np.array([k], np.int64)),
                         const("slice_axes", np.array([1], np.int64))]
        nodes.append(helper.make_node("Slice", [INPUT_NAME, "slice_starts", "slice_ends", "slice_axes"], ["z_prefix"],
                                      name="noise_prefix"))
        current = "z_prefix"
    for layer in range(len(hidden)):
        weight, bias = f"hidden.{layer}.weight", f"hidden.{layer}.bias"
        initializers += [const(weight, tensors[weight].numpy()), const(bias, tensors[bias].numpy())]
        pre, post = f"hidden{layer}_pre", f"hidden{layer}_out"
        nodes.append(helper.make_node("Gemm", [current, weight, bias], [pre], transB=1, name=f"hidden{layer}_gemm"))
        nodes += _activation_nodes(helper, activation, pre, post, f"hidden{layer}")
        current = post
    initializers += [const("output.weight", tensors["output.weight"].numpy()),
                     const("output.bias", tensors["output.bias"].numpy())]
    g_out = OUTPUT_NAME if lam == 0.0 else "g_out"
    nodes.append(helper.make_node("Gemm", [current, "output.weight", "output.bias"], [g_out], transB=1,
                                  name="output_gemm"))
    if lam != 0.0:
        initializers.append(const("lambda", np.array(lam, np.float32)))
        nodes += [helper.make_node("Mul", [INPUT_NAME, "lambda"], ["lambda_z"], name="lambda_times_z"),
                  helper.make_node("Add", ["g_out", "lambda_z"], [OUTPUT_NAME], name="add_lambda_z")]
    graph = helper.make_graph(
        nodes, "parvis_sampler",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["n", noise_dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["n", d])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph, producer_name="parvis", producer_version="1", opset_imports=[helper.make_opsetid("", OPSET)],
        doc_string=("Parvis sampler: maps standard-normal noise z [n, noise_dim] to samples [n, output_dim]. "
                    f"Draw z as {config['noise']['draw']}."),
    )
    model.ir_version = IR_VERSION
    onnx.helper.set_model_props(model, {"parvis.sampler_config": json.dumps(config, sort_keys=True)})
    onnx.checker.check_model(model)
    return model.SerializeToString(deterministic=True)
