//! Cost models for extraction.
//!
//! A `CostModel` prices one node given its operand and result types. The
//! first model is a roofline estimate per target: `max(flops / peak,
//! bytes / bandwidth) + overhead`, with per-target constants. Measured costs
//! replace estimates by wrapping a model in `Measured`, keyed by
//! `op_key` (op mnemonic, attributes and types), so tuning results plug in
//! without touching extraction.
//!
//! Invariant: every cost is finite and strictly positive, so extraction
//! never prefers a cycle and an extra op always costs something.

use super::node::OpAttrs;
use aoc_ir::ops::kind::{Conv, OpCost, OpKind};
use aoc_ir::{Opcode, TensorType, Trait};
use std::collections::HashMap;

/// What a cost model sees of one node.
pub enum CostNode<'a> {
    /// A function parameter: already in memory.
    Param(&'a TensorType),
    /// A constant of this type (read from memory at run time).
    Const(&'a TensorType),
    Op {
        opcode: Opcode,
        attrs: &'a OpAttrs,
        operands: &'a [&'a TensorType],
        result: &'a TensorType,
    },
}

/// Prices nodes for extraction (seconds, or any unit consistent per model).
pub trait CostModel {
    fn name(&self) -> &str;
    /// The cost of computing this node once; finite and > 0.
    fn cost(&self, node: &CostNode) -> f64;
}

/// Bytes of a tensor (sub-byte types round up per element).
pub fn bytes(t: &TensorType) -> f64 {
    t.num_elements() as f64 * (t.elem.storage().bits() as f64 / 8.0).max(1.0)
}

/// Floating-point (or integer) operations an op performs, estimated from
/// types by its kind (`OpKind::flops`); Winograd convolutions count their
/// transforms too.
pub fn flops(
    opcode: Opcode,
    attrs: &OpAttrs,
    operands: &[&TensorType],
    result: &TensorType,
) -> f64 {
    let kind = opcode.kind();
    if let OpKind::Conv(Conv::Winograd, _) = kind {
        return winograd_flops(attrs, operands, result);
    }
    let trans_a = matches!(attrs.get("trans_a"), Some(aoc_ir::Attr::Bool(true)));
    OpKind::flops(&OpCost { kind, trans_a, operands, result })
}

/// Winograd F(m x m, 3 x 3) as (m, tiles, C_in, C_out) from its types.
fn winograd_shape(attrs: &OpAttrs, operands: &[&TensorType], result: &TensorType) -> Option<(f64, f64, f64, f64)> {
    let m = match attrs.get("tile") {
        Some(aoc_ir::Attr::Int(m)) if m > 0 => m as usize,
        _ => return None,
    };
    let u = operands.get(1)?;
    let [n, k, oh, ow] = result.shape[..] else { return None };
    let tiles = n * oh.div_ceil(m) * ow.div_ceil(m);
    let c = *u.shape.get(3)?;
    Some((m as f64, tiles as f64, c as f64, k as f64))
}

/// Winograd's operations: (m+2)^2 multiply-adds per tile and channel pair
/// (instead of 9 m^2), plus the input transform per tile and input channel
/// and the output transform per tile and output channel (dense matrix
/// products, as counted here).
fn winograd_flops(attrs: &OpAttrs, operands: &[&TensorType], result: &TensorType) -> f64 {
    let Some((m, tiles, c, k)) = winograd_shape(attrs, operands, result) else {
        return 4.0 * result.num_elements() as f64;
    };
    let a = m + 2.0;
    let products = 2.0 * tiles * a * a * c * k;
    let input_transform = tiles * c * 4.0 * a * a * a;
    let output_transform = tiles * k * 2.0 * (m * a * a + m * m * a);
    products + input_transform + output_transform
}

/// Winograd's extra memory traffic: the transformed input tiles `V`
/// (tiles x (m+2)^2 x C_in) and products `M` (tiles x (m+2)^2 x C_out), each
/// written once and read once, in f32.
fn winograd_scratch_bytes(attrs: &OpAttrs, operands: &[&TensorType], result: &TensorType) -> f64 {
    let Some((m, tiles, c, k)) = winograd_shape(attrs, operands, result) else {
        return 0.0;
    };
    let a = m + 2.0;
    2.0 * 4.0 * tiles * a * a * (c + k)
}

