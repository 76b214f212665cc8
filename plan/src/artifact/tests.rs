//! Tests of the artifact format: a round trip through a real file, every
//! kind of corruption the reader must refuse, and a seeded mutation loop
//! that must never panic.

use super::format::{ArtifactErrorKind, HEADER_LEN, SECTION_ENTRY_LEN, crc32};
use super::read::{Artifact, CpuProbe};
use super::write::{assemble, seal};
use super::*;

/// The features the tests pretend the CPU has (independent of this machine).
const FAKE_CPU: &[&str] = &["sse2", "avx2", "fma", "avx512f"];

fn load(bytes: &[u8]) -> Result<Artifact, ArtifactError> {
    Artifact::from_bytes_with("t.aoc", bytes, CpuProbe::Only(FAKE_CPU))
}

fn weights_w() -> Vec<f32> {
    (0..24).map(|i| i as f32 * 0.5 - 3.0).collect()
}

fn sample_writer() -> ArtifactWriter {
    let mut w = ArtifactWriter::new("x86-64-v3");
    w.cpu_feature("sse2")
        .input("x", "f32", &[1, 3, 4, 4])
        .output("y", "f32", &[1, 2])
        .arena_size(4096)
        .plan(serde_json::json!({"steps": [{"kernel": "k0", "args": [0, 64]}]}))
        .add_code("k0", "x86-64-v3", &[0xC3])
        .add_code("k1", "x86-64-v3", &[0x90, 0x90, 0xC3])
        .add_weight_f32("w", &[2, 3, 4], &weights_w())
        .add_weight("b", "i8", &[3], &[1, 0xFF, 7])
        .add_weight("s", "f16", &[], &[0x00, 0x3C]);
    w
}

fn sample_bytes() -> Vec<u8> {
    sample_writer().to_bytes().expect("the sample is valid")
}

/// Offsets and lengths of the three sections, read from the table.
fn section(bytes: &[u8], index: usize) -> (u64, u64) {
    let e = HEADER_LEN + index * SECTION_ENTRY_LEN;
    let off = u64::from_le_bytes(bytes[e + 8..e + 16].try_into().unwrap());
    let len = u64::from_le_bytes(bytes[e + 16..e + 24].try_into().unwrap());
    (off, len)
}

fn expect_err(bytes: &[u8]) -> ArtifactError {
    load(bytes).expect_err("a corrupt artifact must be refused")
}

fn sample_manifest() -> Manifest {
    load(&sample_bytes()).unwrap().manifest().clone()
}

