"""ONNX export of a sampler's generator, built node by node with `onnx.helper` (no tracing, no torch.onnx):
the graph is exactly f(z) = output.weight · φ(z[:, :k]) + output.bias + λz.

    input  "z"       float32 [n, noise_dim]   (n symbolic: any batch size)
    output "samples" float32 [n, output_dim]

The graph is deterministic; the client draws z exactly as `Sampler.sample_noise(n, seed)` does (see
`config.NOISE_DRAW`), so `onnxruntime.InferenceSession(model).run(["samples"], {"z": noise})` reproduces
`Sampler.sample(n, seed)` to float32 rounding (the kernels differ, so not bit for bit).
A "coupling"-structure generator (samplers.generator) is exported too: its top block t(z[:k]) = shift +
exp(log_scale)·T(z[:k]) (T's couplings node by node, as the output flow's; exp(log_scale) stored as the
initialiser "top.scale", computed in float32 as the sampler computes it), its other rows W φ(z[:k]) + b +
λ z[k:], concatenated.
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
    coupling = gen.get("structure", "residual") == "coupling"
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
    affine = bool(gen.get("affine", False))
    flow = gen.get("flow")
    f_out = "f_raw" if flow else "f_out" if affine else OUTPUT_NAME
    g_out = f_out if lam == 0.0 else "g_out"
    nodes.append(helper.make_node("Gemm", [current, "output.weight", "output.bias"], [g_out], transB=1,
                                  name="output_gemm"))
    if coupling:  # f = [t(z[:k]); g_out + λ z[k:]]
        from inference_core.samplers.generator import TOP_FLOW_PREFIX, TOP_PREFIX

        top_nodes, top_initializers = _coupling_nodes(helper, const, tensors, "z_prefix", "top_flow_out",
                                                      gen["coupling"]["layers"], TOP_FLOW_PREFIX, "top_flow")
        nodes += top_nodes
        initializers += top_initializers
        initializers += [const("top.scale", tensors[TOP_PREFIX + "log_scale"].exp().numpy()),
                         const("top.shift", tensors[TOP_PREFIX + "shift"].numpy()),
                         const("rest_starts", np.array([k], np.int64)),
                         const("rest_ends", np.array([noise_dim], np.int64)),
                         const("lambda", np.array(lam, np.float32))]
        nodes += [helper.make_node("Mul", ["top_flow_out", "top.scale"], ["top_scaled"], name="top_scale"),
                  helper.make_node("Add", ["top_scaled", "top.shift"], ["top_out"], name="top_shift"),
                  helper.make_node("Slice", [INPUT_NAME, "rest_starts", "rest_ends", "slice_axes"], ["z_rest"],
                                   name="noise_rest"),
                  helper.make_node("Mul", ["z_rest", "lambda"], ["lambda_z"], name="lambda_times_z_rest"),
                  helper.make_node("Add", ["g_out", "lambda_z"], ["rest_out"], name="add_lambda_z"),
                  helper.make_node("Concat", ["top_out", "rest_out"], [f_out], axis=1, name="concat_top_rest")]
    elif lam != 0.0:
        initializers.append(const("lambda", np.array(lam, np.float32)))
        nodes += [helper.make_node("Mul", [INPUT_NAME, "lambda"], ["lambda_z"], name="lambda_times_z"),
                  helper.make_node("Add", ["g_out", "lambda_z"], [f_out], name="add_lambda_z")]
    if flow:
        flow_nodes, flow_initializers = _coupling_nodes(helper, const, tensors, f_out, "f_out", flow["layers"])
        nodes += flow_nodes
        initializers += flow_initializers
        f_out = "f_out"
    if affine:  # x = shift + f · rootᵀ, one Gemm
        initializers += [const("affine.root", tensors["affine.root"].numpy()),
                         const("affine.shift", tensors["affine.shift"].numpy())]
        nodes.append(helper.make_node("Gemm", [f_out, "affine.root", "affine.shift"], [OUTPUT_NAME], transB=1,
                                      name="affine_output"))
    graph = helper.make_graph(
        nodes, "parvis_sampler",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["n", noise_dim])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["n", d])],
        initializer=initializers,
    )
    return _serialise(graph, config, "Parvis sampler: maps standard-normal noise z [n, noise_dim] to samples "
                      f"[n, output_dim]. Draw z as {config['noise']['draw']}.")


def _coupling_nodes(helper: Any, const: Any, tensors: dict[str, Tensor], x: str, out: str,
                    layers: int, prefix: str | None = None, name: str = "flow") -> tuple[list[Any], list[Any]]:
    """The flow T of `inference_core.coupling.CouplingFlow` from `x` to `out`, layer by layer: h = x·m; [s | t] =
    net(h) (Gemm, Tanh, Gemm, Tanh, Gemm); s = (1 − m)·B·tanh(s/B), t = (1 − m)·t; x ← x·exp(s) + t. `prefix`:
    its tensors' (default FLOW_PREFIX); `name`: the prefix of its node and constant names."""
    from inference_core.coupling import FLOW_PREFIX, SCALE_BOUND

    prefix = FLOW_PREFIX if prefix is None else prefix
    dim = tensors[f"{prefix}layers.0.mask"].numel()
    initializers = [const(f"{name}_bound", np.array(SCALE_BOUND, np.float32)),
                    const(f"{name}_split", np.array([dim, dim], np.int64))]
    nodes = []
    current = x
    for layer in range(layers):
        base, tag = f"{prefix}layers.{layer}.", f"{name}{layer}"
        mask = tensors[base + "mask"].numpy()
        initializers += [const(f"{tag}_mask", mask), const(f"{tag}_free", 1 - mask)]
        nodes.append(helper.make_node("Mul", [current, f"{tag}_mask"], [f"{tag}_fixed"], name=f"{tag}_fixed"))
        h = f"{tag}_fixed"
        for index in (0, 2, 4):
            weight, bias = f"{base}net.{index}.weight", f"{base}net.{index}.bias"
            initializers += [const(weight, tensors[weight].numpy()), const(bias, tensors[bias].numpy())]
            nodes.append(helper.make_node("Gemm", [h, weight, bias], [f"{tag}_net{index}"], transB=1,
                                          name=f"{tag}_gemm{index}"))
            h = f"{tag}_net{index}"
            if index < 4:
                nodes.append(helper.make_node("Tanh", [h], [f"{h}_tanh"], name=f"{tag}_tanh{index}"))
                h = f"{h}_tanh"
        nodes += [
            helper.make_node("Split", [h, f"{name}_split"], [f"{tag}_s_raw", f"{tag}_t_raw"], axis=1,
                             name=f"{tag}_split"),
            helper.make_node("Div", [f"{tag}_s_raw", f"{name}_bound"], [f"{tag}_s_div"], name=f"{tag}_s_div"),
            helper.make_node("Tanh", [f"{tag}_s_div"], [f"{tag}_s_tanh"], name=f"{tag}_s_tanh"),
            helper.make_node("Mul", [f"{tag}_s_tanh", f"{name}_bound"], [f"{tag}_s_bounded"], name=f"{tag}_s_bound"),
            helper.make_node("Mul", [f"{tag}_s_bounded", f"{tag}_free"], [f"{tag}_s"], name=f"{tag}_s"),
            helper.make_node("Mul", [f"{tag}_t_raw", f"{tag}_free"], [f"{tag}_t"], name=f"{tag}_t"),
            helper.make_node("Exp", [f"{tag}_s"], [f"{tag}_scale"], name=f"{tag}_exp"),
            helper.make_node("Mul", [current, f"{tag}_scale"], [f"{tag}_scaled"], name=f"{tag}_scale_x"),
        ]
        layer_out = out if layer == layers - 1 else f"{tag}_out"
        nodes.append(helper.make_node("Add", [f"{tag}_scaled", f"{tag}_t"], [layer_out], name=f"{tag}_shift"))
        current = layer_out
    return nodes, initializers


