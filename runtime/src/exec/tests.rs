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