#[test]
fn round_trip_through_a_mapped_file() {
    let dir = std::env::temp_dir().join(format!("aoc-artifact-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.aoc");
    sample_writer().write_to(&path).unwrap();
    let art = Artifact::open(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let m = art.manifest();
    assert_eq!(m.target, "x86-64-v3");
    assert_eq!(m.cpu_features, vec!["sse2".to_string()]);
    assert_eq!(
        m.inputs,
        vec![TensorSpec {
            name: "x".into(),
            dtype: "f32".into(),
            shape: vec![1, 3, 4, 4]
        }]
    );
    assert_eq!(
        m.outputs,
        vec![TensorSpec {
            name: "y".into(),
            dtype: "f32".into(),
            shape: vec![1, 2]
        }]
    );
    assert_eq!(m.arena_size, 4096);
    assert_eq!(
        m.plan,
        serde_json::json!({"steps": [{"kernel": "k0", "args": [0, 64]}]})
    );
    // Weights are laid out in order, each on a 64-byte boundary of the section.
    assert_eq!(
        m.weights,
        vec![
            WeightEntry {
                name: "w".into(),
                dtype: "f32".into(),
                shape: vec![2, 3, 4],
                offset: 0,
                length: 96
            },
            WeightEntry {
                name: "b".into(),
                dtype: "i8".into(),
                shape: vec![3],
                offset: 128,
                length: 3
            },
            WeightEntry {
                name: "s".into(),
                dtype: "f16".into(),
                shape: vec![],
                offset: 192,
                length: 2
            },
        ]
    );
    assert_eq!(
        m.code,
        vec![
            CodeEntry {
                name: "k0".into(),
                target: "x86-64-v3".into(),
                offset: 0,
                length: 1
            },
            CodeEntry {
                name: "k1".into(),
                target: "x86-64-v3".into(),
                offset: 16,
                length: 3
            },
        ]
    );
    assert_eq!(art.weight_f32("w").unwrap(), &weights_w()[..]);
    assert_eq!(art.weight("b").unwrap(), &[1, 0xFF, 7]);
    assert_eq!(art.weight("s").unwrap(), &[0x00, 0x3C]);
    assert_eq!(art.code("k0").unwrap(), &[0xC3]);
    assert_eq!(art.code("k1").unwrap(), &[0x90, 0x90, 0xC3]);
    for name in ["w", "b", "s"] {
        let p = art.weight(name).unwrap().as_ptr();
        assert_eq!(
            p as usize % 64,
            0,
            "weight `{name}` is not 64-byte aligned in the map"
        );
        assert_eq!(
            (p as usize - art.as_bytes().as_ptr() as usize) % 64,
            0,
            "file offset of `{name}`"
        );
    }
    assert_eq!(art.name(), path.display().to_string());
}

#[test]
fn from_bytes_accepts_vec_and_slice_and_aligns_weights() {
    let bytes = sample_bytes();
    // A slice starting at an odd address: the copy must still be aligned.
    let mut shifted = vec![0u8; 1];
    shifted.extend_from_slice(&bytes);
    for art in [
        Artifact::from_bytes(bytes.clone()).unwrap(),
        Artifact::from_bytes(&shifted[1..]).unwrap(),
    ] {
        assert_eq!(art.name(), "<memory>");
        assert_eq!(art.as_bytes(), &bytes[..]);
        assert_eq!(art.weight("b").unwrap().as_ptr() as usize % 64, 0);
        assert_eq!(art.weight_f32("w").unwrap()[1], -2.5);
    }
}

#[test]
fn accessor_errors_name_the_file() {
    let art = load(&sample_bytes()).unwrap();
    assert_eq!(
        art.weight("nope").unwrap_err().to_string(),
        "t.aoc: no weight named `nope`"
    );
    assert_eq!(
        art.code("nope").unwrap_err().to_string(),
        "t.aoc: no code blob named `nope`"
    );
    assert_eq!(
        art.weight_f32("b").unwrap_err().to_string(),
        "t.aoc: weight `b` is i8, not f32"
    );
}

#[test]
fn crc32_matches_the_standard_check_value() {
    // The check value of CRC-32/ISO-HDLC for "123456789".
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
}

#[test]
fn truncation_anywhere_is_refused() {
    let bytes = sample_bytes();
    let mut cuts: Vec<usize> = (0..bytes.len()).step_by(97).collect();
    for i in 0..3 {
        let (off, len) = section(&bytes, i);
        cuts.extend([off as usize, (off + len) as usize, off as usize + 1]);
    }
    cuts.extend([
        HEADER_LEN,
        HEADER_LEN + 3 * SECTION_ENTRY_LEN,
        bytes.len() - 1,
    ]);
    for cut in cuts.into_iter().filter(|&c| c < bytes.len()) {
        let e = expect_err(&bytes[..cut]);
        assert!(
            matches!(e.kind, ArtifactErrorKind::Truncated { found, .. } if found == cut as u64),
            "cut at {cut}: {e}"
        );
        assert!(
            e.to_string().starts_with("t.aoc: the file is truncated"),
            "{e}"
        );
    }
    assert_eq!(
        expect_err(&bytes[..100]).to_string(),
        format!(
            "t.aoc: the file is truncated: 100 bytes, the header says {}",
            bytes.len()
        )
    );
    // Extra bytes at the end are corruption too.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        expect_err(&longer).kind,
        ArtifactErrorKind::Truncated { .. }
    ));
}

#[test]
fn a_flipped_byte_anywhere_is_refused() {
    let bytes = sample_bytes();
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x5A;
        let e = expect_err(&b);
        if i >= HEADER_LEN {
            assert_eq!(e.kind, ArtifactErrorKind::Checksum, "byte {i}");
        }
    }
    let mut b = bytes.clone();
    let last = b.len() - 1;
    b[last] ^= 1;
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: checksum mismatch: the file is corrupt"
    );
}