def export_spg_onnx(config: dict[str, Any], tensors: dict[str, Tensor]) -> bytes:
    """Serialised ONNX ModelProto of an spg sampler (`samplers.spg`), the steps of its `forward`:

        inputs  "x" float32 [m, p] (original units), "eps_h" float32 [n, H], "eps_a" float32 [n, S]
        output  "samples" float32 [n, m]

    u = (x − x_mean)/x_std; h = q.mean + exp(q.log_std)·eps_h; [μ_a | r] = decoder(h); a = μ_a + (softplus(r) +
    1e-4)·eps_a; Φᵀ [S, m] from the S basis MLPs run side by side (MatMul broadcast over S); samples =
    y_mean + y_std·(a Φᵀ). Feed eps_h, eps_a exactly as `SPGSampler.sample_noise(n, seed)` draws them.
    """
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("ONNX export needs the `onnx` package (pip install onnx)") from exc
    from inference_core.samplers.spg import SPG_MIN_STD
    from inference_core.targets.models.network import MLP

    gen = config["generator"]
    p, S, H = gen["input_dim"], gen["n_basis"], gen["latent_dim"]
    stats = config["model"].get("standardization") or {}
    x_mean = np.asarray(stats.get("x_mean") or [0.0] * p, np.float32)
    x_std = np.asarray(stats.get("x_std") or [1.0] * p, np.float32)
    y_mean = np.float32(stats["y_mean"] if stats.get("y_mean") is not None else 0.0)
    y_std = np.float32(stats["y_std"] if stats.get("y_std") is not None else 1.0)

    def const(name: str, value: np.ndarray) -> Any:
        return numpy_helper.from_array(np.ascontiguousarray(np.asarray(value, np.float32)), name=name)

    def const_i64(name: str, value: list[int]) -> Any:
        return numpy_helper.from_array(np.asarray(value, np.int64), name=name)

    activations = {gen["decoder_activation"], gen["basis_activation"]}
    initializers = [const("x_mean", x_mean), const("x_std", x_std), const("y_mean", y_mean),
                    const("y_std", y_std), const("q_mean", tensors["q.mean"].numpy()),
                    const("q_std", tensors["q.log_std"].exp().numpy()), const("min_std", np.float32(SPG_MIN_STD)),
                    const_i64("zero_s", [0]), const_i64("s_s", [S]), const_i64("two_s", [2 * S]),
                    const_i64("axis1", [1]), const_i64("basis_shape", [S, -1])]
    if "gelu" in activations:
        initializers += [const("const_half", np.float32(0.5)), const("const_one", np.float32(1.0)),
                         const("const_inv_sqrt2", np.float32(1 / math.sqrt(2)))]
    nodes = [helper.make_node("Sub", ["x", "x_mean"], ["x_centred"], name="centre"),
             helper.make_node("Div", ["x_centred", "x_std"], ["u"], name="standardise"),
             helper.make_node("Mul", ["q_std", "eps_h"], ["h_scaled"], name="h_scale"),
             helper.make_node("Add", ["q_mean", "h_scaled"], ["h"], name="h")]
    # decoder: Gemm layers on h [n, H] → [n, 2S]
    current = "h"
    for layer in range(len(gen["decoder_hidden"])):
        weight, bias = f"decoder.hidden.{layer}.weight", f"decoder.hidden.{layer}.bias"
        initializers += [const(weight, tensors[weight].numpy()), const(bias, tensors[bias].numpy())]
        nodes.append(helper.make_node("Gemm", [current, weight, bias], [f"dec{layer}_pre"], transB=1,
                                      name=f"dec{layer}_gemm"))
        nodes += _activation_nodes(helper, gen["decoder_activation"], f"dec{layer}_pre", f"dec{layer}_out",
                                   f"dec{layer}")
        current = f"dec{layer}_out"
    initializers += [const("decoder.output.weight", tensors["decoder.output.weight"].numpy()),
                     const("decoder.output.bias", tensors["decoder.output.bias"].numpy())]
    nodes += [
        helper.make_node("Gemm", [current, "decoder.output.weight", "decoder.output.bias"], ["dec_out"], transB=1,
                         name="dec_out_gemm"),
        helper.make_node("Slice", ["dec_out", "zero_s", "s_s", "axis1"], ["a_mean"], name="a_mean"),
        helper.make_node("Slice", ["dec_out", "s_s", "two_s", "axis1"], ["a_raw"], name="a_raw"),
        helper.make_node("Softplus", ["a_raw"], ["a_soft"], name="a_softplus"),
        helper.make_node("Add", ["a_soft", "min_std"], ["a_std"], name="a_std"),
        helper.make_node("Mul", ["a_std", "eps_a"], ["a_noise"], name="a_noise"),
        helper.make_node("Add", ["a_mean", "a_noise"], ["a"], name="a"),
    ]
    # bases: layer l weights [S, out, in] → MatMul(u [m, in] or [S, m, in], Wᵀ [S, in, out]) + b [S, 1, out]
    network = MLP(p, gen["basis_hidden"], 1, gen["basis_activation"])
    layers = network.unpack(tensors["basis.weights"])
    current = "u"
    for layer, (weight, bias) in enumerate(layers):
        w_name, b_name = f"basis.layer{layer}.weight_t", f"basis.layer{layer}.bias"
        initializers += [const(w_name, weight.transpose(1, 2).numpy()), const(b_name, bias.unsqueeze(1).numpy())]
        nodes += [helper.make_node("MatMul", [current, w_name], [f"basis{layer}_mm"], name=f"basis{layer}_matmul"),
                  helper.make_node("Add", [f"basis{layer}_mm", b_name], [f"basis{layer}_pre"], name=f"basis{layer}_add")]
        current = f"basis{layer}_pre"
        if layer < len(layers) - 1:
            nodes += _activation_nodes(helper, gen["basis_activation"], current, f"basis{layer}_out", f"basis{layer}")
            current = f"basis{layer}_out"
    nodes += [helper.make_node("Reshape", [current, "basis_shape"], ["phi_t"], name="phi_t"),  # [S, m]
              helper.make_node("MatMul", ["a", "phi_t"], ["g"], name="g"),
              helper.make_node("Mul", ["g", "y_std"], ["g_scaled"], name="y_scale"),
              helper.make_node("Add", ["g_scaled", "y_mean"], [OUTPUT_NAME], name="y_shift")]
    graph = helper.make_graph(
        nodes, "parvis_spg_sampler",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", p]),
         helper.make_tensor_value_info("eps_h", TensorProto.FLOAT, ["n", H]),
         helper.make_tensor_value_info("eps_a", TensorProto.FLOAT, ["n", S])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["n", "m"])],
        initializer=initializers,
    )
    return _serialise(graph, config, "Parvis function-space sampler: function draws [n, m] at inputs x [m, p] from "
                      f"standard-normal eps_h [n, H] and eps_a [n, S]. Draw them as {config['noise']['draw']}.")


def _serialise(graph: Any, config: dict[str, Any], doc: str) -> bytes:
    """The checked model (graph: an onnx GraphProto) with the sampler's config as a property, serialised
    deterministically."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, producer_name="parvis", producer_version="1",
                              opset_imports=[helper.make_opsetid("", OPSET)], doc_string=doc)
    model.ir_version = IR_VERSION
    onnx.helper.set_model_props(model, {"parvis.sampler_config": json.dumps(config, sort_keys=True)})
    onnx.checker.check_model(model)
    return model.SerializeToString(deterministic=True)
