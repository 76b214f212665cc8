//! ONNX external data: tensors whose bytes sit in a file beside the model
//! (`data_location = EXTERNAL`, keys `location`, `offset`, `length`), as
//! every model over 2 GB and many exporters' smaller ones store them.
//! [`resolve`] reads each such tensor's bytes into its `raw_data`, so the
//! importer sees inline tensors only.
//!
//! Invariants: `location` is relative to the model's folder and stays
//! inside it (no absolute path, no `..`); a range outside the file, a
//! missing file or a malformed key is an error naming the tensor, never a
//! short read.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use super::proto::{GraphProto, ModelProto, TensorProto};

/// Reads every external tensor of `model` (initializers and constant
/// attributes, subgraphs included) from files under `dir`.
pub fn resolve(model: &mut ModelProto, dir: &Path) -> Result<(), String> {
    let mut files: HashMap<PathBuf, (File, u64)> = HashMap::new();
    if let Some(g) = model.graph.as_mut() {
        graph(g, dir, &mut files)?;
    }
    Ok(())
}

fn graph(g: &mut GraphProto, dir: &Path, files: &mut HashMap<PathBuf, (File, u64)>) -> Result<(), String> {
    for t in &mut g.initializer {
        tensor(t, dir, files)?;
    }
    for n in &mut g.node {
        for a in &mut n.attribute {
            if let Some(t) = a.t.as_mut() {
                tensor(t, dir, files)?;
            }
            for t in &mut a.tensors {
                tensor(t, dir, files)?;
            }
            if let Some(sub) = a.g.as_mut() {
                graph(sub, dir, files)?;
            }
            for sub in &mut a.graphs {
                graph(sub, dir, files)?;
            }
        }
    }
    Ok(())
}

fn tensor(t: &mut TensorProto, dir: &Path, files: &mut HashMap<PathBuf, (File, u64)>) -> Result<(), String> {
    if t.data_location != Some(1) && t.external_data.is_empty() {
        return Ok(());
    }
    let name = t.name.clone().unwrap_or_default();
    let what = format!("tensor `{name}`");
    let mut location = None;
    let (mut offset, mut length) = (0u64, None);
    for kv in &t.external_data {
        let value = kv.value.clone().unwrap_or_default();
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{what}: external data `{}` is not a byte count: {v:?}", kv.key.as_deref().unwrap_or("")));
        match kv.key.as_deref() {
            Some("location") => location = Some(value),
            Some("offset") => offset = number(&value)?,
            Some("length") => length = Some(number(&value)?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| format!("{what} keeps its data in an external file but names none (no `location`)"))?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(format!("{what}: external data location {location:?} must be a relative path inside the model's folder"));
    }
    let path = dir.join(rel);
    let (f, size) = match files.entry(path.clone()) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            let f = File::open(&path).map_err(|err| format!("{what} keeps its data in {}, which cannot be read: {err}", path.display()))?;
            let size = f.metadata().map_err(|err| format!("{what}: {}: {err}", path.display()))?.len();
            e.insert((f, size))
        }
    };
    let size = *size;
    let length = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!("{what}: bytes {offset}..{} of {} are past its end ({size} bytes)", offset.saturating_add(length), path.display()));
    }
    let mut bytes = vec![0u8; usize::try_from(length).map_err(|_| format!("{what} is too large"))?];
    f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_exact(&mut bytes)).map_err(|e| format!("{what}: reading {}: {e}", path.display()))?;
    t.raw_data = Some(bytes);
    t.external_data.clear();
    t.data_location = None;
    Ok(())
}