#[test]
fn bad_magic_and_versions() {
    let bytes = sample_bytes();
    let mut b = bytes.clone();
    b[0] = b'X';
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: not an aoc artifact (bad magic bytes)"
    );
    assert_eq!(expect_err(b"PK\x03\x04").kind, ArtifactErrorKind::BadMagic);
    assert_eq!(
        expect_err(b"").kind,
        ArtifactErrorKind::Truncated {
            expected: 32,
            found: 0
        }
    );

    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert_eq!(
        expect_err(&b).to_string(),
        format!(
            "t.aoc: artifact format version {} is newer than this runtime ({FORMAT_VERSION}); rebuild it with this aoc",
            FORMAT_VERSION + 1
        )
    );
    b[8..12].copy_from_slice(&0u32.to_le_bytes());
    assert_eq!(
        expect_err(&b).kind,
        ArtifactErrorKind::UnsupportedVersion(0)
    );

    let mut b = bytes.clone();
    b[12] = 1;
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: unknown header flags 0x1"
    );
}

/// Rewrites field `at` (8 bytes) of section entry `index` and reseals.
fn patch_section(bytes: &[u8], index: usize, at: usize, value: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let e = HEADER_LEN + index * SECTION_ENTRY_LEN + at;
    b[e..e + 8].copy_from_slice(&value.to_le_bytes());
    seal(&mut b);
    b
}

#[test]
fn bad_section_tables_are_refused() {
    let bytes = sample_bytes();
    let (moff, _) = section(&bytes, 0);
    let (coff, _) = section(&bytes, 1);
    // Manifest grown into the code section.
    let b = patch_section(&bytes, 0, 16, coff - moff + 8);
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: bad section table: manifest and code sections overlap"
    );
    // Code section moved onto the manifest (64-aligned, inside it).
    let b = patch_section(&bytes, 1, 8, moff & !63);
    assert!(
        matches!(expect_err(&b).kind, ArtifactErrorKind::SectionTable(_)),
        "{}",
        expect_err(&b)
    );
    // Past the end, and overflowing u64.
    let b = patch_section(&bytes, 2, 16, bytes.len() as u64);
    assert!(
        expect_err(&b)
            .to_string()
            .contains("weights section: bytes"),
        "{}",
        expect_err(&b)
    );
    let b = patch_section(&bytes, 2, 16, u64::MAX);
    assert!(matches!(
        expect_err(&b).kind,
        ArtifactErrorKind::SectionTable(_)
    ));
    // Misaligned weights section.
    let (woff, _) = section(&bytes, 2);
    let b = patch_section(&bytes, 2, 8, woff + 8);
    assert!(
        expect_err(&b)
            .to_string()
            .contains("is not a multiple of its alignment 64"),
        "{}",
        expect_err(&b)
    );
    // Weights alignment lowered below 64.
    let mut b = bytes.clone();
    b[HEADER_LEN + 2 * SECTION_ENTRY_LEN + 4..][..4].copy_from_slice(&8u32.to_le_bytes());
    seal(&mut b);
    assert!(
        expect_err(&b)
            .to_string()
            .contains("alignment must be at least 64")
    );
    // A duplicated kind and an unknown kind.
    let mut b = bytes.clone();
    b[HEADER_LEN + SECTION_ENTRY_LEN..][..4].copy_from_slice(&1u32.to_le_bytes());
    seal(&mut b);
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: bad section table: manifest section appears twice"
    );
    b[HEADER_LEN + SECTION_ENTRY_LEN..][..4].copy_from_slice(&9u32.to_le_bytes());
    seal(&mut b);
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: bad section table: section 1 has unknown kind 9"
    );
    // A section count that does not match.
    let mut b = bytes.clone();
    b[16..20].copy_from_slice(&1000u32.to_le_bytes());
    seal(&mut b);
    assert_eq!(
        expect_err(&b).to_string(),
        "t.aoc: bad section table: expected 3 sections, found 1000"
    );
}

/// An artifact with `manifest` and the given payloads, sealed but not validated.
fn with_manifest(m: &Manifest, code: &[u8], weights: &[u8]) -> Vec<u8> {
    assemble(&serde_json::to_vec(m).unwrap(), code, weights)
}

