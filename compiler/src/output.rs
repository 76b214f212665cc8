//! Writing output files. Every file aoc writes (`.aoc`, `.air`,
//! `.safetensors`, `.npy`, `.s`/`.ptx` listings, the tune cache) goes to a
//! temporary file in the destination's folder and is renamed into place:
//!
//! - a process that has the old file open or memory-mapped (`aoc bench`, a
//!   server through the C API) keeps the old inode, so recompiling an
//!   artifact it runs cannot make it fault;
//! - a failure (a full disk, an error in a second file) leaves neither a
//!   half-written file nor a temporary behind.
//!
//! [`Staged`] groups files that must appear together (an imported `.air`
//! and its `.safetensors`): all are written first, then all renamed.
//!
//! A destination that exists and is not a regular file (`/dev/null`,
//! `/dev/stdout`, a FIFO) is written straight to at commit: renaming over
//! it would replace the device node (as root, `-o /dev/null` turned
//! /dev/null into a regular file).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary file beside `path`, removed on drop unless renamed.
struct Temp {
    tmp: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn cannot(path: &Path, e: impl std::fmt::Display) -> String {
    format!("cannot write {}: {e}", path.display())
}

/// A file waiting for its commit: a temporary beside a regular (or new)
/// destination, or the bytes for a destination that is not a regular file.
enum Pending {
    Temp(Temp),
    Direct { dest: PathBuf, bytes: Vec<u8> },
}

impl Pending {
    fn commit(self) -> Result<(), String> {
        match self {
            Pending::Temp(t) => t.commit(),
            Pending::Direct { dest, bytes } => {
                let file = OpenOptions::new().write(true).open(&dest).map_err(|e| cannot(&dest, e))?;
                write_all(file, &bytes).map_err(|e| cannot(&dest, e))
            }
        }
    }
}

fn stage(path: &Path, bytes: &[u8]) -> Result<Pending, String> {
    if path.is_dir() {
        return Err(cannot(path, "it is a directory"));
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Ok(Pending::Direct { dest: path.to_path_buf(), bytes: bytes.to_vec() }),
        _ => stage_temp(path, bytes).map(Pending::Temp),
    }
}

fn stage_temp(path: &Path, bytes: &[u8]) -> Result<Temp, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| cannot(path, "not a file name"))?;
    let mut last = None;
    // A few names in case another writer races for the same one.
    for _ in 0..8 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{}.{}.{n}.tmp", name.to_string_lossy(), std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => {
                let t = Temp { tmp, dest: path.to_path_buf(), done: false };
                write_all(file, bytes).map_err(|e| cannot(path, e))?;
                return Ok(t);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(cannot(path, e)),
        }
    }
    Err(cannot(path, last.map_or("no free temporary name".to_string(), |e| e.to_string())))
}

fn write_all(mut file: File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.flush()
}

impl Temp {
    fn commit(mut self) -> Result<(), String> {
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| cannot(&self.dest, e))?;
        self.done = true;
        Ok(())
    }
}

/// Writes `bytes` to `path` through a temporary file renamed into place.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    stage(path, bytes)?.commit()
}

/// Files written together: nothing appears until [`Staged::commit`], and a
/// `Staged` dropped before it leaves nothing behind.
#[derive(Default)]
pub struct Staged {
    files: Vec<Pending>,
}

impl Staged {
    pub fn new() -> Staged {
        Staged::default()
    }

    /// Writes `bytes` for `path` to its temporary file.
    pub fn add(&mut self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        self.files.push(stage(path, bytes)?);
        Ok(())
    }

    /// Renames every file into place, in the order added.
    pub fn commit(self) -> Result<(), String> {
        for t in self.files {
            t.commit()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("aoc-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    }

    /// A device destination is written to, never replaced: `/dev/null`
    /// stays a character device (as root, the rename used to replace it
    /// with a regular file), alone and in a staged group.
    #[cfg(unix)]
    #[test]
    fn devices_are_written_to_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let null = Path::new("/dev/null");
        if !std::fs::metadata(null).is_ok_and(|m| m.file_type().is_char_device()) {
            println!("skipped: this machine has no /dev/null character device");
            return;
        }
        write_file(null, b"into the void").unwrap();
        let d = scratch("device");
        let mut s = Staged::new();
        s.add(&d.join("m.air"), b"module").unwrap();
        s.add(null, b"weights").unwrap();
        s.commit().unwrap();
        assert!(std::fs::metadata(null).unwrap().file_type().is_char_device(), "/dev/null was replaced");
        assert_eq!(std::fs::read(d.join("m.air")).unwrap(), b"module");
        assert_eq!(entries(&d), vec!["m.air".to_string()]);
    }

    /// The old file's inode survives a rewrite: an open handle still reads
    /// the old bytes in full, and the path holds the new ones.
    #[test]
    fn a_rewrite_replaces_the_file_and_keeps_the_old_inode() {
        use std::io::Read;
        let d = scratch("rewrite");
        let p = d.join("m.aoc");
        write_file(&p, &[1u8; 4096]).unwrap();
        let mut old = File::open(&p).unwrap();
        write_file(&p, b"new").unwrap();
        let mut got = vec![];
        old.read_to_end(&mut got).unwrap();
        assert_eq!(got, vec![1u8; 4096]);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(entries(&d), ["m.aoc"]);
    }

    /// A group whose second file fails leaves nothing behind; committed,
    /// both files appear.
    #[test]
    fn staged_files_appear_together_or_not_at_all() {
        let d = scratch("staged");
        let mut s = Staged::new();
        s.add(&d.join("m.safetensors"), b"weights").unwrap();
        std::fs::create_dir(d.join("m.air")).unwrap();
        let err = s.add(&d.join("m.air"), b"text").map(|_| ()).unwrap_err();
        assert!(err.contains("is a directory"), "{err}");
        drop(s);
        assert_eq!(entries(&d), ["m.air"]);
        std::fs::remove_dir(d.join("m.air")).unwrap();
        let mut s = Staged::new();
        s.add(&d.join("m.safetensors"), b"weights").unwrap();
        s.add(&d.join("m.air"), b"text").unwrap();
        assert!(entries(&d).iter().all(|e| e.ends_with(".tmp")));
        s.commit().unwrap();
        assert_eq!(entries(&d), ["m.air", "m.safetensors"]);
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_the_file() {
        let d = scratch("missing");
        let err = write_file(&d.join("no/such/m.aoc"), b"x").unwrap_err();
        assert!(err.contains("cannot write") && err.contains("m.aoc"), "{err}");
    }
}
