//! The C API from C: builds `examples/c/main.c` with the system C compiler
//! against the runtime's static library and runs it on real artifacts.
//!
//! How the library is found: the test asks cargo itself
//! (`cargo build -p aoc-runtime --lib --message-format=json`, the same
//! cargo that runs this test) and takes the `.a` path from cargo's report.
//! It builds into its own target directory (`<target>/tmp/capi-lib`): the
//! runtime's `staticlib`/`cdylib` outputs carry no hash in their names, so a
//! build with other features in the shared directory would overwrite the
//! workspace's `libaoc_runtime.rlib` under the crates that link it.
//!
//! Without a C compiler (`cc`) the tests print why and return.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use aoc_runtime::artifact::ArtifactWriter;
use aoc_runtime::plan::{Buf, Plan, Space, Step};

/// The repository root (the runtime is one folder below it).
fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Where this process keeps its files: `<target tmp>/capi/<pid>`.
fn my_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("capi")
        .join(std::process::id().to_string())
}

/// Removes the folders of earlier runs whose process is gone (each holds a
/// ~20 MB statically linked program). Folders of live processes stay: the
/// target directory is shared by concurrent test runs.
fn remove_stale_roots() {
    let Ok(entries) = std::fs::read_dir(my_root().parent().unwrap()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // Without /proc (not Linux) liveness is unknown: keep everything.
        let alive =
            !Path::new("/proc/self").exists() || Path::new("/proc").join(pid.to_string()).exists();
        if pid != std::process::id() && !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A fresh scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = my_root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Path of `libaoc_runtime.a`, built (or found up to date) by cargo.
fn static_lib() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-lib");
    let out = Command::new(cargo)
        .current_dir(repo_root())
        .env("CARGO_TARGET_DIR", &target)
        .args([
            "build",
            "-p",
            "aoc-runtime",
            "--lib",
            "--message-format=json",
        ])
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build -p aoc-runtime failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // One JSON object per line; the runtime's `compiler-artifact` message
    // lists every file its lib target produced (rlib, .a, .so).
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["target"]["name"] != "aoc_runtime" {
            continue;
        }
        let files = msg["filenames"].as_array().cloned().unwrap_or_default();
        if let Some(a) = files
            .iter()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".a"))
        {
            return Ok(PathBuf::from(a));
        }
    }
    Err("cargo reported no static library for aoc-runtime".to_string())
}

/// Compiles the example once for all tests; `Err` says why it cannot run
/// (no C compiler) — any other failure panics.
fn example() -> Result<&'static Path, &'static str> {
    static EXE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = EXE.get_or_init(|| {
        if let Err(e) = Command::new("cc").arg("--version").output() {
            return Err(format!("no C compiler `cc` ({e}); skipping the C API test"));
        }
        remove_stale_roots();
        let lib = static_lib().unwrap_or_else(|e| panic!("{e}"));
        let exe = scratch("build").join("aoc_run_c");
        let root = repo_root();
        let out = Command::new("cc")
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(root.join("examples/c/main.c"))
            .arg("-I")
            .arg(root.join("runtime/include"))
            .arg(&lib)
            // What Rust's std needs from the C library on Linux.
            .args(["-lpthread", "-ldl", "-lm"])
            .output()
            .expect("cc ran a moment ago");
        assert!(
            out.status.success(),
            "compiling examples/c/main.c against {} failed:\n{}",
            lib.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(exe)
    });
    match r {
        Ok(p) => Ok(p.as_path()),
        Err(why) => Err(why.as_str()),
    }
}

fn buf(space: Space, len: u64) -> Buf {
    Buf {
        space,
        index: 0,
        offset: 0,
        len,
    }
}

/// Inputs `x: f32 [2, 3]` and `s: i8 []` (unused), output `y: f32 [3, 2]`
/// = the transpose of `x`, by one strided copy.
fn write_transpose(path: &Path) {
    let plan = Plan {
        steps: vec![Step::Copy {
            src: buf(Space::Input, 24),
            dst: buf(Space::Output, 24),
            elem_size: 4,
            shape: vec![3, 2],
            src_start: 0,
            src_strides: vec![1, 3],
            dst_strides: vec![2, 1],
        }],
        origins: vec!["transpose".to_string()],
    };
    let mut w = ArtifactWriter::new("x86-64");
    w.input("x", "f32", &[2, 3])
        .input("s", "i8", &[])
        .output("y", "f32", &[3, 2])
        .plan(serde_json::to_value(&plan).unwrap());
    w.write_to(path).unwrap();
}

/// A .npy (format 1.0) file holding `values` as little-endian f32.
fn npy_f32(shape: &str, values: &[f32]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    // The header (with its 10-byte preamble) is padded to 64 bytes.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

fn run(exe: &Path, args: &[&Path]) -> Output {
    Command::new(exe)
        .args(args)
        .env("AOC_THREADS", "2")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const DESCRIPTION: &str = "input 0: x f32 [2, 3] (24 bytes)\n\
                           input 1: s i8 [] (1 bytes)\n\
                           output 0: y f32 [3, 2] (24 bytes)\n";

#[test]
fn capi_c_load_of_a_missing_file_names_it() {
    let exe = match example() {
        Ok(exe) => exe,
        Err(why) => return println!("{why}"),
    };
    let missing = scratch("missing").join("nope.aoc");
    let out = run(exe, &[&missing]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("error: {}: cannot open: ", missing.display())),
        "{err}"
    );
}

#[test]
fn capi_c_load_of_a_corrupt_file_says_so() {
    let exe = match example() {
        Ok(exe) => exe,
        Err(why) => return println!("{why}"),
    };
    let dir = scratch("corrupt");
    let model = dir.join("model.aoc");
    write_transpose(&model);
    // Flip one byte past the header: the checksum must catch it.
    let mut bytes = std::fs::read(&model).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&model, bytes).unwrap();
    let out = run(exe, &[&model]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {}: checksum mismatch: the file is corrupt\n",
            model.display()
        )
    );
}

#[test]
fn capi_c_run_with_a_wrong_input_size_names_the_tensor() {
    let exe = match example() {
        Ok(exe) => exe,
        Err(why) => return println!("{why}"),
    };
    let dir = scratch("wrong-size");
    let model = dir.join("model.aoc");
    write_transpose(&model);
    let x = dir.join("x.bin");
    std::fs::write(&x, [0u8; 20]).unwrap();
    let out = run(exe, &[&model, &x]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), DESCRIPTION);
    assert_eq!(
        text(&out.stderr),
        "error: aoc_session_run: input 0 `x` (f32 [2, 3]) needs 24 bytes, 20 were given\n"
    );
}

#[test]
fn capi_c_run_transposes_npy_and_raw_inputs() {
    let exe = match example() {
        Ok(exe) => exe,
        Err(why) => return println!("{why}"),
    };
    let dir = scratch("run");
    let model = dir.join("model.aoc");
    write_transpose(&model);
    let x = dir.join("x.npy");
    std::fs::write(&x, npy_f32("(2, 3)", &[1.0, 2.0, 3.0, 4.0, 5.5, -6.0])).unwrap();
    let s = dir.join("s.bin");
    std::fs::write(&s, [9u8]).unwrap();
    let out = run(exe, &[&model, &x, &s]);
    assert_eq!(text(&out.stderr), "");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout),
        format!("{DESCRIPTION}y: 1 4 2 5.5 3 -6\n")
    );
}
