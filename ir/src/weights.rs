//! Moving constants between a module and its weights file.
//!
//! Passes fold weights at compile time and leave the results in memory
//! (`ConstValue::Tensor`). Text cannot hold a large tensor sensibly, and this
//! crate does no I/O, so before writing a module the driver calls
//! [`externalize_constants`] (in-memory constants become `@file["key"]`
//! references, the tensors come back to be written) or [`bundle_weights`]
//! (the same, and every still-referenced original weight is moved into the
//! one new file too, so the output is self-contained).
//!
//! Invariants: after either call no `ConstValue::Tensor` remains in the
//! module; keys are unique within the returned list and never collide with
//! a key already referenced under the same weights name; the module still
//! verifies once the driver has written the returned tensors under
//! `weights_name` (and, for `bundle_weights`, the declaration is already set).

use crate::attr::{Attr, ConstValue, WeightRef};
use crate::diag::Location;
use crate::interp::WeightSource;
use crate::module::{Module, WeightsDecl};
use crate::tensor::Tensor;
use std::collections::{HashMap, HashSet};

/// Turns every in-memory constant of at least `min_elements` elements into a
/// reference `@<weights_name>["key"]` and returns (key, tensor) for each, in
/// program order; smaller ones become inline `dense<...>` payloads. Keys
/// derive from the function and value names (`main.conv1_w`), made unique.
/// Adding the `weights @<weights_name> = "..."` declaration and writing the
/// tensors is the driver's job.
pub fn externalize_constants(
    module: &mut Module,
    weights_name: &str,
    min_elements: usize,
) -> Vec<(String, Tensor)> {
    let mut taken: HashSet<String> = HashSet::new();
    for f in &module.funcs {
        for (_, op) in f.ops.iter() {
            for (_, a) in op.attrs.iter() {
                if let Attr::Const(ConstValue::Weight(w)) = a
                    && w.file == weights_name
                {
                    taken.insert(w.key.clone());
                }
            }
        }
    }
    let mut out = Vec::new();
    for f in &mut module.funcs {
        let order: Vec<_> = f.body.ops.clone();
        for op_id in order {
            let hint = match f.ops[op_id].results.first() {
                Some(&r) => format!("{}.{}", f.name, f.values[r].name),
                None => format!("{}.cst", f.name),
            };
            let op = &mut f.ops[op_id];
            for (_, a) in op.attrs.0.iter_mut() {
                let Attr::Const(ConstValue::Tensor(t)) = a else {
                    continue;
                };
                if t.len() >= min_elements && min_elements > 0 {
                    let key = unique_key(&hint, &taken);
                    taken.insert(key.clone());
                    out.push((key.clone(), t.as_ref().clone()));
                    *a = Attr::Const(ConstValue::Weight(WeightRef {
                        file: weights_name.to_string(),
                        key,
                    }));
                } else {
                    *a = Attr::Const(ConstValue::Dense(ConstValue::tensor_dense(t)));
                }
            }
        }
    }
    out
}

/// Makes the module self-contained in one weights file: every
/// `@file["key"]` reference (whatever file it names) is loaded through
/// `source` and re-pointed at `@<weights_name>`, in-memory constants are
/// externalized as by [`externalize_constants`], and the module's weights
/// declarations are replaced by `weights @<weights_name> = "<path>"` (or
/// none when nothing is referenced). Returns every tensor the new file must
/// hold. Original keys are kept where they do not collide.
pub fn bundle_weights(
    module: &mut Module,
    weights_name: &str,
    path: &str,
    min_elements: usize,
    source: &dyn WeightSource,
) -> Result<Vec<(String, Tensor)>, String> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut renamed: HashMap<(String, String), String> = HashMap::new();
    let mut out = Vec::new();
    for f in &mut module.funcs {
        let order: Vec<_> = f.body.ops.clone();
        for op_id in order {
            let ty = match f.ops[op_id].results.first() {
                Some(&r) => f.values[r].ty.clone(),
                None => continue,
            };
            for (_, a) in f.ops[op_id].attrs.0.iter_mut() {
                let Attr::Const(ConstValue::Weight(w)) = a else {
                    continue;
                };
                let id = (w.file.clone(), w.key.clone());
                let key = match renamed.get(&id) {
                    Some(k) => k.clone(),
                    None => {
                        let t = source.load(&w.file, &w.key, &ty)?;
                        let key = unique_key(&w.key, &taken);
                        taken.insert(key.clone());
                        renamed.insert(id, key.clone());
                        out.push((key.clone(), t));
                        key
                    }
                };
                *a = Attr::Const(ConstValue::Weight(WeightRef {
                    file: weights_name.to_string(),
                    key,
                }));
            }
        }
    }
    out.extend(externalize_constants(module, weights_name, min_elements));
    module.weights.clear();
    if !out.is_empty() {
        module.weights.push(WeightsDecl {
            name: weights_name.to_string(),
            path: path.to_string(),
            loc: Location::default(),
        });
    }
    Ok(out)
}

