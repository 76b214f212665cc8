//! Every op's `infer` and `eval` hooks are total: on any operand types and
//! attributes `infer` returns types or an error, and on any values of
//! types `infer` accepted `eval` returns tensors or an error — never a
//! panic (an overflow in a debug build counts), never an unbounded
//! allocation. The ONNX importer folds constants by calling the hooks
//! directly, and the verifier and builders call `infer` on user input, so a
//! panic here is a crash on a user's model.
//!
//! Two seeded searches: random types, attributes (edge values: 0, -1,
//! i64::MIN/MAX, NaN, inf, unknown strings) and values per op; and every op
//! of the filetests and examples with its types and attributes mutated.
//! `AOC_HOOK_ITERS` multiplies the work (and `AOC_HOOK_SEED` moves the
//! seed) for a longer search; each panic is reported with its op and inputs.

use aoc_ir::attr::{AttrKind, ConstValue, DenseData};
use aoc_ir::interp::{NoWeights, eval_op};
use aoc_ir::{Attr, Attrs, ElemType, Opcode, QuantParams, QuantType, Scalar, Tensor, TensorType, Trait};

/// `AOC_HOOK_ITERS`: how many times the default work to do.
/// The panics a search found, each (hook, op, message) once, with the case
/// that showed it first.
#[derive(Default)]
struct Panics {
    seen: std::collections::HashSet<String>,
    found: Vec<String>,
}

impl Panics {
    /// Runs `f`; a panic is recorded with `detail` (the case) and gives `None`.
    fn run<T>(
        &mut self,
        hook: &str,
        op: Opcode,
        detail: impl FnOnce() -> String,
        f: impl FnOnce() -> T + std::panic::UnwindSafe,
    ) -> Option<T> {
        let p = match std::panic::catch_unwind(f) {
            Ok(v) => return Some(v),
            Err(p) => p,
        };
        let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
        let key = format!("{hook} {} {msg}", op.name());
        if self.seen.insert(key.clone()) {
            self.found.push(format!("{key}\n{}", detail()));
        }
        None
    }

    fn assert_none(&self) {
        assert!(self.found.is_empty(), "{} panics:\n{}", self.found.len(), self.found.join("\n"));
    }
}

fn type_names(types: &[TensorType]) -> Vec<String> {
    types.iter().map(|t| t.to_string()).collect()
}

