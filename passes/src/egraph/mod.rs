//! The egg bridge: aoc functions as e-graphs and back.
//!
//! `node` is the language (derived from the op table), `analysis` the e-class
//! analysis (types, small constant values, locations), `convert` the
//! conversion in both directions with extraction (`choose` picks the nodes),
//! `pattern` the rules' left-hand sides (repeated variables included), `cost`
//! the cost models and `saturate` the bounded saturation loop. Only this crate knows egg.

pub mod analysis;
mod choose;
pub mod convert;
pub mod cost;
pub mod node;
pub mod pattern;
pub mod saturate;

pub use analysis::{ClassData, Graph, TensorAnalysis, add_computed_const, const_tensor};
pub use cost::{CostModel, Roofline};
pub use node::{Node, OpAttrs};
pub use pattern::Lhs;
pub use saturate::{Limits, Optimized, SaturationStats, optimize_func, optimize_func_selected, optimize_func_with};

/// A rewrite over aoc's e-graph.
pub type Rewrite = egg::Rewrite<Node, TensorAnalysis>;

#[cfg(test)]
mod tests;
