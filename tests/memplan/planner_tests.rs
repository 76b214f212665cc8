//! Tests of the IR-level planner: hand-checked chains, diamonds and
//! aliases, the checker rejecting broken plans, and a property test over
//! seeded random DAGs.

use crate::planner::*;
use aoc_ir::attr::{ConstValue, DenseData};
use aoc_ir::{Attr, Attrs, Func, Location, Opcode, Scalar, TensorType, ValueId};

fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(shape.to_vec(), Scalar::F32)
}

fn op(f: &mut Func, opcode: Opcode, operands: &[ValueId], attrs: Attrs) -> ValueId {
    f.push_op(opcode, operands, attrs, None, "v", Location::default()).expect("a valid op")[0]
}

fn dense(f: &mut Func, shape: &[usize], values: Vec<f64>) -> ValueId {
    let attrs = Attrs::new().with("value", Attr::Const(ConstValue::Dense(DenseData::Floats(values))));
    f.push_op(Opcode::Const, &[], attrs, Some(vec![f32t(shape)]), "c", Location::default())
        .expect("a valid const")[0]
}

fn ints(name: &str, v: &[i64]) -> Attrs {
    Attrs::new().with(name, Attr::Ints(v.to_vec()))
}

/// xorshift, as the passes crate's tests use: uniform in [-2, 2).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

fn relu(f: &mut Func, x: ValueId) -> ValueId {
    op(f, Opcode::Relu, &[x], Attrs::new())
}

/// `x -> relu -> relu -> relu -> relu`, each value 1x16 f32 (64 bytes).
fn chain(n: usize) -> (Func, Vec<ValueId>) {
    let mut f = Func::new("chain");
    let x = f.add_param("x", f32t(&[1, 16]), Location::default());
    let mut vs = vec![x];
    for _ in 0..n {
        let v = relu(&mut f, *vs.last().unwrap());
        vs.push(v);
    }
    f.set_return(vec![*vs.last().unwrap()]);
    (f, vs)
}

fn plan(f: &Func, opts: MemPlanOptions) -> MemoryPlan {
    let p = plan_memory(f, &opts).unwrap();
    check_plan(f, &p).unwrap();
    p
}

#[test]
fn sizes_round_storage_bits_to_64_bytes() {
    assert_eq!(value_bytes(&TensorType::new(vec![3, 5], Scalar::I8)), 15);
    assert_eq!(buffer_bytes(&TensorType::new(vec![3, 5], Scalar::I8)), 64);
    assert_eq!(buffer_bytes(&f32t(&[1, 16])), 64);
    assert_eq!(buffer_bytes(&f32t(&[1, 17])), 128);
    assert_eq!(
        buffer_bytes(&TensorType::new(vec![2, 40], Scalar::F16)),
        192
    );
    assert_eq!(value_bytes(&TensorType::new(vec![10], Scalar::I1)), 2);
    assert_eq!(buffer_bytes(&TensorType::new(vec![0, 8], Scalar::F32)), 0);
}

#[test]
fn chain_reuses_two_buffers() {
    // b, c, d are planned (x and e are the caller's); b and d never live at
    // the same time, so they share offset 0.
    let (f, vs) = chain(4);
    let p = plan(&f, MemPlanOptions::default());
    assert_eq!(p.buffers.len(), 3);
    assert_eq!(p.arena_bytes, 128);
    assert_eq!(p.peak_live_bytes, 128);
    assert_eq!(p.sum_of_sizes(), 192);
    assert_eq!(p.buffers[&vs[1]].offset, p.buffers[&vs[3]].offset);
    assert_ne!(p.buffers[&vs[1]].offset, p.buffers[&vs[2]].offset);
    assert!(!p.buffers.contains_key(&vs[0]) && !p.buffers.contains_key(&vs[4]));
}

#[test]
fn planning_params_and_results_still_needs_two_buffers() {
    let (f, vs) = chain(4);
    let opts = MemPlanOptions {
        plan_params: true,
        plan_results: true,
        ..MemPlanOptions::default()
    };
    let p = plan(&f, opts);
    assert_eq!(p.buffers.len(), 5);
    assert_eq!(p.arena_bytes, 128);
    // x (time 0..=1) and c (2..=3) share; e lives to the return (time 5).
    assert_eq!(p.buffers[&vs[0]].offset, p.buffers[&vs[2]].offset);
    assert_eq!(
        lifetimes(&f).unwrap()[&vs[4]],
        Lifetime { start: 4, end: 5 }
    );
}