/// `hint`, or `hint_N` with the smallest N that is free.
fn unique_key(hint: &str, taken: &HashSet<String>) -> String {
    if !taken.contains(hint) {
        return hint.to_string();
    }
    (1..)
        .map(|i| format!("{hint}_{i}"))
        .find(|k| !taken.contains(k))
        .expect("a free key exists")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::{Attrs, DenseData};
    use crate::interp::{MapWeights, NoWeights, run};
    use crate::module::Func;
    use crate::ops::Opcode;
    use crate::types::{Scalar, TensorType};

    fn f32t(shape: &[usize]) -> TensorType {
        TensorType::new(shape.to_vec(), Scalar::F32)
    }

    fn push_const(f: &mut Func, name: &str, value: ConstValue, ty: TensorType) -> crate::ValueId {
        let attrs = Attrs::new().with("value", Attr::Const(value));
        f.push_op(
            Opcode::Const,
            &[],
            attrs,
            Some(vec![ty]),
            name,
            Location::default(),
        )
        .unwrap()[0]
    }

    /// x + big + small + w, where `big` (4 elements) and `small` (1 element)
    /// are in memory and `w` is an original weight.
    fn module() -> Module {
        let mut f = Func::new("main");
        let x = f.add_param("x", f32t(&[4]), Location::default());
        let big = push_const(
            &mut f,
            "big",
            ConstValue::tensor(Tensor::from_f64(f32t(&[4]), vec![1.0, 2.0, 3.0, 4.0])),
            f32t(&[4]),
        );
        let small = push_const(
            &mut f,
            "small",
            ConstValue::tensor(Tensor::from_f64(f32t(&[1]), vec![0.5])),
            f32t(&[1]),
        );
        let w = push_const(
            &mut f,
            "w",
            ConstValue::Weight(WeightRef {
                file: "weights".into(),
                key: "main.big".into(),
            }),
            f32t(&[4]),
        );
        let mut y = x;
        for c in [big, small, w] {
            y = f
                .push_op(
                    Opcode::Add,
                    &[y, c],
                    Attrs::new(),
                    None,
                    "y",
                    Location::default(),
                )
                .unwrap()[0];
        }
        f.set_return(vec![y]);
        let mut m = Module::default();
        m.weights.push(WeightsDecl {
            name: "weights".into(),
            path: "in.safetensors".into(),
            loc: Location::default(),
        });
        m.funcs.push(f);
        m
    }

    fn source() -> MapWeights {
        let mut w = MapWeights::default();
        w.0.insert(
            ("weights".into(), "main.big".into()),
            Tensor::from_f64(f32t(&[4]), vec![10.0, 20.0, 30.0, 40.0]),
        );
        w
    }

    fn payloads(m: &Module) -> Vec<ConstValue> {
        let f = &m.funcs[0];
        f.body
            .ops
            .iter()
            .filter_map(|&o| match f.ops[o].attrs.get("value") {
                Some(Attr::Const(c)) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn in_memory_constants_run_and_print_as_dense() {
        let m = module();
        assert!(crate::verify::verify_module(&m).is_empty());
        let x = Tensor::from_f64(f32t(&[4]), vec![0.0; 4]);
        let y = run(&m.funcs[0], vec![x], &source()).unwrap();
        assert_eq!(y[0].to_f64(), vec![11.5, 22.5, 33.5, 44.5]);
        let text = crate::print::print_module(&m);
        assert!(
            text.contains("%big = const dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>"),
            "{text}"
        );
        assert!(
            text.contains("%small = const dense<0.5> : tensor<1xf32>"),
            "{text}"
        );
    }

    #[test]
    fn a_mistyped_in_memory_constant_is_rejected() {
        let mut f = Func::new("main");
        let attrs = Attrs::new().with(
            "value",
            Attr::Const(ConstValue::tensor(Tensor::from_f64(
                f32t(&[2]),
                vec![1.0, 2.0],
            ))),
        );
        let e = f
            .push_op(
                Opcode::Const,
                &[],
                attrs,
                Some(vec![f32t(&[3])]),
                "c",
                Location::default(),
            )
            .unwrap_err();
        assert!(
            e.message.contains("in-memory value is tensor<2xf32>"),
            "{}",
            e.message
        );
    }

    #[test]
    fn externalizing_moves_large_constants_and_inlines_small_ones() {
        let mut m = module();
        let out = externalize_constants(&mut m, "weights", 2);
        // `main.big` is taken by the original weight, so the key gets a suffix.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, "main.big_1");
        assert_eq!(out[0].1.to_f64(), vec![1.0, 2.0, 3.0, 4.0]);
        let p = payloads(&m);
        assert_eq!(
            p[0],
            ConstValue::Weight(WeightRef {
                file: "weights".into(),
                key: "main.big_1".into()
            })
        );
        assert_eq!(p[1], ConstValue::Dense(DenseData::Floats(vec![0.5])));
        assert!(matches!(&p[2], ConstValue::Weight(w) if w.key == "main.big"));
    }

    #[test]
    fn bundling_makes_one_self_contained_file() {
        let mut m = module();
        let x = Tensor::from_f64(f32t(&[4]), vec![1.0; 4]);
        let before = run(&m.funcs[0], vec![x.clone()], &source()).unwrap();
        let out = bundle_weights(&mut m, "w2", "out.safetensors", 2, &source()).unwrap();
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["main.big", "main.big_1"]);
        assert_eq!(m.weights.len(), 1);
        assert_eq!(
            (m.weights[0].name.as_str(), m.weights[0].path.as_str()),
            ("w2", "out.safetensors")
        );
        assert!(crate::verify::verify_module(&m).is_empty());
        let mut written = MapWeights::default();
        for (k, t) in out {
            written.0.insert(("w2".into(), k), t);
        }
        let after = run(&m.funcs[0], vec![x], &written).unwrap();
        assert_eq!(before, after);
        // A missing original weight is an error, not a panic.
        let mut m = module();
        assert!(bundle_weights(&mut m, "w2", "o", 2, &NoWeights).is_err());
    }
}
