//! Building an artifact in memory: [`ArtifactWriter`] collects the manifest
//! fields, code blobs and weights, lays them out, and seals the checksum.
//!
//! Invariant: the writer never emits a file the reader would refuse for its
//! structure — `to_bytes` runs the reader's validation (all of it except the
//! host CPU check, since artifacts are often built for another machine)
//! before returning.

use std::path::Path;

use super::format::{
    ArtifactError, ArtifactErrorKind, CODE_ALIGN, CodeEntry, DType, FORMAT_VERSION, HEADER_LEN,
    MAGIC, Manifest, SECTION_ENTRY_LEN, SectionKind, TensorSpec, WEIGHT_ALIGN, WeightEntry, crc32,
    tensor_bytes,
};
use super::read::{CpuProbe, validate};

/// Collects everything an artifact holds; `to_bytes` lays it out.
#[derive(Clone, Debug)]
pub struct ArtifactWriter {
    target: String,
    cpu_features: Vec<String>,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    arena_size: u64,
    plan: serde_json::Value,
    code: Vec<(String, String, Vec<u8>)>,
    weights: Vec<(String, String, Vec<u64>, Vec<u8>)>,
}

impl ArtifactWriter {
    /// An empty artifact for `target` (e.g. `x86-64-v4`).
    pub fn new(target: &str) -> ArtifactWriter {
        ArtifactWriter {
            target: target.to_string(),
            cpu_features: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            arena_size: 0,
            plan: serde_json::Value::Null,
            code: Vec::new(),
            weights: Vec::new(),
        }
    }

    /// Requires a CPU feature (named as `is_x86_feature_detected!` names it).
    pub fn cpu_feature(&mut self, name: &str) -> &mut Self {
        self.cpu_features.push(name.to_string());
        self
    }

    pub fn input(&mut self, name: &str, dtype: &str, shape: &[u64]) -> &mut Self {
        self.inputs.push(TensorSpec {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
        });
        self
    }

    pub fn output(&mut self, name: &str, dtype: &str, shape: &[u64]) -> &mut Self {
        self.outputs.push(TensorSpec {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
        });
        self
    }

    pub fn arena_size(&mut self, bytes: u64) -> &mut Self {
        self.arena_size = bytes;
        self
    }

    /// The executor's plan, stored verbatim.
    pub fn plan(&mut self, plan: serde_json::Value) -> &mut Self {
        self.plan = plan;
        self
    }

    /// A code blob for `target`; it is placed on a [`CODE_ALIGN`] boundary.
    pub fn add_code(&mut self, name: &str, target: &str, bytes: &[u8]) -> &mut Self {
        self.code
            .push((name.to_string(), target.to_string(), bytes.to_vec()));
        self
    }

    /// A dense weight tensor, raw little-endian bytes; it is placed on a
    /// [`WEIGHT_ALIGN`] boundary of the file. Consistency (dtype known,
    /// length = element size × shape) is checked by `to_bytes`.
    pub fn add_weight(
        &mut self,
        name: &str,
        dtype: &str,
        shape: &[u64],
        bytes: &[u8],
    ) -> &mut Self {
        self.weights.push((
            name.to_string(),
            dtype.to_string(),
            shape.to_vec(),
            bytes.to_vec(),
        ));
        self
    }

    /// Convenience for f32 weights: stores `values` little endian.
    pub fn add_weight_f32(&mut self, name: &str, shape: &[u64], values: &[f32]) -> &mut Self {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_weight(name, DType::F32.name(), shape, &bytes)
    }

