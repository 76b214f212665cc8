//! Helpers the end-to-end CLI tests share (`quantize.rs`, `sparsity.rs`):
//! a fresh scratch folder, running `aoc`, checking its exit and messages,
//! and seeded normal data that is the same on every machine.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty `CARGO_TARGET_TMPDIR/suite/name`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(suite).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn aoc(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aoc")).args(args.iter().map(|a| a.as_ref())).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn ok(o: &Output) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(0), "aoc failed:\n{e}");
    e
}

/// Exit 1, no panic, every fragment in stderr.
pub fn user_error(o: &Output, fragments: &[&str]) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "expected exit 1, stderr:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "panic:\n{err}");
    for f in fragments {
        assert!(err.contains(f), "stderr lacks `{f}`:\n{err}");
    }
    err
}

/// splitmix64 normals, so the data is the same on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}