fn scale() -> usize {
    std::env::var("AOC_HOOK_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// `AOC_HOOK_SEED`: moves every seed.
fn seed() -> u64 {
    std::env::var("AOC_HOOK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Ops whose operands random types rarely satisfy (the seeded mutations
/// cover them).
const NOT_REACHED: &[&str] =
    &["core.batch_norm", "quant.conv2d", "quant.avg_pool2d", "core.winograd_conv2d", "quant.gemm", "core.gru", "core.lstm", "core.rnn", "core.loop"];

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())].clone()
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

const SCALARS: &[Scalar] = &[
    Scalar::F32, Scalar::F32, Scalar::F32, Scalar::F16, Scalar::BF16, Scalar::F64, Scalar::F8E4M3FN,
    Scalar::I64, Scalar::I64, Scalar::I32, Scalar::I8, Scalar::U8, Scalar::I1, Scalar::U64, Scalar::I16,
];

fn elem(r: &mut Rng, dims: &[usize]) -> ElemType {
    if r.chance(0.15) {
        let storage = r.pick(&[Scalar::I8, Scalar::U8, Scalar::I32, Scalar::I16]);
        let (lo, hi) = storage.int_range().unwrap();
        let zp = |r: &mut Rng| r.pick(&[0, lo, hi, 3]);
        let scale = |r: &mut Rng| r.pick(&[0.5, 1e-3, 1.0, 1e30, 1e-30]);
        let params = if !dims.is_empty() && r.chance(0.4) {
            let axis = r.below(dims.len());
            let n = dims[axis];
            QuantParams::PerAxis { axis, scales: (0..n).map(|_| scale(r)).collect(), zero_points: (0..n).map(|_| zp(r)).collect() }
        } else {
            QuantParams::PerTensor { scale: scale(r), zero_point: zp(r) }
        };
        return ElemType::Quant(Box::new(QuantType { storage, expressed: Scalar::F32, params }));
    }
    r.pick(SCALARS).into()
}

fn dims(r: &mut Rng) -> Vec<usize> {
    let rank = r.pick(&[0, 1, 1, 2, 2, 3, 4, 4, 4, 4, 4, 5]);
    (0..rank).map(|_| r.pick(&[0, 1, 1, 2, 2, 3, 3, 4, 5, 7])).collect()
}

fn ty(r: &mut Rng, first: Option<&TensorType>) -> TensorType {
    if let Some(f) = first {
        let c = f.shape.get(1).copied().unwrap_or(1);
        let last = f.shape.last().copied().unwrap_or(1);
        let same_elem = |r: &mut Rng, d: &[usize]| if r.chance(0.8) { f.elem.clone() } else { elem(r, d) };
        match r.below(8) {
            4 => {
                let d = vec![c];
                let e = same_elem(r, &d);
                return TensorType::new(d, e);
            }
            5 => {
                let k = r.pick(&[1, 2, 3]);
                let g = r.pick(&[1, 1, 1, c.max(1)]);
                let d = vec![r.pick(&[1, 2, 3, 4]) * if g > 1 { g } else { 1 }, c / g.max(1), k, k];
                let e = same_elem(r, &d);
                return TensorType::new(d, e);
            }
            6 => {
                let d = vec![last, r.pick(&[1, 2, 3])];
                let e = same_elem(r, &d);
                return TensorType::new(d, e);
            }

            0 => return f.clone(),
            1 => {
                let d = f.shape.clone();
                return TensorType::new(d.clone(), elem(r, &d));
            }
            2 => {
                // a suffix or broadcastable shape
                let k = r.below(f.shape.len() + 1);
                let mut d: Vec<usize> = f.shape[k..].to_vec();
                for x in d.iter_mut() {
                    if r.chance(0.3) {
                        *x = 1;
                    }
                }
                let e = if r.chance(0.7) { f.elem.clone() } else { elem(r, &d) };
                return TensorType::new(d, e);
            }
            7 => {
                // A 2:4 sparse weight: [N, K] for sparse.matmul, OIHW for
                // sparse.conv2d (and anything else, which must refuse it).
                let d = if r.chance(0.5) { vec![r.pick(&[1, 2, 3]), last] } else { vec![r.pick(&[1, 2]), c, r.pick(&[1, 2]), r.pick(&[1, 2])] };
                let e = same_elem(r, &d);
                return TensorType { encoding: Some(aoc_ir::Encoding::NM { n: 2, m: 4 }), ..TensorType::new(d, e) };
            }
            _ => {}
        }
    }
    let d = dims(r);
    let e = elem(r, &d);
    TensorType::new(d, e)
}

fn int(r: &mut Rng) -> i64 {
    r.pick(&[0, 1, 1, 1, 2, 2, 3, -1, -1, -2, -3, 4, 5, 7, 100, -100, 1 << 40, i64::MIN, i64::MAX, i32::MAX as i64])
}
fn float(r: &mut Rng) -> f64 {
    r.pick(&[0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-5, 1e30, -1e30, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 6.0, 1e300])
}
const STRS: &[&str] = &[
    "", "nearest", "linear", "cubic", "asymmetric", "half_pixel", "align_corners", "round_prefer_floor",
    "floor", "ceil", "round_prefer_ceil", "pytorch_half_pixel", "tf_crop_and_resize", "constant", "reflect",
    "edge", "add", "relu", "add; relu", "mul; add", "clip(0.0, 6.0)", "gelu", "sigmoid", "mul", "sub; exp",
    "clip(", "clip(1.0)", "add; add; add; add; add; add; add; add", "div", "tanh", "leaky_relu(0.1)", "max", "min",
    "pow", "neg", "erf", "clip(nan, nan)", "hard_sigmoid(0.2, 0.5)", "none", "tanh", "exact", "NOTSET", "SAME_UPPER",
    "VALID", "SAME_LOWER",
];

fn attr(r: &mut Rng, kind: AttrKind, t0: Option<&TensorType>) -> Attr {
    match kind {
        AttrKind::Int => Attr::Int(int(r)),
        AttrKind::Float => Attr::Float(float(r)),
        AttrKind::Bool => Attr::Bool(r.chance(0.5)),
        AttrKind::Str => {
            if r.chance(0.7) {
                Attr::Str(r.pick(STRS).to_string())
            } else {
                let a = r.pick(STRS);
                let b = r.pick(STRS);
                Attr::Str(format!("{a}; {b}"))
            }
        }
        AttrKind::Ints => {
            let n = match (t0, r.below(3)) {
                (Some(t), 0) => t.shape.len(),
                (Some(t), 1) => 2 * t.shape.len(),
                _ => r.below(9),
            };
            Attr::Ints((0..n).map(|_| if r.chance(0.6) { r.pick(&[0, 1, 1, 2, -1]) } else { int(r) }).collect())
        }
        AttrKind::Floats => {
            let n = r.below(9);
            Attr::Floats((0..n).map(|_| if r.chance(0.5) { r.pick(&[1.0, 2.0, 0.5]) } else { float(r) }).collect())
        }
        AttrKind::Type => Attr::Type(r.pick(SCALARS)),
        AttrKind::Const => {
            let n = r.pick(&[1, 2, 3, 4]);
            if r.chance(0.5) {
                Attr::Const(ConstValue::Dense(DenseData::Floats((0..n).map(|_| float(r)).collect())))
            } else {
                Attr::Const(ConstValue::Dense(DenseData::Ints((0..n).map(|_| int(r)).collect())))
            }
        }
    }
}

fn values(r: &mut Rng, t: &TensorType) -> Tensor {
    let n = t.num_elements();
    let s = t.elem.storage();
    let mode = r.below(4);
    if s.is_float() {
        let v = (0..n)
            .map(|i| match mode {
                0 => 0.0,
                1 => float(r),
                2 => (i as f64) - 1.5,
                _ => (r.below(2001) as f64 - 1000.0) / 100.0,
            })
            .collect();
        Tensor::from_f64(t.clone(), v)
    } else {
        let (lo, hi) = s.int_range().unwrap();
        let v = (0..n)
            .map(|i| {
                let x = match mode {
                    0 => 0,
                    1 => r.pick(&[lo, hi, 0, 1, -1, 2, 3]),
                    2 => i as i64 - 1,
                    _ => int(r),
                };
                x.clamp(lo, hi)
            })
            .collect();
        Tensor::from_i64(t.clone(), v)
    }
}

#[test]
fn random_ops_never_panic() {
    let iters = 20_000 * scale();
    let mut panics = Panics::default();
    for &op in Opcode::ALL {
        let info = op.info();
        let mut r = Rng(op as u64 * 7919 + 1 + seed() * 1_000_003);
        let (min, max) = info.operand_range();
        let max = max.unwrap_or(min + 3).min(min + 4);
        let mut ok = 0usize;
        for _ in 0..iters {
            let n = min + r.below(max - min + 1);
            let mut types: Vec<TensorType> = vec![];
            for _ in 0..n {
                let t = ty(&mut r, types.first());
                types.push(t);
            }
            let mut attrs = Attrs::new();
            for a in info.attrs {
                let give = matches!(a.default, aoc_ir::attr::AttrDefault::Required) || r.chance(0.35);
                if give {
                    attrs.set(a.name, attr(&mut r, a.kind, types.first()));
                }
            }
            let Ok(attrs) = info.complete_attrs(attrs) else { continue };
            let declared = if info.has_trait(Trait::DeclaredResult) {
                let t = ty(&mut r, types.first());
                Some(vec![t])
            } else {
                None
            };
            let detail = || format!("   types {:?}\n   attrs {:?}", type_names(&types), attrs);
            let infer = || aoc_ir::verify::infer_op(op, &types, &attrs, declared.as_deref());
            let Some(Ok(result_types)) = panics.run("infer", op, detail, infer) else { continue };
            if result_types.iter().any(|t| t.num_elements() > 1 << 16) || types.iter().any(|t| t.num_elements() > 1 << 16) {
                continue;
            }
            ok += 1;
            let inputs: Vec<Tensor> = types.iter().map(|t| values(&mut r, t)).collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let detail = || {
                let data: Vec<String> = inputs.iter().map(|t| format!("{:?}", t.data)).collect();
                format!("   types {:?}\n   attrs {:?}\n   inputs {data:?}", type_names(&types), attrs)
            };
            panics.run("eval", op, detail, || eval_op(op, &refs, &attrs, &result_types, &NoWeights));
        }
        assert!(ok > 0 || NOT_REACHED.contains(&op.name()), "{}: no random case passed infer", op.name());
    }
    panics.assert_none();
}

/// An op application: opcode, operand types, attributes, declared results.
type Case = (Opcode, Vec<TensorType>, Attrs, Option<Vec<TensorType>>);

fn seeds() -> Vec<Case> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![];
    let mut stack = vec![root.join("tests/filetests"), root.join("examples")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "air") {
                files.push(p);
            }
        }
    }
    let mut out = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for chunk in text.split("// -----") {
            let (m, _) = aoc_ir::parse::parse(chunk);
            for func in &m.funcs {
                for &o in &func.body.ops {
                    let op = &func.ops[o];
                    if op.opcode == Opcode::Const {
                        continue;
                    }
                    let types: Vec<TensorType> = op.operands.iter().map(|&v| func.ty(v).clone()).collect();
                    let res: Vec<TensorType> = op.results.iter().map(|&v| func.ty(v).clone()).collect();
                    let declared = op.opcode.info().has_trait(Trait::DeclaredResult).then_some(res);
                    out.push((op.opcode, types, op.attrs.clone(), declared));
                }
            }
        }
    }
    out
}

