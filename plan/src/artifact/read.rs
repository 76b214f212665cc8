//! Loading an artifact: [`Artifact::open`] maps the file, [`Artifact::from_bytes`]
//! copies a buffer; both validate every byte they will later hand out
//! before returning.
//!
//! Invariants: a value of type [`Artifact`] has passed all checks — header,
//! checksum, section table, manifest schema, every weight and code range,
//! dtype × shape = length, CPU features — so its accessors only look up
//! names and never index out of bounds. Validation never panics: every
//! offset arithmetic is checked, every slice is taken with `get`.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::ops::Range;
use std::path::Path;

use memmap2::Mmap;

use super::format::{
    ArtifactError, ArtifactErrorKind, CODE_ALIGN, DType, FORMAT_VERSION, HEADER_LEN,
    KNOWN_CPU_FEATURES, MAGIC, MAX_SECTION_ALIGN, Manifest, SECTION_ENTRY_LEN, SectionEntry,
    SectionKind, TensorSpec, WEIGHT_ALIGN, crc32, tensor_bytes,
};

/// Name used in errors for artifacts that did not come from a file.
const MEMORY_NAME: &str = "<memory>";

/// How to check the artifact's required CPU features.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CpuProbe<'a> {
    /// Ask this CPU (`is_x86_feature_detected!`).
    Host,
    /// Check names only (the writer builds for other machines).
    Skip,
    /// Pretend the CPU has exactly these features (tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Only(&'a [&'a str]),
}

impl CpuProbe<'_> {
    fn has(&self, feature: &str) -> bool {
        match self {
            CpuProbe::Host => host_has(feature),
            CpuProbe::Skip => true,
            CpuProbe::Only(list) => list.contains(&feature),
        }
    }
}

/// Whether this CPU has `feature` (one of [`KNOWN_CPU_FEATURES`]). The
/// macro needs a literal, hence the exhaustive list.
#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
fn host_has(feature: &str) -> bool {
    use std::is_x86_feature_detected as d;
    match feature {
        "sse2" => d!("sse2"),
        "sse3" => d!("sse3"),
        "ssse3" => d!("ssse3"),
        "sse4.1" => d!("sse4.1"),
        "sse4.2" => d!("sse4.2"),
        "popcnt" => d!("popcnt"),
        "avx" => d!("avx"),
        "avx2" => d!("avx2"),
        "fma" => d!("fma"),
        "f16c" => d!("f16c"),
        "bmi1" => d!("bmi1"),
        "bmi2" => d!("bmi2"),
        "lzcnt" => d!("lzcnt"),
        "avx512f" => d!("avx512f"),
        "avx512bw" => d!("avx512bw"),
        "avx512cd" => d!("avx512cd"),
        "avx512dq" => d!("avx512dq"),
        "avx512vl" => d!("avx512vl"),
        "avx512vnni" => d!("avx512vnni"),
        "avx512bf16" => d!("avx512bf16"),
        "avxvnni" => d!("avxvnni"),
        _ => false,
    }
}

/// Off x86 no x86 feature is present: the artifact's code cannot run here.
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
fn host_has(_feature: &str) -> bool {
    false
}

