//! The C API called from Rust: introspection, every error path, and
//! runs on a real artifact written to a temporary file.

use std::ffi::CStr;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::artifact::ArtifactWriter;
use crate::plan::{Buf, Plan, Space, Step};

/// A scratch directory per test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "aoc-capi-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn buf(space: Space, index: u32, len: u64) -> Buf {
    Buf {
        space,
        index,
        offset: 0,
        len,
    }
}

/// Inputs `x: f32 [2, 3]` and `s: i8 []` (unused), output `y: f32
/// [3, 2]` = the transpose of `x`, by one strided copy.
fn transpose_artifact(dir: &Scratch) -> CString {
    let plan = Plan {
        steps: vec![Step::Copy {
            src: buf(Space::Input, 0, 24),
            dst: buf(Space::Output, 0, 24),
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
    let path = dir.0.join("transpose.aoc");
    w.write_to(&path).unwrap();
    CString::new(path.to_str().unwrap()).unwrap()
}

fn last_error() -> String {
    // SAFETY: `aoc_last_error` always returns a NUL-terminated string.
    unsafe { CStr::from_ptr(aoc_last_error()) }
        .to_str()
        .unwrap()
        .to_string()
}

fn c_str(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: non-null strings from the API are NUL terminated.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
}

/// Owns a loaded session for a test.
struct Loaded(*mut AocSession);

impl Loaded {
    fn new(path: &CStr, threads: c_int) -> Loaded {
        // SAFETY: a valid C string.
        let s = unsafe { aoc_session_load(path.as_ptr(), threads) };
        assert!(!s.is_null(), "load failed: {}", last_error());
        Loaded(s)
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: loaded by `Loaded::new`, freed once.
        unsafe { aoc_session_free(self.0) }
    }
}

fn shape(s: *const AocSession, side: Side, i: usize) -> Result<Vec<i64>, String> {
    let mut dims = [-1i64; 8];
    let mut rank = usize::MAX;
    // SAFETY: `dims` holds 8 entries, `rank` is writable.
    let rc = unsafe {
        match side {
            Side::Input => aoc_session_input_shape(s, i, dims.as_mut_ptr(), 8, &mut rank),
            Side::Output => aoc_session_output_shape(s, i, dims.as_mut_ptr(), 8, &mut rank),
        }
    };
    if rc != 0 {
        return Err(last_error());
    }
    Ok(dims[..rank].to_vec())
}

#[test]
fn introspection_describes_inputs_and_outputs() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    let s = s.0.cast_const();
    // SAFETY (all calls below): `s` is a live session.
    unsafe {
        assert_eq!(aoc_session_input_count(s), 2);
        assert_eq!(aoc_session_output_count(s), 1);
        assert_eq!(c_str(aoc_session_input_name(s, 0)), "x");
        assert_eq!(c_str(aoc_session_input_name(s, 1)), "s");
        assert_eq!(c_str(aoc_session_output_name(s, 0)), "y");
        assert_eq!(c_str(aoc_session_input_dtype(s, 0)), "f32");
        assert_eq!(c_str(aoc_session_input_dtype(s, 1)), "i8");
        assert_eq!(c_str(aoc_session_output_dtype(s, 0)), "f32");
        assert_eq!(aoc_session_input_bytes(s, 0), 24);
        assert_eq!(aoc_session_input_bytes(s, 1), 1);
        assert_eq!(aoc_session_output_bytes(s, 0), 24);
    }
    assert_eq!(shape(s, Side::Input, 0), Ok(vec![2, 3]));
    assert_eq!(shape(s, Side::Input, 1), Ok(vec![]));
    assert_eq!(shape(s, Side::Output, 0), Ok(vec![3, 2]));

    // A scalar's shape needs no `dims` at all.
    let mut rank = 7usize;
    // SAFETY: `rank` is writable; `dims` may be NULL with max_dims 0.
    assert_eq!(
        unsafe { aoc_session_input_shape(s, 1, null_mut(), 0, &mut rank) },
        0
    );
    assert_eq!(rank, 0);
}

#[test]
fn out_of_range_indices_are_errors() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    let s = s.0.cast_const();
    // SAFETY (all calls below): `s` is a live session.
    unsafe {
        assert!(aoc_session_input_name(s, 2).is_null());
        assert_eq!(
            last_error(),
            "input index 2 is out of range (the session has 2 inputs)"
        );
        assert!(aoc_session_output_dtype(s, 1).is_null());
        assert_eq!(
            last_error(),
            "output index 1 is out of range (the session has 1 outputs)"
        );
        assert_eq!(aoc_session_output_bytes(s, 5), 0);
        assert_eq!(
            last_error(),
            "output index 5 is out of range (the session has 1 outputs)"
        );
    }
    assert_eq!(
        shape(s, Side::Input, 9),
        Err("input index 9 is out of range (the session has 2 inputs)".to_string())
    );
}

#[test]
fn a_short_dims_buffer_still_reports_the_rank() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    let mut dims = [-1i64; 1];
    let mut rank = 0usize;
    // SAFETY: `dims` holds 1 entry, `rank` is writable.
    let rc = unsafe { aoc_session_input_shape(s.0, 0, dims.as_mut_ptr(), 1, &mut rank) };
    assert_ne!(rc, 0);
    assert_eq!(rank, 2);
    assert_eq!(dims, [-1], "nothing is written into a short buffer");
    assert_eq!(
        last_error(),
        "aoc_session_input_shape: input `x` has rank 2, `dims` holds 1"
    );
    // Asking for the rank with max_dims 0 and a NULL `dims`.
    // SAFETY: `rank` is writable.
    let rc = unsafe { aoc_session_output_shape(s.0, 0, null_mut(), 0, &mut rank) };
    assert_ne!(rc, 0);
    assert_eq!(rank, 2);
    // A NULL `rank` is refused.
    // SAFETY: `dims` holds 1 entry.
    let rc = unsafe { aoc_session_input_shape(s.0, 1, dims.as_mut_ptr(), 1, null_mut()) };
    assert_ne!(rc, 0);
    assert_eq!(last_error(), "aoc_session_input_shape: `rank` is NULL");
    // Enough room but a NULL `dims`.
    // SAFETY: `rank` is writable; `dims` is NULL, which must be refused.
    let rc = unsafe { aoc_session_input_shape(s.0, 0, null_mut(), 4, &mut rank) };
    assert_ne!(rc, 0);
    assert_eq!(last_error(), "aoc_session_input_shape: `dims` is NULL");
}

