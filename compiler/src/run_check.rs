//! `aoc run` conveniences: seeded random inputs (`--random-inputs`) and the
//! comparison of outputs with expected `.npy` files (`--expected DIR`,
//! `--atol`, `--rtol`), as `iree-run-module --expected_output` does.

use std::path::{Path, PathBuf};

use aoc_ir::tensor::Tensor;
use aoc_ir::{Scalar, TensorType};

use crate::driver::{InputArg, load_model};
use crate::opt::Rng;

/// The inputs (name, type) of a model file: an `.aoc` artifact's manifest,
/// or an `.air`/`.onnx` model's entry function.
pub fn model_inputs(path: &Path, input_shapes: &[(String, Vec<usize>)]) -> Result<Vec<(String, TensorType)>, String> {
    if path.extension().is_some_and(|e| e == "aoc") {
        let a = aoc_runtime::artifact::Artifact::open(path).map_err(|e| format!("error: {e}"))?;
        return a
            .manifest()
            .inputs
            .iter()
            .map(|s| {
                let elem = Scalar::from_name(&s.dtype)
                    .ok_or_else(|| format!("error: {}: input `{}` has unknown dtype `{}`", path.display(), s.name, s.dtype))?;
                Ok((s.name.clone(), TensorType::new(s.shape.iter().map(|&d| d as usize).collect::<Vec<usize>>(), elem)))
            })
            .collect();
    }
    let loaded = load_model(path, input_shapes)?;
    let func = loaded.module.entry().ok_or_else(|| format!("error: {} has no function to run", path.display()))?;
    Ok((0..func.params().len()).map(|i| (func.param_name(i).to_string(), func.ty(func.params()[i]).clone())).collect())
}