/// What validation learned: the manifest and where the payloads lie.
#[derive(Debug)]
pub(crate) struct Validated {
    pub manifest: Manifest,
    pub code: Range<usize>,
    pub weights: Range<usize>,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Checks everything about `bytes` and returns the parsed manifest and the
/// payload ranges. `name` is used in error messages.
pub(crate) fn validate(
    name: &str,
    bytes: &[u8],
    cpu: CpuProbe<'_>,
) -> Result<Validated, ArtifactError> {
    let err = |kind| ArtifactError::new(name, kind);
    let found = bytes.len() as u64;
    // Magic first, so that an arbitrary short file is called "not an
    // artifact" rather than "truncated".
    if bytes.len() < MAGIC.len() {
        return Err(err(if MAGIC.starts_with(bytes) {
            ArtifactErrorKind::Truncated {
                expected: HEADER_LEN as u64,
                found,
            }
        } else {
            ArtifactErrorKind::BadMagic
        }));
    }
    if bytes[..8] != MAGIC {
        return Err(err(ArtifactErrorKind::BadMagic));
    }
    if bytes.len() < HEADER_LEN {
        return Err(err(ArtifactErrorKind::Truncated {
            expected: HEADER_LEN as u64,
            found,
        }));
    }
    let version = u32_at(bytes, 8);
    if version > FORMAT_VERSION {
        return Err(err(ArtifactErrorKind::NewerVersion(version)));
    }
    if version == 0 {
        return Err(err(ArtifactErrorKind::UnsupportedVersion(version)));
    }
    let expected = u64_at(bytes, 24);
    if expected != found {
        return Err(err(ArtifactErrorKind::Truncated { expected, found }));
    }
    let flags = u32_at(bytes, 12);
    if flags != 0 {
        return Err(err(ArtifactErrorKind::UnknownFlags(flags)));
    }
    if crc32(&bytes[HEADER_LEN..]) != u32_at(bytes, 20) {
        return Err(err(ArtifactErrorKind::Checksum));
    }
    let sections =
        read_section_table(bytes).map_err(|m| err(ArtifactErrorKind::SectionTable(m)))?;
    let range_of = |kind: SectionKind| {
        let s = sections
            .iter()
            .find(|s| s.kind == kind)
            .expect("read_section_table returns every kind");
        // Fits in usize: bounded by bytes.len() in read_section_table.
        s.offset as usize..(s.offset + s.length) as usize
    };
    let manifest_range = range_of(SectionKind::Manifest);
    let code = range_of(SectionKind::Code);
    let weights = range_of(SectionKind::Weights);
    let manifest: Manifest = serde_json::from_slice(&bytes[manifest_range]).map_err(|e| {
        err(ArtifactErrorKind::Manifest(format!(
            "not valid manifest JSON: {e}"
        )))
    })?;
    check_manifest(&manifest, code.len() as u64, weights.len() as u64).map_err(err)?;
    check_cpu_features(&manifest.cpu_features, cpu).map_err(err)?;
    Ok(Validated {
        manifest,
        code,
        weights,
    })
}

/// Parses the section table and checks bounds, alignment, kinds and overlap.
fn read_section_table(bytes: &[u8]) -> Result<Vec<SectionEntry>, String> {
    let count = u32_at(bytes, 16) as usize;
    if count != SectionKind::ALL.len() {
        return Err(format!(
            "expected {} sections, found {count}",
            SectionKind::ALL.len()
        ));
    }
    let table_end = HEADER_LEN + count * SECTION_ENTRY_LEN;
    if table_end > bytes.len() {
        return Err("the section table runs past the end of the file".to_string());
    }
    let mut entries: Vec<SectionEntry> = Vec::with_capacity(count);
    for i in 0..count {
        let e = HEADER_LEN + i * SECTION_ENTRY_LEN;
        let code = u32_at(bytes, e);
        let kind = SectionKind::from_code(code)
            .ok_or_else(|| format!("section {i} has unknown kind {code}"))?;
        let align = u32_at(bytes, e + 4);
        let offset = u64_at(bytes, e + 8);
        let length = u64_at(bytes, e + 16);
        let what = kind.name();
        if u64_at(bytes, e + 24) != 0 {
            return Err(format!("{what} section: reserved field is not zero"));
        }
        if entries.iter().any(|s| s.kind == kind) {
            return Err(format!("{what} section appears twice"));
        }
        if !align.is_power_of_two() || align > MAX_SECTION_ALIGN {
            return Err(format!(
                "{what} section: alignment {align} is not a power of two up to {MAX_SECTION_ALIGN}"
            ));
        }
        if kind == SectionKind::Weights && (align as u64) < WEIGHT_ALIGN {
            return Err(format!(
                "weights section: alignment must be at least {WEIGHT_ALIGN}, found {align}"
            ));
        }
        if !offset.is_multiple_of(align as u64) {
            return Err(format!(
                "{what} section: offset {offset} is not a multiple of its alignment {align}"
            ));
        }
        let end = offset
            .checked_add(length)
            .filter(|&end| end <= bytes.len() as u64);
        if end.is_none() {
            return Err(format!(
                "{what} section: bytes {offset}..+{length} lie outside the file ({} bytes)",
                bytes.len()
            ));
        }
        if offset < table_end as u64 {
            return Err(format!(
                "{what} section: offset {offset} overlaps the header or section table"
            ));
        }
        entries.push(SectionEntry {
            kind,
            align,
            offset,
            length,
        });
    }
    let mut sorted = entries.clone();
    sorted.sort_by_key(|s| s.offset);
    for pair in sorted.windows(2) {
        if pair[0].offset + pair[0].length > pair[1].offset {
            return Err(format!(
                "{} and {} sections overlap",
                pair[0].kind.name(),
                pair[1].kind.name()
            ));
        }
    }
    Ok(entries)
}

fn check_tensor_specs(what: &str, specs: &[TensorSpec]) -> Result<(), ArtifactErrorKind> {
    let bad = |m: String| ArtifactErrorKind::Manifest(m);
    let mut names = HashSet::new();
    for t in specs {
        if t.name.is_empty() {
            return Err(bad(format!("{what} with an empty name")));
        }
        if !names.insert(t.name.as_str()) {
            return Err(bad(format!("{what} `{}` appears twice", t.name)));
        }
        let dt = DType::parse(&t.dtype)
            .ok_or_else(|| bad(format!("{what} `{}`: unknown dtype `{}`", t.name, t.dtype)))?;
        if tensor_bytes(dt, &t.shape).is_none() {
            return Err(bad(format!(
                "{what} `{}`: shape {:?} is too large",
                t.name, t.shape
            )));
        }
    }
    Ok(())
}

/// Checks that `entries` (offset, length, name) do not overlap.
fn check_disjoint(entries: &mut [(u64, u64, &str)]) -> Result<(), String> {
    entries.sort_unstable();
    for pair in entries.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            return Err(format!("`{}` and `{}` overlap", pair[0].2, pair[1].2));
        }
    }
    Ok(())
}

