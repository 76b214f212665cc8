//! The byte layout of a `.aoc` file, the manifest schema, and the error type.
//!
//! Everything here is shared by the writer and the reader so the two cannot
//! disagree about an offset or a field. `docs/artifact.md` is the byte-level
//! description; keep it in step with the constants below.
//!
//! Invariants: all integers are little endian; the header is [`HEADER_LEN`]
//! bytes and is the only part not covered by the checksum (it holds it); the
//! section table follows the header directly; every weight starts on a
//! [`WEIGHT_ALIGN`]-byte boundary of the file.

use std::fmt;

use serde::{Deserialize, Serialize};

/// First eight bytes of every artifact. The trailing `\x01` is the magic's
/// own revision, independent of [`FORMAT_VERSION`].
pub const MAGIC: [u8; 8] = *b"AOCART\0\x01";
/// The newest format version this runtime reads (and the one it writes).
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the fixed header: magic, version, flags, section count,
/// checksum, file length.
pub const HEADER_LEN: usize = 32;
/// Bytes of one section-table entry: kind, alignment, offset, length,
/// reserved.
pub const SECTION_ENTRY_LEN: usize = 32;
/// Alignment of the weights section and of every weight inside it, so that
/// an mmap (page aligned) yields pointers fit for 512-bit vector loads.
pub const WEIGHT_ALIGN: u64 = 64;
/// Alignment of each code blob inside the code section.
pub const CODE_ALIGN: u64 = 16;
/// Largest section alignment accepted; a bigger one is surely corruption.
pub const MAX_SECTION_ALIGN: u32 = 4096;

/// What a section holds. Each kind appears exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionKind {
    Manifest,
    Code,
    Weights,
}

impl SectionKind {
    pub const ALL: [SectionKind; 3] = [
        SectionKind::Manifest,
        SectionKind::Code,
        SectionKind::Weights,
    ];

    pub fn code(self) -> u32 {
        match self {
            SectionKind::Manifest => 1,
            SectionKind::Code => 2,
            SectionKind::Weights => 3,
        }
    }

    pub fn from_code(code: u32) -> Option<SectionKind> {
        SectionKind::ALL.into_iter().find(|k| k.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Manifest => "manifest",
            SectionKind::Code => "code",
            SectionKind::Weights => "weights",
        }
    }
}

/// One row of the section table, as read from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionEntry {
    pub kind: SectionKind,
    pub align: u32,
    pub offset: u64,
    pub length: u64,
}

pub use crate::dtype::DType;

/// Bytes of a dense tensor of `dtype` and `shape`, or `None` on overflow
/// (a hostile manifest may claim absurd shapes).
pub fn tensor_bytes(dtype: DType, shape: &[u64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
}

/// The manifest section: JSON describing everything the executor needs.
/// Unknown fields are rejected, so a typo in a hand-edited manifest is an
/// error rather than a silently ignored setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Target name, e.g. `x86-64-v4`.
    pub target: String,
    /// CPU features the code needs, named as `is_x86_feature_detected!`
    /// names them (`avx512f`, `avx512vnni`, ...).
    pub cpu_features: Vec<String>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Bytes of the per-inference arena.
    pub arena_size: u64,
    pub weights: Vec<WeightEntry>,
    pub code: Vec<CodeEntry>,
    /// The executor's plan; opaque to the artifact layer.
    pub plan: serde_json::Value,
}

/// A graph input or output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
}

/// A weight tensor; `offset` and `length` are relative to the start of the
/// weights section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightEntry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub offset: u64,
    pub length: u64,
}

/// A blob of machine code; `offset` and `length` are relative to the start
/// of the code section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeEntry {
    pub name: String,
    pub target: String,
    pub offset: u64,
    pub length: u64,
}