#[test]
fn load_errors_name_the_file() {
    let dir = Scratch::new();
    let missing = dir.0.join("missing.aoc");
    let c = CString::new(missing.to_str().unwrap()).unwrap();
    // SAFETY: valid C strings or NULL throughout.
    unsafe {
        assert!(aoc_session_load(c.as_ptr(), 1).is_null());
        let e = last_error();
        assert!(
            e.starts_with(&format!("{}: cannot open: ", missing.display())),
            "{e}"
        );

        let junk = dir.0.join("junk.aoc");
        std::fs::write(&junk, b"this is not an artifact, not even close").unwrap();
        let c = CString::new(junk.to_str().unwrap()).unwrap();
        assert!(aoc_session_load(c.as_ptr(), 1).is_null());
        assert_eq!(
            last_error(),
            format!("{}: not an aoc artifact (bad magic bytes)", junk.display())
        );

        assert!(aoc_session_load(null(), 1).is_null());
        assert_eq!(last_error(), "aoc_session_load: the path is NULL");

        let good = transpose_artifact(&dir);
        assert!(aoc_session_load(good.as_ptr(), -2).is_null());
        assert_eq!(
            last_error(),
            format!(
                "{}: thread count must be 0 (one per core) or positive, found -2",
                good.to_str().unwrap()
            )
        );
    }
}

#[test]
fn a_null_session_is_an_error_not_a_crash() {
    let s: *const AocSession = null();
    let mut rank = 0usize;
    let mut dims = [0i64; 4];
    // SAFETY: NULL sessions are part of every function's contract.
    unsafe {
        aoc_session_free(null_mut());
        assert_eq!(aoc_session_input_count(s), 0);
        assert_eq!(last_error(), "aoc_session_input_count: the session is NULL");
        assert_eq!(aoc_session_output_count(s), 0);
        assert_eq!(
            last_error(),
            "aoc_session_output_count: the session is NULL"
        );
        assert!(aoc_session_input_name(s, 0).is_null());
        assert_eq!(last_error(), "aoc_session_input_name: the session is NULL");
        assert!(aoc_session_output_dtype(s, 0).is_null());
        assert_eq!(
            last_error(),
            "aoc_session_output_dtype: the session is NULL"
        );
        assert_eq!(aoc_session_input_bytes(s, 0), 0);
        assert_eq!(last_error(), "aoc_session_input_bytes: the session is NULL");
        assert_ne!(
            aoc_session_output_shape(s, 0, dims.as_mut_ptr(), 4, &mut rank),
            0
        );
        assert_eq!(
            last_error(),
            "aoc_session_output_shape: the session is NULL"
        );
        assert_ne!(
            aoc_session_run(null_mut(), null(), null(), 0, null(), null(), 0),
            0
        );
        assert_eq!(last_error(), "aoc_session_run: the session is NULL");
    }
}

