//! Tensors in and out of `.aoc` artifacts, the same for CPU and GPU
//! artifacts: `.npy` files bound to an artifact's inputs (by name, then in
//! order, exactly like `aoc run` on `.air`) and encoded to the bytes the
//! runtime takes, and output bytes decoded back to tensors, all by the
//! manifest's `TensorSpec`s.

use std::path::Path;

use aoc_ir::tensor::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use aoc_runtime::artifact::TensorSpec;

use crate::driver::InputArg;
use crate::npy;

fn spec_type(dtype: &str, shape: &[u64]) -> Result<TensorType, String> {
    let s = Scalar::from_name(dtype).ok_or_else(|| format!("error: the artifact uses dtype {dtype}, which aoc cannot read"))?;
    Ok(TensorType::new(shape.iter().map(|&d| d as usize).collect::<Vec<_>>(), s))
}

/// Binds `.npy` files to an artifact's inputs `specs` (by name, then in
/// order) and returns their bytes.
pub fn bind_inputs(specs: &[TensorSpec], inputs: &[InputArg]) -> Result<Vec<Vec<u8>>, String> {
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; specs.len()];
    let mut unnamed = Vec::new();
    let names = || specs.iter().map(|s| format!("{} ({} {:?})", s.name, s.dtype, s.shape)).collect::<Vec<_>>().join(", ");
    for a in inputs {
        let t = npy::read_npy(&a.path).map_err(|m| format!("error: {m}"))?;
        let i = match &a.name {
            Some(n) => specs
                .iter()
                .position(|s| &s.name == n)
                .ok_or_else(|| format!("error: unknown input `{n}`; the artifact's inputs are: {}", names()))?,
            None => {
                unnamed.push((a.path.clone(), t));
                continue;
            }
        };
        if slots[i].is_some() {
            return Err(format!("error: input `{}` is given twice", specs[i].name));
        }
        slots[i] = Some(encode_input(&a.path, t, &specs[i].dtype, &specs[i].shape, &specs[i].name)?);
    }
    let mut unnamed = unnamed.into_iter();
    for (i, slot) in slots.iter_mut().enumerate() {
        if slot.is_none()
            && let Some((p, t)) = unnamed.next()
        {
            *slot = Some(encode_input(&p, t, &specs[i].dtype, &specs[i].shape, &specs[i].name)?);
        }
    }
    if unnamed.next().is_some() {
        return Err(format!("error: too many inputs; the artifact takes {}: {}", specs.len(), names()));
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| {
                format!(
                    "error: missing input {} ({} {:?}); give it with --input {}=PATH.npy",
                    specs[i].name, specs[i].dtype, specs[i].shape, specs[i].name
                )
            })
        })
        .collect()
}

fn encode_input(path: &Path, t: Tensor, dtype: &str, shape: &[u64], name: &str) -> Result<Vec<u8>, String> {
    let ty = spec_type(dtype, shape)?;
    let t = npy::conform(t, &ty).map_err(|m| format!("error: {}: input {name}: {m}", path.display()))?;
    Ok(aoc_ir::bytes::encode(ty.elem.storage(), &t.data))
}

/// Output bytes as tensors of the artifact's output `specs`.
pub fn decode_outputs(specs: &[TensorSpec], outs: Vec<Vec<u8>>) -> Result<Vec<(String, Tensor)>, String> {
    specs
        .iter()
        .zip(outs)
        .map(|(spec, b)| {
            let ty = spec_type(&spec.dtype, &spec.shape)?;
            let data = aoc_ir::bytes::decode(ty.elem.storage(), &b).map_err(|m| format!("error: output {}: {m}", spec.name))?;
            Ok((spec.name.clone(), Tensor { ty, data }))
        })
        .collect()
}

/// An input or output as `aoc explain --json` shows it.
pub fn spec_json(t: &TensorSpec) -> serde_json::Value {
    serde_json::json!({"name": t.name, "dtype": t.dtype, "shape": t.shape})
}
