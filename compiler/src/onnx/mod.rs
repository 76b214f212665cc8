//! ONNX import: `.onnx` bytes -> one `func @main` plus the weights for the
//! safetensors file beside the `.air`.
//!
//! Layout: `proto` (the protobuf messages), `tensors` (element types and
//! tensor payloads), `import` (the graph walk: initializers, inputs, nodes
//! in order, outputs), `context` (the state handlers build ops through:
//! `Cx`, `Node`, `V`), `fold` (import-time constant folding through the
//! op table's hooks), and one file of op handlers per family (`constants`,
//! `elementwise`, `nn`, `recurrent`, `composite`, `shape`, `quant`). [`HANDLERS`] is the one list of
//! ONNX op types the importer maps. Dependencies point one way: `import`
//! uses the handlers (through [`HANDLERS`]) and `context`; handlers use
//! `context`; `context` uses `fold`, which uses only `aoc-ir`.
//!
//! `If`, `Loop` and `Scan` are not in [`HANDLERS`]: the graph walk imports
//! them (`import_if`, `import_loop`, `import::scan`), since their subgraphs
//! become regions (an `If` whose condition is known at import time becomes
//! its chosen branch's nodes; a `Scan` is a `core.loop`).
//! `export` goes the other way (`aoc export --format onnx`).
//!
//! Invariants: decoding or importing never panics on bad bytes; the result
//! passes `aoc_ir::verify::verify_module`; every op is located at the node
//! it came from; errors name the op type, node and opset.

mod activation;
mod attention;
mod composite;
mod constants;
pub(crate) mod context;
mod elementwise;
mod external;
pub mod export;
pub(crate) mod fold;
mod import;
mod nn;
pub mod proto;
mod quant;
mod recurrent;
mod shape;
mod tensors;
#[cfg(test)]
mod tests;

pub use import::MIN_OPSET;
use aoc_ir::interp::MapWeights;
use aoc_ir::attr::Attrs;
use aoc_ir::{Diagnostic, Location, Module, Opcode, Tensor};
use context::{Cx, Node, R, V};
use prost::Message;

/// What the importer needs besides the model.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Fixed shapes for inputs (overriding, or fixing symbolic dimensions).
    pub input_shapes: Vec<(String, Vec<usize>)>,
    /// Inputs fixed to values (row-major), which become constants.
    pub input_values: Vec<(String, Vec<f64>)>,
    /// The name of the `weights @name` declaration.
    pub weights_name: String,
    /// The file the declaration names, e.g. `model.safetensors`.
    pub weights_path: String,
    /// Constants with at most this many elements stay inline `dense<>`.
    pub inline_limit: usize,
    /// The model's folder, where tensors stored as external data are read
    /// from (`None`: such tensors are an error).
    pub model_dir: Option<std::path::PathBuf>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            input_shapes: vec![],
            input_values: vec![],
            weights_name: "weights".to_string(),
            weights_path: "model.safetensors".to_string(),
            inline_limit: 16,
            model_dir: None,
        }
    }
}

/// An imported model.
#[derive(Clone, Debug)]
pub struct Imported {
    pub module: Module,
    /// Key -> tensor for the safetensors file, in first-use order.
    pub weights: Vec<(String, Tensor)>,
    /// Things the model gets wrong that do not stop the import (a declared
    /// output shape the graph contradicts), for the driver to print.
    pub warnings: Vec<String>,
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
    let mut model = proto::ModelProto::decode(bytes).map_err(|e| {
        Diagnostic::error(format!("not a valid ONNX model: {e}"), Location::default())
    })?;
    if let Some(dir) = &opts.model_dir {
        external::resolve(&mut model, dir).map_err(|m| Diagnostic::error(m, Location::default()))?;
    }
    import::import_graph(&model, opts)
}

/// Decodes a serialized `TensorProto` (the `.pb` files of ONNX test data).
pub fn tensor_from_proto_bytes(bytes: &[u8]) -> Result<Tensor, String> {
    let p =
        proto::TensorProto::decode(bytes).map_err(|e| format!("not a valid ONNX tensor: {e}"))?;
    let name = p.name.clone().unwrap_or_default();
    tensors::tensor_from_proto(&p, &format!("tensor `{name}`"))
}

/// How one ONNX op type is imported.
#[derive(Copy, Clone)]
enum Handler {
    /// Exactly one op of the table: the node's inputs are its operands in
    /// order, and neither takes attributes.
    Op(Opcode),
    /// One op of the table whose attributes the function reads off the node.
    OpWith(Opcode, fn(&Node) -> Attrs),
    /// Anything else: a decomposition, a fold, an attribute-heavy mapping.
    Fn(fn(&mut Cx, &Node) -> R<Vec<V>>),
}