/// A roofline estimate with per-target constants.
#[derive(Clone, Debug)]
pub struct Roofline {
    pub target: String,
    /// Peak arithmetic throughput, operations per second.
    pub peak_flops: f64,
    /// Memory bandwidth, bytes per second.
    pub bandwidth: f64,
    /// Fixed cost per op (kernel launch, loop set-up), seconds.
    pub overhead: f64,
    /// Bandwidth of a kernel's own scratch (Winograd's transformed tiles):
    /// the CPU kernel blocks it to stay in L2, GPU kernels spill it to
    /// memory. Bytes per second.
    pub scratch_bandwidth: f64,
}

impl Roofline {
    /// Constants for a target name (`sm_90`, `sm_86`, `x86-64-v4`), or
    /// `None` for an unknown one.
    pub fn for_target(target: &str) -> Option<Roofline> {
        let (peak_flops, bandwidth, overhead) = match target {
            // H200: ~67 TFLOP/s fp32 (CUDA cores), 4.8 TB/s HBM3e, ~3 µs launch.
            "sm_90" | "sm_90a" => (67e12, 4.8e12, 3e-6),
            // Ampere consumer (RTX 3090 class): ~35 TFLOP/s fp32, 936 GB/s.
            "sm_86" | "sm_80" => (35e12, 0.936e12, 3e-6),
            // 2 cores, AVX-512: 2 FMA units x 16 lanes x 2 flops x 3 GHz per core.
            "x86-64-v4" | "x86-64" | "cpu" => (2.0 * 2.0 * 16.0 * 2.0 * 3e9, 20e9, 0.2e-6),
            _ => return None,
        };
        // CPU kernels keep scratch in L2 (~10x DRAM bandwidth, measured:
        // Winograd 2-3x faster than im2col on ResNet layers, 2 cores).
        let scratch_bandwidth = if target.starts_with("sm_") { bandwidth } else { 10.0 * bandwidth };
        Some(Roofline {
            target: target.to_string(),
            peak_flops,
            bandwidth,
            overhead,
            scratch_bandwidth,
        })
    }
}

impl Default for Roofline {
    fn default() -> Self {
        Roofline::for_target("x86-64-v4").expect("a known target")
    }
}

impl CostModel for Roofline {
    fn name(&self) -> &str {
        &self.target
    }

    fn cost(&self, node: &CostNode) -> f64 {
        match node {
            // Parameters are given; a tiny cost keeps every cost positive.
            CostNode::Param(_) => 1e-12,
            // A constant is read by the ops that use it, which pay for it.
            CostNode::Const(_) => 1e-12,
            CostNode::Op {
                opcode,
                attrs,
                operands,
                result,
            } => {
                // Views (reshape, flatten, identity) move no bytes: they only
                // cost their overhead.
                let moved = if opcode.info().has_trait(Trait::View) {
                    0.0
                } else {
                    operands.iter().map(|t| bytes(t)).sum::<f64>() + bytes(result)
                };
                let mut memory = moved / self.bandwidth;
                if *opcode == Opcode::WinogradConv2d {
                    memory += winograd_scratch_bytes(attrs, operands, result) / self.scratch_bandwidth;
                }
                let f = flops(*opcode, attrs, operands, result);
                self.overhead + (f / self.peak_flops).max(memory)
            }
        }
    }
}

/// A key identifying an op instance for measured costs: mnemonic, attributes
/// and operand types.
pub fn op_key(opcode: Opcode, attrs: &OpAttrs, operands: &[&TensorType]) -> String {
    let mut s = opcode.name().to_string();
    for (n, v) in attrs.values.iter() {
        s.push_str(&format!(" {n}={}", v.to_attr()));
    }
    for t in operands {
        s.push_str(&format!(" {t}"));
    }
    s
}

/// Measured costs where known, another model elsewhere.
pub struct Measured<M: CostModel> {
    pub table: HashMap<String, f64>,
    pub fallback: M,
}

impl<M: CostModel> CostModel for Measured<M> {
    fn name(&self) -> &str {
        self.fallback.name()
    }
    fn cost(&self, node: &CostNode) -> f64 {
        if let CostNode::Op {
            opcode,
            attrs,
            operands,
            ..
        } = node
            && let Some(&c) = self.table.get(&op_key(*opcode, attrs, operands))
            && c.is_finite()
            && c > 0.0
        {
            return c;
        }
        self.fallback.cost(node)
    }
}
