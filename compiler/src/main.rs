//! The `aoc` binary: installs the panic hook and runs the driver on a thread
//! with a large stack (deeply nested input must produce a diagnostic, not a
//! stack overflow). All logic lives in `aoc_compiler::cli` and `aoc_compiler::driver`.
//!
//! Exit codes: 0 success, 1 a problem with the input, 2 a usage error, 101
//! an internal error (a panic, which is always a bug: bad input is reported,
//! never panicked on).

use std::panic::PanicHookInfo;

fn panic_hook(info: &PanicHookInfo<'_>) {
    let msg = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    let at = info
        .location()
        .map(|l| format!(" at {}:{}", l.file(), l.line()))
        .unwrap_or_default();
    eprintln!(
        "internal error: {msg}{at}\n\
         this is a bug in aoc, not in your input; please report it with the command line and input files"
    );
}

fn main() {
    std::panic::set_hook(Box::new(panic_hook));
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let worker = std::thread::Builder::new()
        .name("aoc".into())
        .stack_size(256 << 20)
        .spawn(move || aoc_compiler::cli::main(args));
    let code = match worker {
        Ok(handle) => handle.join().unwrap_or(101),
        Err(e) => {
            eprintln!("internal error: cannot start the driver thread: {e}; please report");
            101
        }
    };
    std::process::exit(code);
}
