//! What the driver tells the user besides results and errors, under the
//! global `--quiet` and `-v` flags: [`info`] (summaries, tables, warnings,
//! notes) is silenced by `--quiet`; [`detail`] (per-pass timing, per-tensor
//! ranges) appears only with `-v`. Errors always print, and results go to
//! stdout or files whatever the flags.

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Sets the flags for this process (the command line does, once).
pub fn set(quiet: bool, verbose: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
    VERBOSE.store(verbose && !quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

pub fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

fn emit(text: &str) {
    if text.is_empty() {
        return;
    }
    if text.ends_with('\n') {
        eprint!("{text}");
    } else {
        eprintln!("{text}");
    }
}

/// A summary, table, warning or note: stderr unless `--quiet`.
pub fn info(text: &str) {
    if !quiet() {
        emit(text);
    }
}

/// More detail: stderr with `-v` only.
pub fn detail(text: &str) {
    if verbose() {
        emit(text);
    }
}

/// A progress bar on stderr for `len` units of `what` (hidden under
/// `--quiet` and when stderr is not a terminal), or a spinner when `len`
/// is 0.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    if quiet() {
        return indicatif::ProgressBar::hidden();
    }
    let (pb, template) = if len == 0 {
        (indicatif::ProgressBar::new_spinner(), "{spinner} {msg} ({elapsed})")
    } else {
        (indicatif::ProgressBar::new(len), "{msg:<12} [{bar:30}] {pos}/{len}, {per_sec}, ETA {eta}")
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    if len == 0 {
        pb.enable_steady_tick(std::time::Duration::from_millis(120));
    }
    pb
}
