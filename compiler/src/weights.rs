//! External weights: `.safetensors` files named by a module's
//! `weights @name = "file.safetensors"` declarations.
//!
//! [`SafetensorsWeights`] is the interpreter's [`WeightSource`] over those
//! files. A file is opened and memory-mapped on the first request for one of
//! its tensors, its header parsed once and cached; tensors are converted to
//! interpreter [`Tensor`]s on demand, so a model whose run touches few weights
//! reads few bytes.
//!
//! Invariants: paths are resolved relative to the `.air` file's folder; every
//! failure (missing file, corrupt header, missing key, dtype or shape that
//! disagrees with the constant's declared type) is an `Err` naming the file
//! and key, never a panic. Quantized element types are stored as their
//! storage type (`i8` for `!quant.uniform<i8:f32, ...>`). A `#sparse.nm`
//! tensor is stored compressed: its kept values under its key and the
//! packed index of each within its group under `KEY.nm_indices` (u8).

use aoc_ir::interp::WeightSource;
use aoc_ir::ops::sparse;
use aoc_ir::module::{Module, WeightsDecl};
use aoc_ir::tensor::Tensor;
use aoc_ir::types::{Scalar, TensorType};
use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensors, TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// An opened, validated safetensors file.
struct Opened {
    mmap: Mmap,
    /// Byte offset where the data section starts (8 + header length).
    data_start: usize,
    meta: Metadata,
}

/// A [`WeightSource`] over the safetensors files a module declares.
pub struct SafetensorsWeights {
    base: PathBuf,
    /// Declaration name -> path as written in the `.air` file.
    decls: Vec<(String, String)>,
    /// Opened files by declaration name. Only successes are cached, so a
    /// file fixed between two loads is picked up.
    cache: Mutex<HashMap<String, Arc<Opened>>>,
}