/// Why an artifact was refused (or could not be built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactErrorKind {
    /// Reading or writing the file failed.
    Io(String),
    /// The file is shorter (or longer) than its header says.
    Truncated {
        expected: u64,
        found: u64,
    },
    BadMagic,
    /// Version 0 or another version this runtime never wrote.
    UnsupportedVersion(u32),
    /// Written by a newer aoc.
    NewerVersion(u32),
    UnknownFlags(u32),
    Checksum,
    /// The section table is malformed (bounds, overlap, alignment, kinds).
    SectionTable(String),
    /// The manifest is not valid JSON or breaks the schema.
    Manifest(String),
    /// A weight entry is inconsistent (range, alignment, dtype × shape).
    Weight(String),
    /// A code entry is inconsistent (range, alignment).
    Code(String),
    /// Feature names this runtime does not know.
    UnknownCpuFeatures(Vec<String>),
    /// Features the artifact needs that this CPU lacks.
    MissingCpuFeatures {
        required: Vec<String>,
        missing: Vec<String>,
    },
    /// An accessor was asked for something the artifact does not have.
    NotFound(String),
    /// An accessor's request does not fit the data (e.g. f32 view of i8).
    Access(String),
    /// The writer was given inconsistent data.
    Build(String),
}

/// An error naming the artifact it concerns (`<memory>` for bytes that did
/// not come from a file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactError {
    pub file: String,
    pub kind: ArtifactErrorKind,
}

impl ArtifactError {
    pub fn new(file: &str, kind: ArtifactErrorKind) -> ArtifactError {
        ArtifactError {
            file: file.to_string(),
            kind,
        }
    }
}

impl fmt::Display for ArtifactError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        match &self.kind {
            ArtifactErrorKind::Io(msg) => write!(f, "{msg}"),
            ArtifactErrorKind::Truncated { expected, found } => {
                if found < expected {
                    write!(
                        f,
                        "the file is truncated: {found} bytes, the header says {expected}"
                    )
                } else {
                    write!(
                        f,
                        "the file has {found} bytes, the header says {expected}: it is corrupt"
                    )
                }
            }
            ArtifactErrorKind::BadMagic => write!(f, "not an aoc artifact (bad magic bytes)"),
            ArtifactErrorKind::UnsupportedVersion(v) => {
                write!(
                    f,
                    "artifact format version {v} is not supported by this runtime ({FORMAT_VERSION})"
                )
            }
            ArtifactErrorKind::NewerVersion(v) => write!(
                f,
                "artifact format version {v} is newer than this runtime ({FORMAT_VERSION}); rebuild it with this aoc"
            ),
            ArtifactErrorKind::UnknownFlags(flags) => write!(f, "unknown header flags {flags:#x}"),
            ArtifactErrorKind::Checksum => write!(f, "checksum mismatch: the file is corrupt"),
            ArtifactErrorKind::SectionTable(msg) => write!(f, "bad section table: {msg}"),
            ArtifactErrorKind::Manifest(msg) => write!(f, "bad manifest: {msg}"),
            ArtifactErrorKind::Weight(msg) => write!(f, "bad weight: {msg}"),
            ArtifactErrorKind::Code(msg) => write!(f, "bad code entry: {msg}"),
            ArtifactErrorKind::UnknownCpuFeatures(names) => {
                write!(
                    f,
                    "this artifact needs unknown cpu features: {}",
                    names.join(", ")
                )
            }
            ArtifactErrorKind::MissingCpuFeatures { required, missing } => write!(
                f,
                "this artifact needs {}; this CPU lacks {}",
                required.join(", "),
                missing.join(", ")
            ),
            ArtifactErrorKind::NotFound(msg) => write!(f, "{msg}"),
            ArtifactErrorKind::Access(msg) => write!(f, "{msg}"),
            ArtifactErrorKind::Build(msg) => write!(f, "cannot build artifact: {msg}"),
        }
    }
}

impl std::error::Error for ArtifactError {}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the checksum of
/// zip and PNG, from `crc32fast` (carry-less multiply where the CPU has it:
/// the artifact's weights are checksummed on every write and load, and the
/// byte-table loop this replaced was a tenth of `aoc quantize`'s time).
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// CPU feature names an artifact may require. A name outside this list is
/// an error: silently ignoring it could run code the CPU cannot execute.
pub const KNOWN_CPU_FEATURES: &[&str] = &[
    "sse2",
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "popcnt",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi1",
    "bmi2",
    "lzcnt",
    "avx512f",
    "avx512bw",
    "avx512cd",
    "avx512dq",
    "avx512vl",
    "avx512vnni",
    "avx512bf16",
    "avxvnni",
    // AMX is absent on purpose: `is_x86_feature_detected!("amx-tile")` is
    // still unstable, and AMX also needs the OS to grant tile state. It will
    // be added with a CPUID + XCR0 + arch_prctl probe.
];
