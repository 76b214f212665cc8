//! `Step::Reference`: ops without a native kernel, run by aoc-ir's
//! reference interpreter (feature `reference`). Each step's one-op `.air`
//! function is parsed and verified once, at load.

use aoc_ir::bytes::{decode, encode};
use aoc_ir::interp::{NoWeights, run};
use aoc_ir::module::Func;
use aoc_ir::tensor::Tensor;

use super::RuntimeError;
use super::steps::Spaces;
use crate::plan::{Buf, Plan, Step};

/// The parsed functions of a plan's reference steps, by step index.
pub(crate) struct Prepared {
    funcs: Vec<Option<Func>>,
}

impl Prepared {
    pub fn new(file: &str, plan: &Plan) -> Result<Prepared, RuntimeError> {
        let mut funcs = Vec::new();
        for (i, step) in plan.steps.iter().enumerate() {
            let Step::Reference { air, inputs, outputs } = step else {
                funcs.push(None);
                continue;
            };
            let bad = |m: String| RuntimeError::new(format!("{file}: step {i} ({}): {m}", plan.origins[i]));
            let (mut module, diags) = aoc_ir::parse::parse(air);
            let mut diags: Vec<_> = diags.into_iter().filter(|d| d.is_error()).collect();
            if diags.is_empty() {
                diags = aoc_ir::verify::verify_module(&module).into_iter().filter(|d| d.is_error()).collect();
            }
            if let Some(d) = diags.first() {
                return Err(bad(format!("its reference op does not verify: {}", d.message)));
            }
            if module.funcs.len() != 1 {
                return Err(bad("its reference op must be one function".to_string()));
            }
            let f = module.funcs.remove(0);
            if f.params().len() != inputs.len() || f.results().len() != outputs.len() {
                return Err(bad("its buffers do not match its function".to_string()));
            }
            for (&p, b) in f.params().iter().zip(inputs) {
                check_len(&f, f.ty(p), b).map_err(&bad)?;
            }
            for (&r, b) in f.results().iter().zip(outputs) {
                check_len(&f, f.ty(r), b).map_err(&bad)?;
            }
            funcs.push(Some(f));
        }
        Ok(Prepared { funcs })
    }

    pub fn run(&self, i: usize, inputs: &[Buf], outputs: &[Buf], sp: &Spaces) -> Result<(), String> {
        let ins: Vec<&[u8]> = inputs.iter().map(|b| sp.bytes(b)).collect();
        let outs = self.run_bytes(i, &ins)?;
        for (bytes, b) in outs.iter().zip(outputs) {
            sp.bytes_mut(b).copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Runs reference step `i` on its inputs' bytes; returns its outputs'.
    pub fn run_bytes(&self, i: usize, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
        let f = self.funcs[i].as_ref().ok_or("internal error: reference step not prepared")?;
        let mut args = Vec::new();
        for (&p, bytes) in f.params().iter().zip(inputs) {
            let ty = f.ty(p).clone();
            let data = decode(ty.elem.storage(), bytes)?;
            args.push(Tensor { ty, data });
        }
        let outs = run(f, args, &NoWeights).map_err(|d| d.message)?;
        Ok(outs.iter().map(|t| encode(t.ty.elem.storage(), &t.data)).collect())
    }
}

/// The host items of a GPU plan, prepared as reference steps.
#[cfg(feature = "cuda")]
pub(crate) struct HostSteps {
    prepared: Prepared,
    /// For each GPU item, its index among the host steps.
    index: Vec<Option<usize>>,
}

#[cfg(feature = "cuda")]
impl HostSteps {
    pub fn new(file: &str, plan: &crate::gpu_plan::GpuPlan) -> Result<HostSteps, RuntimeError> {
        let mut steps = Vec::new();
        let mut origins = Vec::new();
        let mut index = Vec::new();
        for (item, origin) in plan.items.iter().zip(&plan.origins) {
            if let crate::gpu_plan::GpuItem::Host { step } = item
                && !step.is_control()
            {
                index.push(Some(steps.len()));
                steps.push(step.clone());
                origins.push(origin.clone());
            } else {
                index.push(None);
            }
        }
        let prepared = Prepared::new(file, &Plan { steps, origins })?;
        Ok(HostSteps { prepared, index })
    }

    /// Runs GPU item `item` (a host step) on its inputs' bytes.
    pub fn run(&self, item: usize, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
        let i = self.index[item].ok_or("internal error: not a host item")?;
        self.prepared.run_bytes(i, inputs)
    }
}

fn check_len(_f: &Func, ty: &aoc_ir::types::TensorType, b: &Buf) -> Result<(), String> {
    let want = ty.num_elements() as u64 * (ty.elem.storage().bits() as u64).div_ceil(8);
    if want != b.len {
        return Err(format!("a {ty} buffer of {} bytes (needs {want})", b.len));
    }
    Ok(())
}