/// Schema and range checks of the manifest against the payload sizes.
fn check_manifest(m: &Manifest, code_len: u64, weights_len: u64) -> Result<(), ArtifactErrorKind> {
    if m.target.is_empty() {
        return Err(ArtifactErrorKind::Manifest(
            "target name is empty".to_string(),
        ));
    }
    check_tensor_specs("input", &m.inputs)?;
    check_tensor_specs("output", &m.outputs)?;

    let werr = ArtifactErrorKind::Weight;
    let mut names = HashSet::new();
    let mut spans = Vec::with_capacity(m.weights.len());
    for w in &m.weights {
        let n = &w.name;
        if !names.insert(n.as_str()) {
            return Err(werr(format!("`{n}` appears twice")));
        }
        let dt = DType::parse(&w.dtype)
            .ok_or_else(|| werr(format!("`{n}`: unknown dtype `{}`", w.dtype)))?;
        match tensor_bytes(dt, &w.shape) {
            Some(len) if len == w.length => {}
            Some(len) => {
                return Err(werr(format!(
                    "`{n}`: {} {:?} needs {len} bytes, the entry says {}",
                    w.dtype, w.shape, w.length
                )));
            }
            None => return Err(werr(format!("`{n}`: shape {:?} is too large", w.shape))),
        }
        if !w.offset.is_multiple_of(WEIGHT_ALIGN) {
            return Err(werr(format!(
                "`{n}`: offset {} is not a multiple of {WEIGHT_ALIGN}",
                w.offset
            )));
        }
        if w.offset
            .checked_add(w.length)
            .is_none_or(|end| end > weights_len)
        {
            return Err(werr(format!(
                "`{n}`: bytes {}..+{} lie outside the weights section ({weights_len} bytes)",
                w.offset, w.length
            )));
        }
        spans.push((w.offset, w.length, n.as_str()));
    }
    check_disjoint(&mut spans).map_err(|m| werr(format!("weights {m}")))?;

    let cerr = ArtifactErrorKind::Code;
    let mut names = HashSet::new();
    let mut spans = Vec::with_capacity(m.code.len());
    for c in &m.code {
        let n = &c.name;
        if !names.insert(n.as_str()) {
            return Err(cerr(format!("`{n}` appears twice")));
        }
        if !c.offset.is_multiple_of(CODE_ALIGN) {
            return Err(cerr(format!(
                "`{n}`: offset {} is not a multiple of {CODE_ALIGN}",
                c.offset
            )));
        }
        if c.offset
            .checked_add(c.length)
            .is_none_or(|end| end > code_len)
        {
            return Err(cerr(format!(
                "`{n}`: bytes {}..+{} lie outside the code section ({code_len} bytes)",
                c.offset, c.length
            )));
        }
        spans.push((c.offset, c.length, n.as_str()));
    }
    check_disjoint(&mut spans).map_err(|m| cerr(format!("code blobs {m}")))?;
    Ok(())
}

