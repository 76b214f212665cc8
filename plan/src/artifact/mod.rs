//! The `.aoc` artifact: one file holding a JSON manifest, machine code per
//! target and weights aligned for mmap, behind a magic number, a format
//! version and a CRC-32 checksum. `docs/artifact.md` gives the byte layout.
//!
//! Invariants: an [`Artifact`] value exists only after the whole file was
//! validated (header, checksum, section table, manifest schema, every range,
//! dtype × shape = length, CPU features); a bad file is an [`ArtifactError`]
//! naming it, never a panic. [`ArtifactWriter`] runs the same validation, so
//! it never emits a file the reader refuses for its structure.

mod format;
mod read;
mod write;

#[cfg(test)]
mod tests;

pub use format::{
    ArtifactError, ArtifactErrorKind, CODE_ALIGN, CodeEntry, DType, FORMAT_VERSION, HEADER_LEN,
    KNOWN_CPU_FEATURES, MAGIC, Manifest, SECTION_ENTRY_LEN, SectionKind, TensorSpec, WEIGHT_ALIGN,
    WeightEntry, crc32, tensor_bytes,
};
pub use read::Artifact;
pub use write::ArtifactWriter;
