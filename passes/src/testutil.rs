//! Helpers for this crate's tests: building functions, seeded random inputs
//! and comparing a function before and after a rewrite in the interpreter.

use crate::egraph::{Limits, Optimized, Rewrite, Roofline, optimize_func};
use crate::pass::SaturationStats;
use aoc_ir::attr::{Attr, Attrs, ConstValue, DenseData};
use aoc_ir::interp::{NoWeights, run};
use aoc_ir::{Func, Location, Opcode, Scalar, Tensor, TensorType, ValueId};

pub fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(shape.to_vec(), Scalar::F32)
}

pub fn op(f: &mut Func, opcode: Opcode, operands: &[ValueId], attrs: Attrs) -> ValueId {
    let loc = Location::named(format!("{}#{}", opcode.name(), f.ops.len()));
    f.push_op(opcode, operands, attrs, None, "v", loc)
        .expect("a valid op")[0]
}

pub fn dense(f: &mut Func, shape: &[usize], values: Vec<f64>) -> ValueId {
    let attrs = Attrs::new().with(
        "value",
        Attr::Const(ConstValue::Dense(DenseData::Floats(values))),
    );
    f.push_op(
        Opcode::Const,
        &[],
        attrs,
        Some(vec![f32t(shape)]),
        "c",
        Location::named("const"),
    )
    .expect("a valid const")[0]
}

pub fn ints(name: &str, v: &[i64]) -> Attrs {
    Attrs::new().with(name, Attr::Ints(v.to_vec()))
}

/// A xorshift generator: deterministic across platforms.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in [-2, 2).
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

pub fn random_inputs(f: &Func, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng::new(seed);
    f.params()
        .iter()
        .map(|&p| {
            let ty = f.ty(p).clone();
            let n = ty.num_elements();
            Tensor::from_f64(ty, (0..n).map(|_| rng.next()).collect())
        })
        .collect()
}

/// Largest absolute difference between the outputs of `a` and `b` over
/// `trials` seeded random inputs.
pub fn max_error(a: &Func, b: &Func, trials: u64) -> f64 {
    let mut worst: f64 = 0.0;
    for seed in 1..=trials {
        let inputs = random_inputs(a, seed);
        let ra = run(a, inputs.clone(), &NoWeights).expect("before runs");
        let rb = run(b, inputs, &NoWeights).expect("after runs");
        assert_eq!(ra.len(), rb.len());
        for (x, y) in ra.iter().zip(&rb) {
            assert_eq!(x.ty, y.ty);
            for i in 0..x.len() {
                worst = worst.max((x.get_f64(i) - y.get_f64(i)).abs());
            }
        }
    }
    worst
}

/// Optimizes `f` with `rules` and default limits on the CPU cost model.
pub fn optimize(f: &Func, rules: &[Rewrite]) -> (Func, SaturationStats) {
    match optimize_func(f, rules, &Limits::default(), &Roofline::default()).expect("optimizes") {
        Optimized::Done(g, s) => {
            let mut m = aoc_ir::Module::default();
            m.funcs.push(g.clone());
            let errs = aoc_ir::verify::verify_module(&m);
            assert!(errs.is_empty(), "result does not verify: {errs:?}");
            (g, s)
        }
        Optimized::Skipped(r) => panic!("skipped: {r}"),
    }
}

/// The opcodes of `f`'s body, in order.
pub fn opcodes(f: &Func) -> Vec<Opcode> {
    f.body.ops.iter().map(|o| f.ops[*o].opcode).collect()
}