fn check_cpu_features(required: &[String], cpu: CpuProbe<'_>) -> Result<(), ArtifactErrorKind> {
    let unknown: Vec<String> = required
        .iter()
        .filter(|f| !KNOWN_CPU_FEATURES.contains(&f.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(ArtifactErrorKind::UnknownCpuFeatures(unknown));
    }
    let missing: Vec<String> = required.iter().filter(|f| !cpu.has(f)).cloned().collect();
    if !missing.is_empty() {
        return Err(ArtifactErrorKind::MissingCpuFeatures {
            required: required.to_vec(),
            missing,
        });
    }
    Ok(())
}

/// A zeroed buffer with room for `n` bytes starting at a 64-byte boundary
/// (a `Vec<u8>` is only byte aligned), and that start, so weight pointers
/// are aligned as in a map.
fn aligned_buffer(n: usize) -> (Vec<u8>, usize) {
    let buf = vec![0u8; n + WEIGHT_ALIGN as usize];
    let start = buf
        .as_ptr()
        .align_offset(WEIGHT_ALIGN as usize)
        .min(WEIGHT_ALIGN as usize);
    (buf, start)
}

/// Artifacts up to this size are read into memory by [`Artifact::open`];
/// larger ones are memory-mapped.
pub const COPY_LIMIT: u64 = 1 << 30;

/// The artifact's bytes: a read-only map of the file, or an owned copy
/// placed on a 64-byte boundary so weights are as aligned as in a map.
enum Storage {
    Mapped(Mmap),
    Owned {
        buf: Vec<u8>,
        start: usize,
        len: usize,
    },
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(map) => map,
            Storage::Owned { buf, start, len } => &buf[*start..*start + *len],
        }
    }
}

/// A validated artifact. Cheap to query; holds the file mapped (or a copy).
pub struct Artifact {
    name: String,
    storage: Storage,
    manifest: Manifest,
    code: Range<usize>,
    weights: Range<usize>,
    weight_index: HashMap<String, usize>,
    code_index: HashMap<String, usize>,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("name", &self.name)
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

impl Artifact {
    /// Reads the file at `path` and validates it, checking the required CPU
    /// features against this CPU.
    ///
    /// Files up to [`COPY_LIMIT`] bytes (every artifact of the test and
    /// example models, and most deployed ones) are read into memory, so no
    /// later operation on the file by any process (rewriting, truncating,
    /// deleting) can affect a loaded artifact. Larger files are memory-mapped
    /// read-only to share the page cache; for those the file must not be
    /// truncated in place while the artifact is alive (aoc itself never does:
    /// it writes a new file and renames it over the old one, which leaves a
    /// mapping of the old one intact).
    pub fn open(path: &Path) -> Result<Artifact, ArtifactError> {
        Artifact::open_with(path, CpuProbe::Host)
    }

    /// Like [`Artifact::open`], every check but the CPU features: for
    /// reading an artifact built for another CPU (`aoc explain` of an
    /// AVX-512 artifact on an AVX2 machine), never for running it.
    pub fn open_for_inspection(path: &Path) -> Result<Artifact, ArtifactError> {
        Artifact::open_with(path, CpuProbe::Skip)
    }

    fn open_with(path: &Path, cpu: CpuProbe<'_>) -> Result<Artifact, ArtifactError> {
        let name = path.display().to_string();
        let io = |what: &str, e: std::io::Error| {
            ArtifactError::new(&name, ArtifactErrorKind::Io(format!("{what}: {e}")))
        };
        let meta = std::fs::metadata(path).map_err(|e| io("cannot open", e))?;
        if meta.is_dir() {
            return Err(ArtifactError::new(
                &name,
                ArtifactErrorKind::Io("is a directory, not an .aoc artifact".to_string()),
            ));
        }
        let mut file = File::open(path).map_err(|e| io("cannot open", e))?;
        let len = file
            .metadata()
            .map_err(|e| io("cannot read metadata", e))?
            .len();
        if len == 0 {
            // Mapping an empty file is an error on some systems; say what it is.
            return Err(ArtifactError::new(
                &name,
                ArtifactErrorKind::Truncated {
                    expected: HEADER_LEN as u64,
                    found: 0,
                },
            ));
        }
        if len <= COPY_LIMIT {
            use std::io::Read;
            // Read straight into a 64-byte-aligned copy. A file that changes
            // while it is read fails the checks below (sizes, checksum).
            let n = len as usize;
            let (mut buf, start) = aligned_buffer(n);
            file.read_exact(&mut buf[start..start + n]).map_err(|e| io("cannot read", e))?;
            return Artifact::build(name, Storage::Owned { buf, start, len: n }, cpu);
        }
        // SAFETY: the map is read-only and private to this process; its
        // contents are validated below before any use. The remaining hazard,
        // another process shrinking the file in place while it is mapped, is
        // documented above.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io("cannot map", e))?;
        Artifact::build(name, Storage::Mapped(map), cpu)
    }