impl SafetensorsWeights {
    /// A source for `decls`, resolving their paths against `base` (the folder
    /// of the `.air` file).
    pub fn new(base: impl Into<PathBuf>, decls: &[WeightsDecl]) -> SafetensorsWeights {
        SafetensorsWeights {
            base: base.into(),
            decls: decls
                .iter()
                .map(|d| (d.name.clone(), d.path.clone()))
                .collect(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A source for `module`'s declarations, read from the file `air_path`.
    pub fn for_module(module: &Module, air_path: &Path) -> SafetensorsWeights {
        let base = air_path.parent().map(Path::to_path_buf).unwrap_or_default();
        SafetensorsWeights::new(base, &module.weights)
    }

    fn open(&self, file: &str) -> Result<(String, Arc<Opened>), String> {
        let Some((_, written)) = self.decls.iter().find(|(n, _)| n == file) else {
            return Err(format!("no weights file is declared as @{file}"));
        };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = cache.get(file) {
            return Ok((written.clone(), o.clone()));
        }
        let path = self.base.join(written);
        let opened = open_file(&path).map_err(|m| format!("{written}: {m}"))?;
        let opened = Arc::new(opened);
        cache.insert(file.to_string(), opened.clone());
        Ok((written.clone(), opened))
    }
}

fn open_file(path: &Path) -> Result<Opened, String> {
    let f = std::fs::File::open(path)
        .map_err(|e| format!("cannot open weights file {}: {e}", path.display()))?;
    // SAFETY: the map is read-only; like every mmap user we assume the file is
    // not truncated by another process while the module runs.
    let mmap = unsafe { Mmap::map(&f) }
        .map_err(|e| format!("cannot map weights file {}: {e}", path.display()))?;
    let (n, meta) = SafeTensors::read_metadata(&mmap)
        .map_err(|e| format!("not a valid safetensors file: {e}"))?;
    Ok(Opened {
        mmap,
        data_start: 8 + n,
        meta,
    })
}

impl SafetensorsWeights {
    /// Checks that `@file["key"]` exists with `ty`'s dtype and shape, from
    /// the file's header only (what `aoc check` runs on every constant).
    pub fn check(&self, file: &str, key: &str, ty: &TensorType) -> Result<(), String> {
        if let Some(shape) = sparse::values_shape(ty) {
            self.check(file, key, &TensorType::new(shape, ty.elem.clone()))?;
            let meta = TensorType::new(vec![sparse::meta_len(ty).unwrap_or(0)], Scalar::U8);
            return self.check(file, &sparse_meta_key(key), &meta);
        }
        let (written, opened) = self.open(file)?;
        let info = opened
            .meta
            .info(key)
            .ok_or_else(|| format!("{written}: no tensor \"{key}\""))?;
        let want = ty.elem.storage();
        if scalar_of(info.dtype) != Some(want) || info.shape != ty.shape {
            return Err(format!(
                "{written}: tensor \"{key}\" is {:?} with shape {:?}, but the constant declares {ty}",
                info.dtype, info.shape
            ));
        }
        let (start, end) = info.data_offsets;
        if opened.data_start + end > opened.mmap.len() || start > end {
            return Err(format!("{written}: tensor \"{key}\" lies outside the file"));
        }
        Ok(())
    }
}

impl WeightSource for SafetensorsWeights {
    fn load(&self, file: &str, key: &str, ty: &TensorType) -> Result<Tensor, String> {
        if let Some(shape) = sparse::values_shape(ty) {
            // Stored compressed: the kept values and their indices.
            let values = self.load(file, key, &TensorType::new(shape, ty.elem.clone()))?;
            let meta_key = sparse_meta_key(key);
            let meta = self.load(file, &meta_key, &TensorType::new(vec![sparse::meta_len(ty).unwrap_or(0)], Scalar::U8))?;
            let bytes: Vec<u8> = meta.to_i64().into_iter().map(|b| b as u8).collect();
            let (written, _) = self.open(file)?;
            return sparse::decompress(ty, &values, &bytes).map_err(|m| format!("{written}: tensor \"{key}\": {m}"));
        }
        let (written, opened) = self.open(file)?;
        let info = opened
            .meta
            .info(key)
            .ok_or_else(|| format!("{written}: no tensor \"{key}\""))?;
        let want = ty.elem.storage();
        let found = scalar_of(info.dtype);
        if found != Some(want) || info.shape != ty.shape {
            return Err(format!(
                "{written}: tensor \"{key}\" is {:?} with shape {:?}, but the constant declares {ty} (stored as {})",
                info.dtype,
                info.shape,
                dtype_of(want).map_or("an unsupported dtype".to_string(), |d| format!("{d:?}"))
            ));
        }
        let (start, end) = info.data_offsets;
        let bytes = opened
            .mmap
            .get(opened.data_start + start..opened.data_start + end)
            .ok_or_else(|| format!("{written}: tensor \"{key}\" lies outside the file"))?;
        let data = decode(want, bytes).map_err(|m| format!("{written}: tensor \"{key}\": {m}"))?;
        if data.len() != ty.num_elements() {
            return Err(format!(
                "{written}: tensor \"{key}\" holds {} elements, expected {}",
                data.len(),
                ty.num_elements()
            ));
        }
        Ok(Tensor {
            ty: ty.clone(),
            data,
        })
    }
}

/// The key of a sparse tensor's metadata, beside its values under `key`.
pub fn sparse_meta_key(key: &str) -> String {
    format!("{key}.nm_indices")
}

/// The aoc scalar a safetensors dtype holds, if aoc has one.
pub fn scalar_of(d: Dtype) -> Option<Scalar> {
    Some(match d {
        Dtype::F64 => Scalar::F64,
        Dtype::F32 => Scalar::F32,
        Dtype::F16 => Scalar::F16,
        Dtype::BF16 => Scalar::BF16,
        Dtype::F8_E4M3 => Scalar::F8E4M3FN,
        Dtype::F8_E5M2 => Scalar::F8E5M2,
        Dtype::I64 => Scalar::I64,
        Dtype::I32 => Scalar::I32,
        Dtype::I16 => Scalar::I16,
        Dtype::I8 => Scalar::I8,
        Dtype::U64 => Scalar::U64,
        Dtype::U32 => Scalar::U32,
        Dtype::U16 => Scalar::U16,
        Dtype::U8 => Scalar::U8,
        Dtype::BOOL => Scalar::I1,
        _ => return None,
    })
}

/// The safetensors dtype that stores `s`.
pub fn dtype_of(s: Scalar) -> Option<Dtype> {
    Some(match s {
        Scalar::F64 => Dtype::F64,
        Scalar::F32 => Dtype::F32,
        Scalar::F16 => Dtype::F16,
        Scalar::BF16 => Dtype::BF16,
        Scalar::F8E4M3FN => Dtype::F8_E4M3,
        Scalar::F8E5M2 => Dtype::F8_E5M2,
        Scalar::I64 => Dtype::I64,
        Scalar::I32 => Dtype::I32,
        Scalar::I16 => Dtype::I16,
        Scalar::I8 => Dtype::I8,
        Scalar::U64 => Dtype::U64,
        Scalar::U32 => Dtype::U32,
        Scalar::U16 => Dtype::U16,
        Scalar::U8 => Dtype::U8,
        Scalar::I1 => Dtype::BOOL,
    })
}

pub use aoc_ir::bytes::{decode, encode, f8_to_f64, f64_to_f8};

/// A tensor ready for safetensors serialization.
struct Owned {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl safetensors::View for &Owned {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes `tensors` to a safetensors file at `path`, each in the dtype of
/// its element type's storage scalar (through a temporary file renamed into
/// place, `crate::output`).
pub fn save_safetensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<(), String> {
    crate::output::write_file(path, &safetensors_bytes(path, tensors)?)
}

/// The bytes of the safetensors file [`save_safetensors`] writes (`path`
/// only names it in messages).
pub fn safetensors_bytes(path: &Path, tensors: &[(String, Tensor)]) -> Result<Vec<u8>, String> {
    let mut seen = std::collections::HashSet::new();
    let mut owned = Vec::with_capacity(tensors.len());
    let mut stored: Vec<(String, Tensor)> = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if sparse::nm(&t.ty).is_none() {
            stored.push((name.clone(), t.clone()));
            continue;
        }
        let (values, meta) = sparse::compress(t).map_err(|m| format!("{}: tensor \"{name}\": {m}", path.display()))?;
        let meta_ty = TensorType::new(vec![meta.len()], Scalar::U8);
        stored.push((name.clone(), values));
        stored.push((sparse_meta_key(name), Tensor::from_i64(meta_ty, meta.into_iter().map(i64::from).collect())));
    }
    for (name, t) in &stored {
        if !seen.insert(name.as_str()) {
            return Err(format!(
                "{}: tensor \"{name}\" is given twice",
                path.display()
            ));
        }
        let s = t.ty.elem.storage();
        let dtype = dtype_of(s)
            .ok_or_else(|| format!("{}: cannot store {s} in safetensors", path.display()))?;
        owned.push((
            name.clone(),
            Owned {
                dtype,
                shape: t.ty.shape.clone(),
                bytes: encode(s, &t.data),
            },
        ));
    }
    let views = owned.iter().map(|(n, o)| (n.clone(), o));
    // Serialized in memory (not through safetensors' temp-file writer,
    // which leaves the file readable by its owner only).
    safetensors::serialize(views, None).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Reads every tensor of a safetensors file into memory (for tests and
/// small files; the interpreter uses [`SafetensorsWeights`]).
pub fn read_safetensors(path: &Path) -> Result<Vec<(String, Tensor)>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("{}: not a valid safetensors file: {e}", path.display()))?;
    let mut out: Vec<(String, Tensor)> = Vec::new();
    for (name, view) in st.iter() {
        out.push((
            name.to_string(),
            view_to_tensor(&view).map_err(|m| format!("{}: \"{name}\": {m}", path.display()))?,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn view_to_tensor(view: &TensorView<'_>) -> Result<Tensor, String> {
    let s = scalar_of(view.dtype())
        .ok_or_else(|| format!("dtype {:?} is not supported", view.dtype()))?;
    let data = decode(s, view.data())?;
    Ok(Tensor {
        ty: TensorType::new(view.shape().to_vec(), s),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_codec_round_trips_every_byte() {
        for s in [Scalar::F8E4M3FN, Scalar::F8E5M2] {
            for b in 0..=255u8 {
                let v = f8_to_f64(s, b);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(f64_to_f8(s, v), b, "{s} byte {b:#04x} = {v}");
            }
        }
        assert_eq!(f8_to_f64(Scalar::F8E4M3FN, 0x7e), 448.0);
        assert_eq!(f8_to_f64(Scalar::F8E4M3FN, 0x01), 2f64.powi(-9));
        assert_eq!(f8_to_f64(Scalar::F8E5M2, 0x7b), 57344.0);
        assert_eq!(f8_to_f64(Scalar::F8E5M2, 0xfc), f64::NEG_INFINITY);
        assert_eq!(f8_to_f64(Scalar::F8E4M3FN, 0x38), 1.0);
    }

    /// A `#sparse.nm` tensor is stored as its values and packed indices,
    /// and loads (and checks) back as the dense tensor.
    #[test]
    fn sparse_tensors_are_stored_compressed() {
        let dense = Tensor::from_f64(TensorType::new(vec![2, 8], Scalar::F32), (0..16).map(|i| i as f64 - 7.5).collect());
        let t = aoc_ir::ops::sparse::prune(&dense, 2, 4).unwrap();
        let d = std::env::temp_dir().join(format!("aoc-sparse-st-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("w.safetensors");
        save_safetensors(&path, &[("w".to_string(), t.clone())]).unwrap();
        let raw = read_safetensors(&path).unwrap();
        let names: Vec<&str> = raw.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["w", "w.nm_indices"]);
        assert_eq!(raw[0].1.ty.shape, vec![2, 4]);
        assert_eq!(raw[1].1.ty.shape, vec![2]);
        let decl = aoc_ir::module::WeightsDecl { name: "weights".into(), path: "w.safetensors".into(), loc: Default::default() };
        let src = SafetensorsWeights::new(&d, &[decl]);
        src.check("weights", "w", &t.ty).unwrap();
        assert_eq!(src.load("weights", "w", &t.ty).unwrap(), t);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn encode_decode_all_scalars() {
        for s in Scalar::ALL {
            let vals: Vec<f64> = match s {
                _ if s.is_float() => vec![0.0, -1.5, 2.0, 0.25],
                Scalar::I1 => vec![0.0, 1.0, 1.0, 0.0],
                _ if s.is_signed_int() => vec![-3.0, 0.0, 7.0, 100.0],
                _ => vec![3.0, 0.0, 7.0, 200.0],
            };
            let t = Tensor::from_f64(TensorType::new(vec![4], s), vals);
            let bytes = encode(s, &t.data);
            assert_eq!(bytes.len(), 4 * (s.bits() as usize).div_ceil(8), "{s}");
            assert_eq!(decode(s, &bytes).unwrap(), t.data, "{s}");
        }
    }
}
