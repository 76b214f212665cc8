//! The fallback for ops without a native kernel: the op, alone in a
//! one-op `.air` function, runs on the reference interpreter inside the
//! runtime (its `reference` feature). Operands arrive in the identity order
//! (constants as weights); results leave in the identity order.

use aoc_ir::module::{Func, Module, OpData};
use aoc_ir::print::print_module;
use aoc_plan::plan::Step;

use super::{Lower, identity};

impl Lower<'_> {
    pub(crate) fn lower_reference(&mut self, op: &OpData) -> Result<(), String> {
        let mut f = Func::new("op");
        let mut params = Vec::new();
        let mut inputs = Vec::new();
        for (i, &v) in op.operands.iter().enumerate() {
            let ty = self.ty(v).clone();
            params.push(f.add_param(&format!("a{i}"), ty.clone(), op.loc.clone()));
            inputs.push(self.materialize(v, &identity(ty.rank()))?);
        }
        let results: Vec<(String, aoc_ir::types::TensorType)> = op
            .results
            .iter()
            .enumerate()
            .map(|(i, &r)| (format!("r{i}"), self.ty(r).clone()))
            .collect();
        let id = f.push_op_unchecked(op.opcode, params, op.attrs.clone(), results, op.loc.clone());
        let steps = aoc_ir::ops::fused::epilogue(self.func, op)?;
        aoc_ir::ops::fused::set_epilogue(&mut f, id, &steps)?;
        let rs = f.ops[id].results.clone();
        f.set_return(rs);
        let air = print_module(&Module { weights: vec![], funcs: vec![f] });
        let mut outputs = Vec::new();
        for &r in &op.results {
            let ty = self.ty(r).clone();
            let b = self.alloc(&ty)?;
            self.define(r, b, identity(ty.rank()));
            outputs.push(b);
        }
        let name = op.opcode.name().to_string();
        match self.report.reference_ops.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => self.report.reference_ops.push((name, 1)),
        }
        self.push(Step::Reference { air, inputs, outputs });
        Ok(())
    }
}
