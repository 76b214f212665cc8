//! Session-level behaviour: plans built by hand, run through
//! `Session::from_artifact`.

use super::*;
use crate::artifact::ArtifactWriter;
use crate::plan::{Buf, Plan, Space, Step};

fn buf(space: Space, index: u32, len: u64) -> Buf {
    Buf {
        space,
        index,
        offset: 0,
        len,
    }
}

/// `y[1×1] = a[1×1] · b[1×1]`, one direct batched matmul.
fn product_session(threads: usize) -> Session {
    let plan = Plan {
        steps: vec![Step::MatMul {
            a: buf(Space::Input, 0, 4),
            b: buf(Space::Input, 1, 4),
            c: buf(Space::Output, 0, 4),
            batch: 1,
            m: 1,
            n: 1,
            k: 1,
            a_strides: [1, 1, 1],
            b_strides: [1, 1, 1],
            c_strides: [1, 1, 1],
        }],
        origins: vec!["product".to_string()],
    };
    let mut w = ArtifactWriter::new("x86-64");
    w.input("a", "f32", &[1, 1])
        .input("b", "f32", &[1, 1])
        .output("y", "f32", &[1, 1])
        .plan(serde_json::to_value(&plan).unwrap());
    let artifact = Artifact::from_bytes(w.to_bytes().unwrap()).unwrap();
    Session::from_artifact(artifact, &SessionOptions { threads }).unwrap()
}

fn product(s: &Session, a: f32, b: f32) -> f32 {
    let out = s.run(&[&a.to_le_bytes(), &b.to_le_bytes()]).unwrap();
    f32::from_le_bytes(out[0][..4].try_into().unwrap())
}

#[cfg(target_arch = "x86_64")]
#[test]
fn workers_flush_subnormals() {
    for threads in [1, 2] {
        let s = product_session(threads);
        // A normal product is exact.
        assert_eq!(product(&s, 3.0, 0.5), 1.5);
        // 1e-20 · 1e-20 = 1e-40 is subnormal: flushed to zero.
        assert_eq!(product(&s, 1e-20, 1e-20), 0.0);
        // A subnormal operand reads as zero.
        let sub = f32::MIN_POSITIVE / 4.0;
        assert!(sub > 0.0);
        assert_eq!(product(&s, sub, 1e30), 0.0);
    }
}

/// A run waits for its worker yielding, then parked (`Session::in_pool`):
/// runs from several threads at once each get their own result, and a
/// caller that is a worker of another rayon pool runs through `install`.
#[test]
fn runs_from_many_threads_and_from_other_pools() {
    for threads in [1, 2] {
        let s = product_session(threads);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..50 {
                        let a = (t * 100 + i) as f32;
                        assert_eq!(product(s, a, 2.0), 2.0 * a);
                    }
                });
            }
        });
        let other = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(other.install(|| product(&s, 3.0, 4.0)), 12.0);
    }
}

/// A run longer than the caller's yielding wait (a 384³ product, about
/// 57 M multiply-adds) ends with the caller parked and woken.
#[test]
fn a_long_run_wakes_its_parked_caller() {
    let d = 384u64;
    let len = d * d * 4;
    let plan = Plan {
        steps: vec![Step::MatMul {
            a: buf(Space::Input, 0, len),
            b: buf(Space::Input, 1, len),
            c: buf(Space::Output, 0, len),
            batch: 1,
            m: d,
            n: d,
            k: d,
            a_strides: [d * d, d, 1],
            b_strides: [d * d, d, 1],
            c_strides: [d * d, d, 1],
        }],
        origins: vec!["product".to_string()],
    };
    let mut w = ArtifactWriter::new("x86-64");
    w.input("a", "f32", &[d, d])
        .input("b", "f32", &[d, d])
        .output("y", "f32", &[d, d])
        .plan(serde_json::to_value(&plan).unwrap());
    let artifact = Artifact::from_bytes(w.to_bytes().unwrap()).unwrap();
    let s = Session::from_artifact(artifact, &SessionOptions { threads: 1 }).unwrap();
    // a = all ones, b = identity scaled by 3: y = 3 everywhere.
    let a: Vec<u8> = (0..d * d).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let b: Vec<u8> = (0..d * d)
        .flat_map(|i| if i / d == i % d { 3.0f32 } else { 0.0 }.to_le_bytes())
        .collect();
    let t0 = Instant::now();
    let out = s.run(&[&a, &b]).unwrap();
    let took = t0.elapsed();
    assert!(out[0].chunks_exact(4).all(|v| f32::from_le_bytes(v.try_into().unwrap()) == 3.0));
    eprintln!("384³ product in {took:?} (the caller parks after {WAIT_YIELDING:?})");
}
