//! Records the git revision the binary is built from, for `aoc --version`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    let dirty = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => "-dirty",
        _ => "",
    };
    println!("cargo:rustc-env=AOC_GIT_REV={rev}{dirty}");
    // Rebuild when HEAD moves (a commit, a checkout).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = std::path::PathBuf::from(dir);
        for p in ["HEAD", "refs/heads", "packed-refs"] {
            if dir.join(p).exists() {
                println!("cargo:rerun-if-changed={}", dir.join(p).display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