#[test]
fn bad_weight_entries_are_refused() {
    let bytes = sample_bytes();
    let art = load(&bytes).unwrap();
    let (woff, wlen) = section(&bytes, 2);
    let weights = &bytes[woff as usize..(woff + wlen) as usize];
    let code = art.code("k0").unwrap().to_vec();
    let mut base = sample_manifest();
    base.code.truncate(1);
    assert!(load(&with_manifest(&base, &code, weights)).is_ok());

    let mut m = base.clone();
    m.weights[2].offset = 256; // section is 194 bytes
    assert_eq!(
        expect_err(&with_manifest(&m, &code, weights)).to_string(),
        "t.aoc: bad weight: `s`: bytes 256..+2 lie outside the weights section (194 bytes)"
    );
    let mut m = base.clone();
    m.weights[0].offset = u64::MAX - 63;
    assert!(matches!(
        expect_err(&with_manifest(&m, &code, weights)).kind,
        ArtifactErrorKind::Weight(_)
    ));
    let mut m = base.clone();
    m.weights[0].shape = vec![2, 3, 3];
    assert_eq!(
        expect_err(&with_manifest(&m, &code, weights)).to_string(),
        "t.aoc: bad weight: `w`: f32 [2, 3, 3] needs 72 bytes, the entry says 96"
    );
    let mut m = base.clone();
    m.weights[0].dtype = "f64".into();
    assert!(
        expect_err(&with_manifest(&m, &code, weights))
            .to_string()
            .contains("needs 192 bytes")
    );
    let mut m = base.clone();
    m.weights[1].dtype = "q7".into();
    assert_eq!(
        expect_err(&with_manifest(&m, &code, weights)).to_string(),
        "t.aoc: bad weight: `b`: unknown dtype `q7`"
    );
    let mut m = base.clone();
    m.weights[0].shape = vec![u64::MAX, 4];
    assert!(
        expect_err(&with_manifest(&m, &code, weights))
            .to_string()
            .contains("too large")
    );
    let mut m = base.clone();
    m.weights[1].offset = 8;
    assert!(
        expect_err(&with_manifest(&m, &code, weights))
            .to_string()
            .contains("not a multiple of 64")
    );
    let mut m = base.clone();
    m.weights[1].offset = 64; // inside `w` (0..96)
    m.weights[1].name = "b2".into();
    assert_eq!(
        expect_err(&with_manifest(&m, &code, weights)).to_string(),
        "t.aoc: bad weight: weights `w` and `b2` overlap"
    );
    let mut m = base.clone();
    m.weights[1].name = "w".into();
    assert_eq!(
        expect_err(&with_manifest(&m, &code, weights)).to_string(),
        "t.aoc: bad weight: `w` appears twice"
    );
}

#[test]
fn bad_code_entries_and_tensor_specs_are_refused() {
    let mut m = sample_manifest();
    m.weights.clear();
    m.code.truncate(1);
    m.code[0].length = 2;
    assert_eq!(
        expect_err(&with_manifest(&m, &[0xC3], &[])).to_string(),
        "t.aoc: bad code entry: `k0`: bytes 0..+2 lie outside the code section (1 bytes)"
    );
    m.code[0].length = 1;
    assert!(load(&with_manifest(&m, &[0xC3], &[])).is_ok());
    m.code[0].offset = 1;
    assert!(matches!(
        expect_err(&with_manifest(&m, &[0xC3, 0], &[])).kind,
        ArtifactErrorKind::Code(_)
    ));
    m.code[0].offset = 0;
    m.inputs[0].dtype = "float".into();
    assert_eq!(
        expect_err(&with_manifest(&m, &[0xC3], &[])).to_string(),
        "t.aoc: bad manifest: input `x`: unknown dtype `float`"
    );
    m.inputs[0].dtype = "f32".into();
    m.outputs.push(m.outputs[0].clone());
    assert_eq!(
        expect_err(&with_manifest(&m, &[0xC3], &[])).to_string(),
        "t.aoc: bad manifest: output `y` appears twice"
    );
}

#[test]
fn malformed_manifest_json_is_refused() {
    for json in [
        &b"{not json"[..],
        b"",
        b"\xFF\xFE",
        b"[]",
        br#"{"target":"x86-64","cpu_features":[],"inputs":[],"outputs":[],"arena_size":0,"weights":[],"code":[]}"#,
        br#"{"target":"x86-64","cpu_features":[],"inputs":[],"outputs":[],"arena_size":-1,"weights":[],"code":[],"plan":null}"#,
        br#"{"target":"x86-64","cpu_features":[],"inputs":[],"outputs":[],"arena_size":0,"weights":[],"code":[],"plan":null,"extra":1}"#,
    ] {
        let e = expect_err(&assemble(json, &[], &[]));
        assert!(matches!(e.kind, ArtifactErrorKind::Manifest(_)), "{e}");
        assert!(e.to_string().starts_with("t.aoc: bad manifest: not valid manifest JSON"), "{e}");
    }
    let ok = br#"{"target":"x86-64","cpu_features":[],"inputs":[],"outputs":[],"arena_size":0,"weights":[],"code":[],"plan":null}"#;
    assert!(load(&assemble(ok, &[], &[])).is_ok());
}

