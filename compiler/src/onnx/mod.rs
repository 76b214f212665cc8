//! ONNX import: `.onnx` bytes -> one `func @main` plus the weights for the
//! safetensors file beside the `.air`.
//!
//! Layout: `proto` (the protobuf messages), `tensors` (element types and
//! tensor payloads), `import` (the graph walk: initializers, inputs, nodes
//! in order, outputs), `context` (the state handlers build ops through:
//! `Cx`, `Node`, `V`), `fold` (import-time constant folding through the
//! op table's hooks), and one file of op handlers per family (`constants`,
//! `elementwise`, `nn`, `shape`, `quant`). [`HANDLERS`] is the one list of
//! ONNX op types the importer maps. Dependencies point one way: `import`
//! uses the handlers (through [`HANDLERS`]) and `context`; handlers use
//! `context`; `context` uses `fold`, which uses only `aoc-ir`.
//!
//! Invariants: decoding or importing never panics on bad bytes; the result
//! passes `aoc_ir::verify::verify_module`; every op is located at the node
//! it came from; errors name the op type, node and opset.

mod constants;
mod context;
mod elementwise;
mod fold;
mod import;
mod nn;
pub mod proto;
mod quant;
mod shape;
mod tensors;
#[cfg(test)]
mod tests;

use aoc_ir::interp::MapWeights;
use aoc_ir::{Diagnostic, Location, Module, Tensor};
use context::{Cx, Node, R, V};
use prost::Message;

/// What the importer needs besides the model.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Fixed shapes for inputs (overriding, or fixing symbolic dimensions).
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// The name of the `weights @name` declaration.
    pub weights_name: String,
    /// The file the declaration names, e.g. `model.safetensors`.
    pub weights_path: String,
    /// Constants with at most this many elements stay inline `dense<>`.
    pub inline_limit: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            input_shapes: vec![],
            weights_name: "weights".to_string(),
            weights_path: "model.safetensors".to_string(),
            inline_limit: 16,
        }
    }
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct Imported {
    pub module: Module,
    /// Key -> tensor for the safetensors file, in first-use order.
    pub weights: Vec<(String, Tensor)>,
}

impl Imported {
    /// The weights as an interpreter weight source (under the declared
    /// weights name).
    pub fn weight_source(&self) -> MapWeights {
        let file = self
            .module
            .weights
            .first()
            .map_or_else(|| "weights".to_string(), |w| w.name.clone());
        MapWeights(
            self.weights
                .iter()
                .map(|(k, t)| ((file.clone(), k.clone()), t.clone()))
                .collect(),
        )
    }
}

/// Imports an ONNX model.
pub fn import_model(bytes: &[u8], opts: &ImportOptions) -> Result<Imported, Diagnostic> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| {
        Diagnostic::error(format!("not a valid ONNX model: {e}"), Location::default())
    })?;
    import::import_graph(&model, opts)
}

/// Decodes a serialized `TensorProto` (the `.pb` files of ONNX test data).
pub fn tensor_from_proto_bytes(bytes: &[u8]) -> Result<Tensor, String> {
    let p =
        proto::TensorProto::decode(bytes).map_err(|e| format!("not a valid ONNX tensor: {e}"))?;
    let name = p.name.clone().unwrap_or_default();
    tensors::tensor_from_proto(&p, &format!("tensor `{name}`"))
}

type Handler = fn(&mut Cx, &Node) -> R<Vec<V>>;

/// Every ONNX op type the importer maps (default domain), and its handler.
/// The one list: `supported_op_types` and the dispatch both read it.
const HANDLERS: &[(&str, Handler)] = &[
    // constants and shape arithmetic (always folded)
    ("Constant", constants::constant),
    ("ConstantOfShape", constants::constant_of_shape),
    ("Shape", constants::shape),
    ("Size", constants::size),
    ("Range", constants::range),
    // elementwise
    ("Neg", elementwise::unary),
    ("Abs", elementwise::unary),
    ("Exp", elementwise::unary),
    ("Log", elementwise::unary),
    ("Sqrt", elementwise::unary),
    ("Reciprocal", elementwise::unary),
    ("Erf", elementwise::unary),
    ("Tanh", elementwise::unary),
    ("Sigmoid", elementwise::unary),
    ("Floor", elementwise::unary),
    ("Ceil", elementwise::unary),
    ("Relu", elementwise::unary),
    ("HardSwish", elementwise::unary),
    ("Gelu", elementwise::activation),
    ("LeakyRelu", elementwise::activation),
    ("HardSigmoid", elementwise::activation),
    ("Add", elementwise::binary),
    ("Sub", elementwise::binary),
    ("Mul", elementwise::binary),
    ("Div", elementwise::binary),
    ("Pow", elementwise::binary),
    ("PRelu", elementwise::binary),
    ("Equal", elementwise::binary),
    ("Less", elementwise::binary),
    ("Greater", elementwise::binary),
    ("LessOrEqual", elementwise::compare_or_equal),
    ("GreaterOrEqual", elementwise::compare_or_equal),
    ("Not", elementwise::logic),
    ("And", elementwise::logic),
    ("Or", elementwise::logic),
    ("Xor", elementwise::logic),
    ("Max", elementwise::variadic),
    ("Min", elementwise::variadic),
    ("Sum", elementwise::variadic),
    ("Mean", elementwise::variadic),
    ("Mod", elementwise::modulo),
    ("Clip", elementwise::clip),
    ("Where", elementwise::where_),
    ("Cast", elementwise::cast),
    ("CastLike", elementwise::cast),
    ("Softmax", elementwise::softmax),
    ("LogSoftmax", elementwise::softmax),
    ("Identity", elementwise::identity),
    ("Dropout", elementwise::dropout),
    // neural-network ops
    ("Conv", nn::conv),
    ("ConvTranspose", nn::conv_transpose),
    ("MatMul", nn::matmul),
    ("Gemm", nn::gemm),
    ("BatchNormalization", nn::batch_norm),
    ("LayerNormalization", nn::layer_norm),
    ("MaxPool", nn::pool),
    ("AveragePool", nn::pool),
    ("GlobalAveragePool", nn::global_pool),
    ("GlobalMaxPool", nn::global_pool),
    ("ReduceSum", nn::reduce),
    ("ReduceMean", nn::reduce),
    ("ReduceMax", nn::reduce),
    ("ReduceMin", nn::reduce),
    ("ReduceSumSquare", nn::reduce),
    ("ReduceL1", nn::reduce),
    ("ReduceL2", nn::reduce),
    ("ReduceLogSum", nn::reduce),
    ("ReduceLogSumExp", nn::reduce),
    // shape and data movement
    ("Reshape", shape::reshape),
    ("Transpose", shape::transpose),
    ("Flatten", shape::flatten),
    ("Concat", shape::concat),
    ("Slice", shape::slice),
    ("Pad", shape::pad),
    ("Gather", shape::gather),
    ("Expand", shape::expand),
    ("Split", shape::split),
    ("Squeeze", shape::squeeze),
    ("Unsqueeze", shape::unsqueeze),
    ("Resize", shape::resize),
    // quantization
    ("QuantizeLinear", quant::quantize_linear),
    ("DequantizeLinear", quant::dequantize_linear),
];

fn handler(op_type: &str) -> Option<Handler> {
    HANDLERS
        .iter()
        .find(|(n, _)| *n == op_type)
        .map(|(_, h)| *h)
}

/// The ONNX op types (default domain) the importer maps.
pub fn supported_op_types() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| HANDLERS.iter().map(|(n, _)| *n).collect())
}