#[test]
fn residual_add_keeps_a_buffer_alive() {
    // a = relu x; b = relu a; c = relu b; d = add a, c; e = relu d.
    // a lives 1..=4, b 2..=3, c 3..=4, d 4..=5: three live at time 4.
    let mut f = Func::new("diamond");
    let x = f.add_param("x", f32t(&[1, 16]), Location::default());
    let a = relu(&mut f, x);
    let b = relu(&mut f, a);
    let c = relu(&mut f, b);
    let d = op(&mut f, Opcode::Add, &[a, c], Attrs::new());
    let e = relu(&mut f, d);
    f.set_return(vec![e]);
    let p = plan(&f, MemPlanOptions::default());
    assert_eq!(p.peak_live_bytes, 192);
    assert_eq!(p.arena_bytes, 192);
    assert_eq!(p.buffers[&b].offset, p.buffers[&d].offset);
}

#[test]
fn reshape_aliases_a_dying_operand() {
    // a = relu x; r = reshape a; b = relu r: r takes a's bytes.
    let mut f = Func::new("alias");
    let x = f.add_param("x", f32t(&[1, 16]), Location::default());
    let a = relu(&mut f, x);
    let r = op(&mut f, Opcode::Reshape, &[a], ints("shape", &[4, 4]));
    let b = relu(&mut f, r);
    f.set_return(vec![b]);
    let p = plan(&f, MemPlanOptions::default());
    assert_eq!(p.aliases.get(&r), Some(&a));
    assert_eq!(p.buffers[&r], p.buffers[&a]);
    assert_eq!((p.arena_bytes, p.sum_of_sizes()), (64, 64));
    let off = plan(
        &f,
        MemPlanOptions {
            alias_reshapes: false,
            ..MemPlanOptions::default()
        },
    );
    assert!(off.aliases.is_empty());
    assert_eq!(off.arena_bytes, 128);
}

#[test]
fn reshape_of_a_live_operand_gets_its_own_buffer() {
    // a is used again after the reshape: aliases are only made where the
    // operand dies, so a byte range never has two live owners (which keeps
    // later in-place kernels safe).
    let mut f = Func::new("no_alias");
    let x = f.add_param("x", f32t(&[1, 16]), Location::default());
    let a = relu(&mut f, x);
    let r = op(&mut f, Opcode::Reshape, &[a], ints("shape", &[1, 16]));
    let b = relu(&mut f, r);
    let c = op(&mut f, Opcode::Add, &[a, b], Attrs::new());
    f.set_return(vec![c]);
    let p = plan(&f, MemPlanOptions::default());
    assert!(p.aliases.is_empty());
    assert_eq!(p.arena_bytes, 192);
    // A reshape of a constant has no arena operand to alias.
    let mut g = Func::new("const_reshape");
    let k = dense(&mut g, &[1, 16], vec![1.0; 16]);
    let r = op(&mut g, Opcode::Reshape, &[k], ints("shape", &[16]));
    let y = relu(&mut g, r);
    g.set_return(vec![y]);
    let p = plan(&g, MemPlanOptions::default());
    assert!(!p.buffers.contains_key(&k) && p.aliases.is_empty());
    assert_eq!(p.arena_bytes, 64);
}

#[test]
fn checker_rejects_broken_plans() {
    let (f, vs) = chain(4);
    let good = plan(&f, MemPlanOptions::default());
    let mut clash = good.clone();
    clash.buffers.get_mut(&vs[2]).unwrap().offset = good.buffers[&vs[1]].offset;
    assert!(check_plan(&f, &clash).unwrap_err().contains("share bytes"));
    let mut misaligned = good.clone();
    misaligned.buffers.get_mut(&vs[1]).unwrap().offset += 8;
    assert!(
        check_plan(&f, &misaligned)
            .unwrap_err()
            .contains("not aligned")
    );
    let mut small = good.clone();
    small.arena_bytes = 64;
    small.peak_live_bytes = 64;
    assert!(
        check_plan(&f, &small)
            .unwrap_err()
            .contains("outside the arena")
    );
    let mut missing = good.clone();
    missing.buffers.remove(&vs[2]);
    assert!(
        check_plan(&f, &missing)
            .unwrap_err()
            .contains("needs a buffer")
    );
    let mut fake_alias = good;
    fake_alias.aliases.insert(vs[2], vs[1]);
    assert!(
        check_plan(&f, &fake_alias)
            .unwrap_err()
            .contains("not a valid alias")
    );
}