/// Runs `s` with the given tables; the error message on failure.
fn run(
    s: *mut AocSession,
    ins: &[*const c_void],
    in_bytes: &[usize],
    outs: &[*mut c_void],
    out_bytes: &[usize],
) -> Result<(), String> {
    // SAFETY: the tables are as long as the counts passed; the tests
    // give buffers at least as long as the sizes they claim.
    let rc = unsafe {
        aoc_session_run(
            s,
            ins.as_ptr(),
            in_bytes.as_ptr(),
            ins.len(),
            outs.as_ptr(),
            out_bytes.as_ptr(),
            outs.len(),
        )
    };
    if rc == 0 { Ok(()) } else { Err(last_error()) }
}

#[test]
fn run_checks_counts_sizes_and_pointers() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    let x = [0u8; 32];
    let sc = [0u8; 1];
    let mut y = [0u8; 32];
    let ins = [x.as_ptr().cast::<c_void>(), sc.as_ptr().cast()];
    let outs = [y.as_mut_ptr().cast::<c_void>()];

    assert_eq!(
        run(s.0, &ins[..1], &[24], &outs, &[24]),
        Err("aoc_session_run: the session has 2 inputs, 1 were given".into())
    );
    assert_eq!(
        run(s.0, &ins, &[24, 1], &[], &[]),
        Err("aoc_session_run: the session has 1 outputs, 0 were given".into())
    );
    assert_eq!(
        run(s.0, &ins, &[20, 1], &outs, &[24]),
        Err("aoc_session_run: input 0 `x` (f32 [2, 3]) needs 24 bytes, 20 were given".into())
    );
    assert_eq!(
        run(s.0, &ins, &[24, 2], &outs, &[24]),
        Err("aoc_session_run: input 1 `s` (i8 []) needs 1 bytes, 2 were given".into())
    );
    assert_eq!(
        run(s.0, &ins, &[24, 1], &outs, &[32]),
        Err("aoc_session_run: output 0 `y` (f32 [3, 2]) needs 24 bytes, 32 were given".into())
    );
    assert_eq!(
        run(s.0, &[x.as_ptr().cast(), null()], &[24, 1], &outs, &[24]),
        Err("aoc_session_run: input 1 `s` is NULL".into())
    );
    assert_eq!(
        run(s.0, &ins, &[24, 1], &[null_mut()], &[24]),
        Err("aoc_session_run: output 0 `y` is NULL".into())
    );
    // NULL tables with nonzero counts.
    // SAFETY: NULL tables are part of the contract.
    unsafe {
        assert_ne!(
            aoc_session_run(
                s.0,
                null(),
                [24, 1].as_ptr(),
                2,
                outs.as_ptr(),
                [24].as_ptr(),
                1
            ),
            0
        );
        assert_eq!(last_error(), "aoc_session_run: the input array is NULL");
        assert_ne!(
            aoc_session_run(
                s.0,
                ins.as_ptr(),
                [24, 1].as_ptr(),
                2,
                outs.as_ptr(),
                null(),
                1
            ),
            0
        );
        assert_eq!(
            last_error(),
            "aoc_session_run: the output size array is NULL"
        );
    }
}

#[test]
fn run_refuses_outputs_that_overlap() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    let mut mem = [0u8; 64];
    mem[..24].copy_from_slice(&f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let base = mem.as_mut_ptr();
    let sc = [0u8; 1];
    // `y` (24 bytes at 16) overlaps the end of `x` (24 bytes at 0).
    let ins = [base.cast_const().cast::<c_void>(), sc.as_ptr().cast()];
    // SAFETY: 16 + 24 <= 64.
    let y = unsafe { base.add(16) }.cast::<c_void>();
    assert_eq!(
        run(s.0, &ins, &[24, 1], &[y], &[24]),
        Err("aoc_session_run: output 0 `y` overlaps input 0 `x`".into())
    );
    // Right after `x` is fine: touching is not overlapping.
    // SAFETY: 24 + 24 <= 64.
    let y = unsafe { base.add(24) }.cast::<c_void>();
    assert_eq!(run(s.0, &ins, &[24, 1], &[y], &[24]), Ok(()));
    assert_eq!(mem[24..48], f32_bytes(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0])[..]);
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn run_transposes_and_is_safe_from_several_threads() {
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 2);
    // Raw pointers are not `Send`; the session is `Sync`, so share its
    // address.
    let addr = s.0 as usize;
    std::thread::scope(|scope| {
        for t in 0..4 {
            scope.spawn(move || {
                let base = t as f32 * 10.0;
                let x = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0].map(|v| v + base));
                let sc = [0u8];
                let mut y = vec![0u8; 24];
                run(
                    addr as *mut AocSession,
                    &[x.as_ptr().cast(), sc.as_ptr().cast()],
                    &[24, 1],
                    &[y.as_mut_ptr().cast()],
                    &[24],
                )
                .unwrap();
                let expected = f32_bytes(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0].map(|v| v + base));
                assert_eq!(y, expected, "thread {t}");
            });
        }
    });
}

