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
        let f = self.funcs[i].as_ref().ok_or("internal error: reference step not prepared")?;
        let mut args = Vec::new();
        for (&p, b) in f.params().iter().zip(inputs) {
            let ty = f.ty(p).clone();
            let data = decode(ty.elem.storage(), sp.bytes(b))?;
            args.push(Tensor { ty, data });
        }
        let outs = run(f, args, &NoWeights).map_err(|d| d.message)?;
        for (t, b) in outs.iter().zip(outputs) {
            let bytes = encode(t.ty.elem.storage(), &t.data);
            sp.bytes_mut(b).copy_from_slice(&bytes);
        }
        Ok(())
    }
}

fn check_len(_f: &Func, ty: &aoc_ir::types::TensorType, b: &Buf) -> Result<(), String> {
    let want = ty.num_elements() as u64 * (ty.elem.storage().bits() as u64).div_ceil(8);
    if want != b.len {
        return Err(format!("a {ty} buffer of {} bytes (needs {want})", b.len));
    }
    Ok(())
}