impl Handler {
    fn call(self, cx: &mut Cx, n: &Node) -> R<Vec<V>> {
        match self {
            Handler::Op(opcode) => elementwise::direct(cx, n, opcode, Attrs::new()),
            Handler::OpWith(opcode, attrs) => elementwise::direct(cx, n, opcode, attrs(n)),
            Handler::Fn(f) => f(cx, n),
        }
    }
}

/// Every ONNX op type the importer maps (default domain), and its handler.
/// The one list: `supported_op_types` and the dispatch both read it.
const HANDLERS: &[(&str, Handler)] = &[
    // constants and shape arithmetic (always folded)
    ("Constant", Handler::Fn(constants::constant)),
    ("ConstantOfShape", Handler::Fn(constants::constant_of_shape)),
    ("Shape", Handler::Fn(constants::shape)),
    ("Size", Handler::Fn(constants::size)),
    ("Range", Handler::Fn(constants::range)),
    ("NonZero", Handler::Fn(constants::non_zero)),
    // elementwise
    ("Neg", Handler::Op(Opcode::Neg)),
    ("Abs", Handler::Op(Opcode::Abs)),
    ("Exp", Handler::Op(Opcode::Exp)),
    ("Log", Handler::Op(Opcode::Log)),
    ("Sqrt", Handler::Op(Opcode::Sqrt)),
    ("Reciprocal", Handler::Op(Opcode::Reciprocal)),
    ("Erf", Handler::Op(Opcode::Erf)),
    ("Tanh", Handler::Op(Opcode::Tanh)),
    ("Sigmoid", Handler::Op(Opcode::Sigmoid)),
    ("Floor", Handler::Op(Opcode::Floor)),
    ("Ceil", Handler::Op(Opcode::Ceil)),
    ("Round", Handler::Op(Opcode::Round)),
    ("Sin", Handler::Op(Opcode::Sin)),
    ("Cos", Handler::Op(Opcode::Cos)),
    ("Relu", Handler::Op(Opcode::Relu)),
    ("HardSwish", Handler::Op(Opcode::HardSwish)),
    ("Gelu", Handler::OpWith(Opcode::Gelu, elementwise::gelu_attrs)),
    ("LeakyRelu", Handler::OpWith(Opcode::LeakyRelu, elementwise::leaky_relu_attrs)),
    ("HardSigmoid", Handler::OpWith(Opcode::HardSigmoid, elementwise::hard_sigmoid_attrs)),
    ("Add", Handler::Op(Opcode::Add)),
    ("Sub", Handler::Op(Opcode::Sub)),
    ("Mul", Handler::Op(Opcode::Mul)),
    ("Div", Handler::Op(Opcode::Div)),
    ("Pow", Handler::Op(Opcode::Pow)),
    ("PRelu", Handler::Op(Opcode::Prelu)),
    ("Equal", Handler::Op(Opcode::Equal)),
    ("Less", Handler::Op(Opcode::Less)),
    ("Greater", Handler::Op(Opcode::Greater)),
    ("LessOrEqual", Handler::Fn(elementwise::compare_or_equal)),
    ("GreaterOrEqual", Handler::Fn(elementwise::compare_or_equal)),
    ("Not", Handler::Fn(elementwise::logic)),
    ("And", Handler::Fn(elementwise::logic)),
    ("Or", Handler::Fn(elementwise::logic)),
    ("Xor", Handler::Fn(elementwise::logic)),
    ("Max", Handler::Fn(elementwise::variadic)),
    ("Min", Handler::Fn(elementwise::variadic)),
    ("Sum", Handler::Fn(elementwise::variadic)),
    ("Mean", Handler::Fn(elementwise::variadic)),
    ("Mod", Handler::Fn(elementwise::modulo)),
    ("Clip", Handler::Fn(elementwise::clip)),
    ("Where", Handler::Fn(elementwise::where_)),
    ("Cast", Handler::Fn(elementwise::cast)),
    ("CastLike", Handler::Fn(elementwise::cast)),
    ("Softmax", Handler::Fn(elementwise::softmax)),
    ("LogSoftmax", Handler::Fn(elementwise::softmax)),
    ("Identity", Handler::Fn(elementwise::identity)),
    ("Dropout", Handler::Fn(elementwise::dropout)),
    // activations, predicates and normalizations without an op of their own
    ("Softplus", Handler::Fn(activation::activation)),
    ("Softsign", Handler::Fn(activation::activation)),
    ("Elu", Handler::Fn(activation::activation)),
    ("Celu", Handler::Fn(activation::activation)),
    ("Selu", Handler::Fn(activation::activation)),
    ("ThresholdedRelu", Handler::Fn(activation::activation)),
    ("Mish", Handler::Fn(activation::activation)),
    ("Swish", Handler::Fn(activation::activation)),
    ("Shrink", Handler::Fn(activation::activation)),
    ("Sign", Handler::Fn(activation::sign)),
    ("IsNaN", Handler::Fn(activation::is_special)),
    ("IsInf", Handler::Fn(activation::is_special)),
    ("LpNormalization", Handler::Fn(activation::normalization)),
    ("MeanVarianceNormalization", Handler::Fn(activation::normalization)),
    ("RMSNormalization", Handler::Fn(activation::normalization)),
    ("Trilu", Handler::Fn(activation::trilu)),
    ("Tile", Handler::Fn(activation::tile)),
    ("Hardmax", Handler::Fn(activation::hardmax)),
    ("Attention", Handler::Fn(attention::attention)),
    // neural-network ops
    ("Conv", Handler::Fn(nn::conv)),
    ("ConvTranspose", Handler::Fn(nn::conv_transpose)),
    ("MatMul", Handler::Fn(nn::matmul)),
    ("Gemm", Handler::Fn(nn::gemm)),
    ("BatchNormalization", Handler::Fn(nn::batch_norm)),
    ("LayerNormalization", Handler::Fn(nn::layer_norm)),
    ("MaxPool", Handler::Fn(nn::pool)),
    ("AveragePool", Handler::Fn(nn::pool)),
    ("GlobalAveragePool", Handler::Fn(nn::global_pool)),
    ("GlobalMaxPool", Handler::Fn(nn::global_pool)),
    ("ReduceSum", Handler::Fn(nn::reduce)),
    ("ReduceMean", Handler::Fn(nn::reduce)),
    ("ReduceMax", Handler::Fn(nn::reduce)),
    ("ReduceMin", Handler::Fn(nn::reduce)),
    ("ReduceSumSquare", Handler::Fn(nn::reduce)),
    ("ReduceL1", Handler::Fn(nn::reduce)),
    ("ReduceL2", Handler::Fn(nn::reduce)),
    ("ReduceLogSum", Handler::Fn(nn::reduce)),
    ("ReduceLogSumExp", Handler::Fn(nn::reduce)),
    ("GridSample", Handler::Fn(nn::grid_sample)),
    // compositions of aoc ops
    ("DepthToSpace", Handler::Fn(composite::depth_space)),
    ("SpaceToDepth", Handler::Fn(composite::depth_space)),
    ("InstanceNormalization", Handler::Fn(composite::instance_group_norm)),
    ("GroupNormalization", Handler::Fn(composite::instance_group_norm)),
    ("CumSum", Handler::Fn(composite::cumsum)),
    ("ArgMax", Handler::Fn(composite::arg_extreme)),
    ("ArgMin", Handler::Fn(composite::arg_extreme)),
    ("OneHot", Handler::Fn(composite::one_hot)),
    ("GatherElements", Handler::Fn(composite::gather_elements)),
    ("GatherND", Handler::Fn(composite::gather_nd)),
    ("ScatterElements", Handler::Fn(composite::scatter_elements)),
    ("Scatter", Handler::Fn(composite::scatter_elements)),
    ("ScatterND", Handler::Fn(composite::scatter_nd)),
    ("TopK", Handler::Fn(composite::top_k)),
    ("Einsum", Handler::Fn(composite::einsum)),
    // recurrent layers
    ("RNN", Handler::Fn(recurrent::recurrent)),
    ("GRU", Handler::Fn(recurrent::recurrent)),
    ("LSTM", Handler::Fn(recurrent::recurrent)),
    // shape and data movement
    ("Reshape", Handler::Fn(shape::reshape)),
    ("Transpose", Handler::Fn(shape::transpose)),
    ("Flatten", Handler::Fn(shape::flatten)),
    ("Concat", Handler::Fn(shape::concat)),
    ("Slice", Handler::Fn(shape::slice)),
    ("Pad", Handler::Fn(shape::pad)),
    ("Gather", Handler::Fn(shape::gather)),
    ("Expand", Handler::Fn(shape::expand)),
    ("Split", Handler::Fn(shape::split)),
    ("Squeeze", Handler::Fn(shape::squeeze)),
    ("Unsqueeze", Handler::Fn(shape::unsqueeze)),
    ("Resize", Handler::Fn(shape::resize)),
    ("Upsample", Handler::Fn(shape::upsample)),
    // quantization
    ("QuantizeLinear", Handler::Fn(quant::quantize_linear)),
    ("DequantizeLinear", Handler::Fn(quant::dequantize_linear)),
];

fn handler(op_type: &str) -> Option<Handler> {
    HANDLERS
        .iter()
        .find(|(n, _)| *n == op_type)
        .map(|(_, h)| *h)
}

/// The op types the graph walk imports itself (their subgraphs become
/// regions), besides [`HANDLERS`].
const CONTROL_OPS: &[&str] = &["If", "Loop", "Scan"];

/// The ONNX op types (default domain) the importer maps.
pub fn supported_op_types() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| HANDLERS.iter().map(|(n, _)| *n).chain(CONTROL_OPS.iter().copied()).collect())
}