    /// Copies `bytes` and validates them (errors name the file `<memory>`).
    pub fn from_bytes(bytes: impl AsRef<[u8]>) -> Result<Artifact, ArtifactError> {
        Artifact::from_bytes_named(MEMORY_NAME, bytes)
    }

    /// Like [`Artifact::from_bytes`], with `name` used in error messages.
    pub fn from_bytes_named(
        name: &str,
        bytes: impl AsRef<[u8]>,
    ) -> Result<Artifact, ArtifactError> {
        Artifact::from_bytes_with(name, bytes.as_ref(), CpuProbe::Host)
    }

    pub(crate) fn from_bytes_with(
        name: &str,
        bytes: &[u8],
        cpu: CpuProbe<'_>,
    ) -> Result<Artifact, ArtifactError> {
        let (mut buf, start) = aligned_buffer(bytes.len());
        buf[start..start + bytes.len()].copy_from_slice(bytes);
        Artifact::build(
            name.to_string(),
            Storage::Owned {
                buf,
                start,
                len: bytes.len(),
            },
            cpu,
        )
    }

    fn build(name: String, storage: Storage, cpu: CpuProbe<'_>) -> Result<Artifact, ArtifactError> {
        let Validated {
            manifest,
            code,
            weights,
        } = validate(&name, storage.bytes(), cpu)?;
        let weight_index = manifest
            .weights
            .iter()
            .enumerate()
            .map(|(i, w)| (w.name.clone(), i))
            .collect();
        let code_index = manifest
            .code
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Ok(Artifact {
            name,
            storage,
            manifest,
            code,
            weights,
            weight_index,
            code_index,
        })
    }

    /// The file name (or `<memory>`) used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// The weights section's byte range within [`Artifact::as_bytes`]
    /// (64-byte aligned in memory).
    pub fn weights_range(&self) -> Range<usize> {
        self.weights.clone()
    }

    fn error(&self, kind: ArtifactErrorKind) -> ArtifactError {
        ArtifactError::new(&self.name, kind)
    }

    /// The weight's bytes, starting on a 64-byte boundary in memory.
    pub fn weight(&self, name: &str) -> Result<&[u8], ArtifactError> {
        let &i = self.weight_index.get(name).ok_or_else(|| {
            self.error(ArtifactErrorKind::NotFound(format!(
                "no weight named `{name}`"
            )))
        })?;
        let w = &self.manifest.weights[i];
        // In range: checked by validation against the weights section.
        let start = self.weights.start + w.offset as usize;
        Ok(&self.as_bytes()[start..start + w.length as usize])
    }

    /// The weight as `f32` values, without copying. Fails if the weight is
    /// not `f32` (or, on a big-endian host, since the file is little endian).
    pub fn weight_f32(&self, name: &str) -> Result<&[f32], ArtifactError> {
        let bytes = self.weight(name)?;
        let w = &self.manifest.weights[self.weight_index[name]];
        if w.dtype != DType::F32.name() {
            return Err(self.error(ArtifactErrorKind::Access(format!(
                "weight `{name}` is {}, not f32",
                w.dtype
            ))));
        }
        if cfg!(target_endian = "big") {
            return Err(self.error(ArtifactErrorKind::Access(
                "f32 views need a little-endian host".to_string(),
            )));
        }
        // SAFETY: every bit pattern is a valid f32, and `align_to` only puts
        // correctly aligned whole elements in the middle slice; we use it only
        // when prefix and suffix are empty, i.e. the view covers all bytes.
        let (prefix, values, suffix) = unsafe { bytes.align_to::<f32>() };
        if !prefix.is_empty() || !suffix.is_empty() {
            return Err(self.error(ArtifactErrorKind::Access(format!(
                "weight `{name}` is not 4-byte aligned in memory"
            ))));
        }
        Ok(values)
    }

    /// A code blob's bytes.
    pub fn code(&self, name: &str) -> Result<&[u8], ArtifactError> {
        let &i = self.code_index.get(name).ok_or_else(|| {
            self.error(ArtifactErrorKind::NotFound(format!(
                "no code blob named `{name}`"
            )))
        })?;
        let c = &self.manifest.code[i];
        let start = self.code.start + c.offset as usize;
        Ok(&self.as_bytes()[start..start + c.length as usize])
    }
}