/// Uniform in [0, 1) from `--verify-rewrites`' splitmix64 generator (the
/// same seed gives the same inputs on every machine).
fn unit(g: &mut Rng) -> f64 {
    (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A seeded random tensor of `ty`: floats uniform in [-1, 1), integers and
/// booleans in {0, 1} (safe as indices and masks), quantized storage over
/// its whole range.
pub fn random_tensor(ty: &TensorType, seed: u64) -> Tensor {
    let mut g = Rng(seed);
    let n = ty.num_elements();
    let storage = ty.elem.storage();
    let values: Vec<f64> = if ty.elem.quant().is_some() {
        let (lo, hi) = storage.int_range().unwrap_or((0, 1));
        (0..n).map(|_| (lo + (unit(&mut g) * (hi - lo + 1) as f64) as i64).min(hi) as f64).collect()
    } else if storage.is_float() {
        (0..n).map(|_| unit(&mut g) * 2.0 - 1.0).collect()
    } else {
        (0..n).map(|_| (g.next_u64() & 1) as f64).collect()
    };
    Tensor::from_f64(ty.clone(), values)
}

/// Random `.npy` inputs, written to a fresh folder, for every input of the
/// model that `given` does not bind (by name, or positionally in order).
/// Returns the folder (remove it when done) and the arguments to add.
pub fn random_inputs(
    path: &Path,
    input_shapes: &[(String, Vec<usize>)],
    given: &[InputArg],
    seed: u64,
) -> Result<(PathBuf, Vec<InputArg>), String> {
    let specs = model_inputs(path, input_shapes)?;
    let named: Vec<&str> = given.iter().filter_map(|a| a.name.as_deref()).collect();
    let mut positional = given.iter().filter(|a| a.name.is_none()).count();
    let dir = std::env::temp_dir().join(format!("aoc-random-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("error: cannot create {}: {e}", dir.display()))?;
    let mut args = vec![];
    for (i, (name, ty)) in specs.iter().enumerate() {
        if named.contains(&name.as_str()) {
            continue;
        }
        if positional > 0 {
            positional -= 1;
            continue;
        }
        let t = random_tensor(ty, seed.wrapping_add(i as u64));
        let p = dir.join(format!("{i}.npy"));
        crate::npy::write_npy(&p, &t).map_err(|m| format!("error: {m}"))?;
        args.push(InputArg { name: Some(name.clone()), path: p });
    }
    Ok((dir, args))
}

/// How one output compares with its expected values.
#[derive(Debug)]
pub struct Comparison {
    pub name: String,
    pub max_abs: f64,
    pub max_rel: f64,
    /// Elements outside `atol + rtol * |expected|` (NaN matches NaN only).
    pub mismatches: usize,
    pub elements: usize,
}

/// Compares each output with `dir/NAME.npy`: max absolute and relative
/// error, and whether every element is within `atol + rtol * |expected|`
/// (numpy's `allclose`). An output without its file, or with another
/// shape, is an error.
pub fn compare_expected(outputs: &[(String, Tensor)], dir: &Path, atol: f64, rtol: f64) -> Result<Vec<Comparison>, String> {
    let mut out = vec![];
    for (name, got) in outputs {
        let p = dir.join(format!("{name}.npy"));
        if !p.exists() {
            return Err(format!("error: no expected values for output `{name}`: {} does not exist", p.display()));
        }
        let want = crate::npy::read_npy(&p).map_err(|m| format!("error: {m}"))?;
        if want.ty.shape != got.ty.shape {
            return Err(format!(
                "error: output `{name}` has shape {:?}, but {} holds {:?}",
                got.ty.shape,
                p.display(),
                want.ty.shape
            ));
        }
        let (g, w) = (got.to_f64(), want.to_f64());
        let mut c = Comparison { name: name.clone(), max_abs: 0.0, max_rel: 0.0, mismatches: 0, elements: g.len() };
        for (a, b) in g.iter().zip(&w) {
            if a.is_nan() || b.is_nan() {
                if a.is_nan() != b.is_nan() {
                    c.mismatches += 1;
                    c.max_abs = f64::NAN;
                }
                continue;
            }
            let d = if a == b { 0.0 } else { (a - b).abs() };
            c.max_abs = c.max_abs.max(d);
            if b.abs() > 0.0 {
                c.max_rel = c.max_rel.max(d / b.abs());
            } else if d > 0.0 {
                c.max_rel = f64::INFINITY;
            }
            if !(d <= atol + rtol * b.abs()) {
                c.mismatches += 1;
            }
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tensors_are_seeded_and_in_range() {
        let f = TensorType::new(vec![64], Scalar::F32);
        let a = random_tensor(&f, 7).to_f64();
        assert_eq!(a, random_tensor(&f, 7).to_f64());
        assert_ne!(a, random_tensor(&f, 8).to_f64());
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        let i = random_tensor(&TensorType::new(vec![64], Scalar::I64), 1).to_f64();
        assert!(i.iter().all(|v| *v == 0.0 || *v == 1.0) && i.contains(&1.0));
    }

    #[test]
    fn comparisons_use_allclose_and_count_nan_mismatches() {
        let dir = std::env::temp_dir().join(format!("aoc-run-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = |v: Vec<f64>| Tensor::from_f64(TensorType::new(vec![v.len()], Scalar::F32), v);
        crate::npy::write_npy(&dir.join("y.npy"), &t(vec![1.0, 2.0, f32::NAN as f64, 0.0])).unwrap();
        let got = vec![("y".to_string(), t(vec![1.0, 2.002, f32::NAN as f64, 0.0]))];
        let c = &compare_expected(&got, &dir, 1e-6, 1e-3).unwrap()[0];
        assert_eq!(c.mismatches, 0);
        assert!((c.max_abs - 0.002).abs() < 1e-6 && (c.max_rel - 0.001).abs() < 1e-6, "{} {}", c.max_abs, c.max_rel);
        let c = &compare_expected(&got, &dir, 1e-6, 1e-4).unwrap()[0];
        assert_eq!(c.mismatches, 1);
        let got = vec![("y".to_string(), t(vec![1.0, 2.0, 3.0, 0.0]))];
        assert_eq!(compare_expected(&got, &dir, 1.0, 1.0).unwrap()[0].mismatches, 1, "NaN expected, 3 found");
        let got = vec![("z".to_string(), t(vec![1.0]))];
        assert!(compare_expected(&got, &dir, 1.0, 1.0).unwrap_err().contains("no expected values for output `z`"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