#[test]
fn cpu_features_are_checked_by_name() {
    let mut m = sample_manifest();
    m.weights.clear();
    m.code.clear();
    m.cpu_features = vec!["avx512f".into(), "avx512vnni".into()];
    let bytes = with_manifest(&m, &[], &[]);
    assert_eq!(
        expect_err(&bytes).to_string(),
        "t.aoc: this artifact needs avx512f, avx512vnni; this CPU lacks avx512vnni"
    );
    let art =
        Artifact::from_bytes_with("t.aoc", &bytes, CpuProbe::Only(&["avx512f", "avx512vnni"]));
    assert!(art.is_ok());
    m.cpu_features = vec!["sse2".into(), "avx9000".into()];
    let e = expect_err(&with_manifest(&m, &[], &[]));
    assert_eq!(
        e.kind,
        ArtifactErrorKind::UnknownCpuFeatures(vec!["avx9000".into()])
    );
    assert_eq!(
        e.to_string(),
        "t.aoc: this artifact needs unknown cpu features: avx9000"
    );
    // The writer checks names too, but not this machine's CPU.
    let mut w = ArtifactWriter::new("x86-64-v4");
    w.cpu_feature("avx512f");
    assert!(w.to_bytes().is_ok());
    w.cpu_feature("avx9000");
    assert!(w.to_bytes().unwrap_err().to_string().contains("avx9000"));
}

#[test]
fn writer_refuses_inconsistent_weights() {
    let mut w = ArtifactWriter::new("x86-64");
    w.add_weight("w", "f32", &[2, 2], &[0; 12]);
    assert_eq!(
        w.to_bytes().unwrap_err().to_string(),
        "<writer>: cannot build artifact: weight `w`: 12 bytes given, f32 [2, 2] needs 16"
    );
    let mut w = ArtifactWriter::new("x86-64");
    w.add_weight("w", "f33", &[1], &[0; 4]);
    assert!(
        w.to_bytes()
            .unwrap_err()
            .to_string()
            .contains("unknown dtype `f33`")
    );
    let mut w = ArtifactWriter::new("x86-64");
    w.add_code("k", "x86-64", &[1])
        .add_code("k", "x86-64", &[2]);
    assert!(
        w.to_bytes()
            .unwrap_err()
            .to_string()
            .contains("`k` appears twice")
    );
}

/// xorshift64*: a tiny deterministic generator so the loop is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_mutations_never_panic() {
    let bytes = sample_bytes();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut accepted = 0;
    for round in 0..2000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            match rng.below(4) {
                0 | 1 => {
                    let i = rng.below(b.len());
                    b[i] = rng.next() as u8;
                }
                2 => {
                    let i = rng.below(b.len());
                    b.truncate(i.max(1));
                }
                _ => {
                    let i = rng.below(b.len());
                    b.insert(i, rng.next() as u8);
                }
            }
        }
        // Half the time reseal so the mutation reaches the structural checks
        // behind the checksum (section table, manifest, ranges).
        let resealed = round % 2 == 1 && b.len() >= HEADER_LEN;
        if resealed {
            seal(&mut b);
        }
        match load(&b) {
            Ok(art) => {
                accepted += 1;
                // Whatever passed must be fully usable.
                for w in art.manifest().weights.clone() {
                    assert_eq!(art.weight(&w.name).unwrap().len() as u64, w.length);
                    let _ = art.weight_f32(&w.name);
                }
                for c in art.manifest().code.clone() {
                    assert_eq!(art.code(&c.name).unwrap().len() as u64, c.length);
                }
            }
            Err(e) => assert!(e.to_string().starts_with("t.aoc: "), "{e}"),
        }
        if !resealed && b != bytes {
            assert!(
                load(&b).is_err(),
                "round {round}: an unsealed change was accepted"
            );
        }
    }
    // Resealed mutations of padding or unused bytes may pass; most must not.
    assert!(accepted < 1000, "{accepted} of 2000 mutations accepted");
}