    /// The manifest and section payloads this writer would produce.
    fn layout(&self) -> Result<(Manifest, Vec<u8>, Vec<u8>), ArtifactError> {
        let build_err = |msg: String| ArtifactError::new("<writer>", ArtifactErrorKind::Build(msg));
        let mut code = Vec::new();
        let mut code_entries = Vec::new();
        for (name, target, bytes) in &self.code {
            pad_to(&mut code, CODE_ALIGN);
            code_entries.push(CodeEntry {
                name: name.clone(),
                target: target.clone(),
                offset: code.len() as u64,
                length: bytes.len() as u64,
            });
            code.extend_from_slice(bytes);
        }
        let mut weights = Vec::new();
        let mut weight_entries = Vec::new();
        for (name, dtype, shape, bytes) in &self.weights {
            // Report the writer's caller mistakes in the caller's terms,
            // before the generic validation sees them.
            let dt = DType::parse(dtype)
                .ok_or_else(|| build_err(format!("weight `{name}`: unknown dtype `{dtype}`")))?;
            if tensor_bytes(dt, shape) != Some(bytes.len() as u64) {
                return Err(build_err(format!(
                    "weight `{name}`: {} bytes given, {dtype} {shape:?} needs {}",
                    bytes.len(),
                    tensor_bytes(dt, shape).map_or("more than 2^64".to_string(), |n| n.to_string())
                )));
            }
            pad_to(&mut weights, WEIGHT_ALIGN);
            weight_entries.push(WeightEntry {
                name: name.clone(),
                dtype: dtype.clone(),
                shape: shape.clone(),
                offset: weights.len() as u64,
                length: bytes.len() as u64,
            });
            weights.extend_from_slice(bytes);
        }
        let manifest = Manifest {
            target: self.target.clone(),
            cpu_features: self.cpu_features.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            arena_size: self.arena_size,
            weights: weight_entries,
            code: code_entries,
            plan: self.plan.clone(),
        };
        Ok((manifest, code, weights))
    }

    /// The complete file, validated.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ArtifactError> {
        let (manifest, code, weights) = self.layout()?;
        let json = serde_json::to_vec(&manifest).map_err(|e| {
            ArtifactError::new(
                "<writer>",
                ArtifactErrorKind::Build(format!("cannot serialize the manifest: {e}")),
            )
        })?;
        let bytes = assemble(&json, &code, &weights);
        // Skip only the host check: the target machine is not this one.
        validate("<writer>", &bytes, CpuProbe::Skip)
            .map_err(|e| ArtifactError::new("<writer>", ArtifactErrorKind::Build(e.to_string())))?;
        Ok(bytes)
    }

    /// Writes the complete file to `path`.
    pub fn write_to(&self, path: &Path) -> Result<(), ArtifactError> {
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|e| {
            ArtifactError::new(
                &path.display().to_string(),
                ArtifactErrorKind::Io(format!("cannot write: {e}")),
            )
        })
    }
}

fn pad_to(buf: &mut Vec<u8>, align: u64) {
    let rem = buf.len() as u64 % align;
    if rem != 0 {
        buf.resize(buf.len() + (align - rem) as usize, 0);
    }
}

/// Lays out header, section table and the three payloads, and seals the
/// checksum. Does no validation: tests use it to build files that are
/// structurally sound but semantically wrong.
pub(crate) fn assemble(manifest: &[u8], code: &[u8], weights: &[u8]) -> Vec<u8> {
    let sections: [(SectionKind, u64, &[u8]); 3] = [
        (SectionKind::Manifest, 8, manifest),
        (SectionKind::Code, 64, code),
        (SectionKind::Weights, WEIGHT_ALIGN, weights),
    ];
    let mut out = vec![0u8; HEADER_LEN + sections.len() * SECTION_ENTRY_LEN];
    out[0..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&0u32.to_le_bytes());
    out[16..20].copy_from_slice(&(sections.len() as u32).to_le_bytes());
    for (i, (kind, align, payload)) in sections.iter().enumerate() {
        pad_to(&mut out, *align);
        let offset = out.len() as u64;
        out.extend_from_slice(payload);
        let e = HEADER_LEN + i * SECTION_ENTRY_LEN;
        out[e..e + 4].copy_from_slice(&kind.code().to_le_bytes());
        out[e + 4..e + 8].copy_from_slice(&(*align as u32).to_le_bytes());
        out[e + 8..e + 16].copy_from_slice(&offset.to_le_bytes());
        out[e + 16..e + 24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        // e + 24..e + 32 reserved, zero.
    }
    seal(&mut out);
    out
}

/// Writes the file length and the checksum into the header.
pub(crate) fn seal(bytes: &mut [u8]) {
    let len = bytes.len() as u64;
    bytes[24..32].copy_from_slice(&len.to_le_bytes());
    let crc = crc32(&bytes[HEADER_LEN..]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
}