fn mutate_ty(r: &mut Rng, t: &TensorType) -> TensorType {
    let mut t = t.clone();
    match r.below(5) {
        0 if !t.shape.is_empty() => {
            let i = r.below(t.shape.len());
            t.shape[i] = r.pick(&[0, 1, 2, 3, 5, 8]);
        }
        1 => t.elem = elem(r, &t.shape),
        _ => {}
    }
    t
}

#[test]
fn mutated_ops_of_the_filetests_and_examples_never_panic() {
    let iters = 60 * scale();
    let seeds = seeds();
    let mut panics = Panics::default();
    let mut counts = std::collections::BTreeMap::new();
    let mut r = Rng(42 + seed());
    for (op, types0, attrs0, declared0) in &seeds {
        let op = *op;
        let info = op.info();
        for it in 0..iters {
            let (types, attrs, declared) = if it == 0 {
                (types0.clone(), attrs0.clone(), declared0.clone())
            } else {
                let types: Vec<TensorType> = types0.iter().map(|t| if r.chance(0.2) { mutate_ty(&mut r, t) } else { t.clone() }).collect();
                let mut attrs = attrs0.clone();
                if !info.attrs.is_empty() && r.chance(0.6) {
                    let a = &info.attrs[r.below(info.attrs.len())];
                    let first = types.first().cloned();
                    attrs.set(a.name, attr(&mut r, a.kind, first.as_ref()));
                }
                let declared = declared0.as_ref().map(|d| d.iter().map(|t| if r.chance(0.2) { mutate_ty(&mut r, t) } else { t.clone() }).collect());
                (types, attrs, declared)
            };
            let Ok(attrs) = info.complete_attrs(attrs) else { continue };
            let detail = || format!("   types {:?}\n   attrs {:?}", type_names(&types), attrs);
            let infer = || aoc_ir::verify::infer_op(op, &types, &attrs, declared.as_deref());
            let Some(Ok(result_types)) = panics.run("infer", op, detail, infer) else { continue };
            if result_types.iter().any(|t| t.num_elements() > 1 << 18) || types.iter().any(|t| t.num_elements() > 1 << 18) {
                continue;
            }
            *counts.entry(op.name()).or_insert(0usize) += 1;
            let inputs: Vec<Tensor> = types.iter().map(|t| values(&mut r, t)).collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let detail = || format!("   types {:?}\n   attrs {:?}", type_names(&types), attrs);
            panics.run("eval", op, detail, || eval_op(op, &refs, &attrs, &result_types, &NoWeights));
        }
    }
    eprintln!("evaluated per op: {counts:?}");
    panics.assert_none();
}