/// Uniform integer in `0..n`.
fn below(rng: &mut Rng, n: usize) -> usize {
    (((rng.next() + 2.0) / 4.0 * n as f64) as usize).min(n - 1)
}

/// A random DAG of rank-2 f32 values: unary ops, adds of equal shapes,
/// concats along either axis, reshapes (transposed shape) and flattens.
fn random_func(seed: u64) -> Func {
    let mut rng = Rng::new(seed);
    let mut f = Func::new("random");
    let dims = [1, 2, 3, 4, 8, 16, 24];
    let mut vs = vec![];
    for i in 0..1 + below(&mut rng, 3) {
        let shape = [dims[below(&mut rng, 7)], dims[below(&mut rng, 7)]];
        vs.push(f.add_param(&format!("p{i}"), f32t(&shape), Location::default()));
    }
    let n_ops = 5 + below(&mut rng, 40);
    for _ in 0..n_ops {
        // Prefer recent values so that chains and long-lived values both occur.
        let pick = |rng: &mut Rng, vs: &[ValueId]| vs[vs.len() - 1 - below(rng, vs.len().min(6))];
        let a = pick(&mut rng, &vs);
        let sa = f.ty(a).shape.clone();
        let v = match below(&mut rng, 6) {
            0 => relu(&mut f, a),
            1 => op(&mut f, Opcode::Neg, &[a], Attrs::new()),
            2 => match vs.iter().copied().find(|&b| b != a && f.ty(b).shape == sa) {
                Some(b) => op(&mut f, Opcode::Add, &[a, b], Attrs::new()),
                None => op(&mut f, Opcode::Add, &[a, a], Attrs::new()),
            },
            3 => {
                let axis = below(&mut rng, 2);
                let other = vs
                    .iter()
                    .rev()
                    .copied()
                    .find(|&b| b != a && f.ty(b).shape[1 - axis] == sa[1 - axis])
                    .unwrap_or(a);
                op(
                    &mut f,
                    Opcode::Concat,
                    &[a, other],
                    Attrs::new().with("axis", Attr::Int(axis as i64)),
                )
            }
            4 => op(
                &mut f,
                Opcode::Reshape,
                &[a],
                ints("shape", &[sa[1] as i64, sa[0] as i64]),
            ),
            _ => {
                let c = relu(&mut f, a);
                op(
                    &mut f,
                    Opcode::Flatten,
                    &[c],
                    Attrs::new().with("axis", Attr::Int(1)),
                )
            }
        };
        vs.push(v);
    }
    let mut results = vec![*vs.last().unwrap()];
    for _ in 0..below(&mut rng, 3) {
        let v = vs[below(&mut rng, vs.len())];
        if !results.contains(&v) {
            results.push(v);
        }
    }
    f.set_return(results);
    f
}

#[test]
fn random_dags_get_valid_plans_between_the_bounds() {
    let mut aliased = 0;
    for seed in 1..=300u64 {
        let f = random_func(seed);
        let diags = aoc_ir::verify::verify_module(&aoc_ir::Module {
            weights: vec![],
            funcs: vec![f.clone()],
        });
        assert!(diags.is_empty(), "seed {seed}: {diags:?}");
        for bits in 0..8u8 {
            let opts = MemPlanOptions {
                alias_reshapes: bits & 1 != 0,
                plan_params: bits & 2 != 0,
                plan_results: bits & 4 != 0,
            };
            let p = plan_memory(&f, &opts).unwrap();
            check_plan(&f, &p).unwrap_or_else(|e| panic!("seed {seed}, {opts:?}: {e}"));
            assert!(p.arena_bytes >= p.peak_live_bytes, "seed {seed}");
            assert!(p.arena_bytes <= p.sum_of_sizes(), "seed {seed}");
            aliased += p.aliases.len();
        }
    }
    // The generator really exercises aliasing.
    assert!(aliased > 100, "only {aliased} aliases");
}