#[test]
fn errors_are_per_thread_and_start_empty() {
    // SAFETY: NULL is part of the contract.
    assert_eq!(unsafe { aoc_session_input_count(null()) }, 0);
    assert_eq!(last_error(), "aoc_session_input_count: the session is NULL");
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");
    // A later success leaves the message as it was.
    let dir = Scratch::new();
    let path = transpose_artifact(&dir);
    let s = Loaded::new(&path, 1);
    // SAFETY: a live session.
    assert_eq!(unsafe { aoc_session_input_count(s.0) }, 2);
    assert_eq!(last_error(), "aoc_session_input_count: the session is NULL");
}

#[test]
fn a_panic_becomes_an_internal_error() {
    let r = guard(7, || -> Result<i32, String> { panic!("boom {}", 42) });
    assert_eq!(r, 7);
    assert_eq!(last_error(), "internal error: boom 42 (please report)");
    let r = guard(7, || -> Result<i32, String> { std::panic::panic_any(3u8) });
    assert_eq!(r, 7);
    assert_eq!(
        last_error(),
        "internal error: a panic with no message (please report)"
    );
}

#[test]
fn nul_bytes_in_messages_are_escaped() {
    set_error("tensor `a\0b` is bad");
    assert_eq!(last_error(), "tensor `a\\0b` is bad");
}

/// An artifact whose output `y: f32 [6]` is the last 6 values of its 1 MiB
/// weight `w` (so a run reads the end of the weights section).
fn weight_tail_artifact(path: &std::path::Path, values: &[f32]) {
    let n = values.len() as u64;
    let plan = Plan {
        steps: vec![Step::Copy {
            src: Buf { space: Space::Weights, index: 0, offset: (n - 6) * 4, len: 24 },
            dst: buf(Space::Output, 0, 24),
            elem_size: 4,
            shape: vec![6],
            src_start: 0,
            src_strides: vec![1],
            dst_strides: vec![1],
        }],
        origins: vec!["copy".to_string()],
    };
    let mut w = ArtifactWriter::new("x86-64");
    w.input("x", "f32", &[1])
        .output("y", "f32", &[6])
        .add_weight_f32("w", &[n], values)
        .plan(serde_json::to_value(&plan).unwrap());
    w.write_to(path).unwrap();
}

/// A session loaded through the C API keeps running, with the values it
/// loaded, while its file is truncated, overwritten in place and replaced
/// by another artifact (what `cp`, `truncate` and `aoc compile -o` do).
#[test]
fn replacing_the_file_under_a_running_session_does_not_disturb_it() {
    let dir = Scratch::new();
    let n = 1 << 18;
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let path = dir.0.join("w.aoc");
    weight_tail_artifact(&path, &values);
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let s = Loaded::new(&cpath, 1);
    let addr = s.0 as usize;
    let want = f32_bytes(&values[n - 6..]);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let runner = scope.spawn(|| {
            let x = f32_bytes(&[0.0]);
            let mut runs = 0;
            while !done.load(Ordering::Relaxed) || runs < 1000 {
                let mut y = vec![0u8; 24];
                run(addr as *mut AocSession, &[x.as_ptr().cast()], &[4], &[y.as_mut_ptr().cast()], &[24]).unwrap();
                assert_eq!(y, want, "run {runs}");
                runs += 1;
            }
            runs
        });
        let negated: Vec<f32> = values.iter().map(|v| -v).collect();
        for _ in 0..20 {
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(16).unwrap();
            std::fs::write(&path, b"not an artifact").unwrap();
            let other = dir.0.join("other.aoc");
            weight_tail_artifact(&other, &negated);
            std::fs::rename(&other, &path).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done.store(true, Ordering::Relaxed);
        assert!(runner.join().unwrap() >= 1000);
    });
    // A session loaded now reads the replacement.
    let fresh = Loaded::new(&cpath, 1);
    let x = f32_bytes(&[0.0]);
    let mut y = vec![0u8; 24];
    run(fresh.0, &[x.as_ptr().cast()], &[4], &[y.as_mut_ptr().cast()], &[24]).unwrap();
    assert_eq!(y, f32_bytes(&values[n - 6..].iter().map(|v| -v).collect::<Vec<_>>()));
}
