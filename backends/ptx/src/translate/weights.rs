//! The weights section as the translation grows it: blobs derived from the
//! lowering's constant weights in the forms the kernels read — half copies
//! for the tensor-core GEMMs, B packed per `wgmma` tile (with a stem's
//! padded channels), int8 convolution weights packed for `gemm_s8`, 2:4
//! weights packed for `mma.sp` and `wgmma.sp`.
//!
//! Invariants:
//! - Each derivation of a blob is made once (keyed by the source's offset
//!   and the derivation's name) and appended after every existing blob, at
//!   a 64-byte boundary, so the lowering's offsets stay valid.
//! - A derived blob is named `source.suffix`; it keeps the source's shape
//!   when it holds as many elements, else it is one-dimensional.

use std::collections::HashMap;

use aoc_ir::types::Scalar;
use aoc_passes::lower::WeightBlob;
use aoc_plan::plan::{Buf, Space};

use super::Precision;
use crate::kernels::GemmSpec;
use crate::kernels::gemm_s8::{self, QConvSpec};
use crate::kernels::gemm_sp::{SparsePadding, pack_weight};
use crate::kernels::gemm_wgmma::{WgPrecision, WgTile, pack_b, pack_weights_wg};
use crate::kernels::index::{unfold_w_geom, unfold_w_weights};

/// The weight blobs, their offsets in the section, and the derived ones
/// made so far.
pub(super) struct WeightSection<'a> {
    blobs: &'a mut Vec<WeightBlob>,
    /// Weights-section offset of each blob, in order.
    offsets: Vec<u64>,
    /// Weights derived from others (half copies, packed layouts), by the
    /// source's offset and the derivation's name.
    derived: HashMap<(u64, String), Buf>,
}

/// Little-endian f32 `bytes` as f16 (or bf16) bits, rounded to nearest
/// even (NaN stays NaN, overflow goes to infinity).
fn half_bits(bytes: &[u8], bf16: bool) -> Vec<u16> {
    let convert: fn(f32) -> u16 = if bf16 { |x| half::bf16::from_f32(x).to_bits() } else { |x| half::f16::from_f32(x).to_bits() };
    bytes.chunks_exact(4).map(|c| convert(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect()
}

impl<'a> WeightSection<'a> {
    /// The section of `blobs`, each at the next 64-byte boundary.
    pub(super) fn new(blobs: &'a mut Vec<WeightBlob>) -> WeightSection<'a> {
        let mut offsets = Vec::new();
        let mut end = 0u64;
        for w in blobs.iter() {
            let o = end.div_ceil(64) * 64;
            offsets.push(o);
            end = o + w.bytes.len() as u64;
        }
        WeightSection { blobs, offsets, derived: HashMap::new() }
    }

    /// A half-precision copy (f16, or bf16 at `Precision::Bf16`) of the
    /// f32 weight at `b` (made once).
    pub(super) fn half(&mut self, b: &Buf, precision: Precision) -> Result<Buf, String> {
        let bf16 = precision == Precision::Bf16;
        let dtype = if bf16 { Scalar::BF16 } else { Scalar::F16 };
        self.derived(b, precision.name(), dtype, |bytes| {
            half_bits(bytes, bf16).into_iter().flat_map(|h| h.to_le_bytes()).collect()
        })
    }

    /// The f32 B at `b` of the `wgmma` GEMM `spec`, in `p`'s half type,
    /// packed for `tile` (`kernels::gemm_wgmma::pack_b`). With `pad =
    /// (c, cp, taps)` B is a convolution's `taps × c` rows whose channels
    /// the half copy of A pads to `cp`: zero rows are inserted to match.
    pub(super) fn wgmma_b(
        &mut self,
        b: &Buf,
        spec: &GemmSpec,
        p: WgPrecision,
        tile: WgTile,
        pad: Option<(u64, u64, u64)>,
    ) -> Result<Buf, String> {
        let bf16 = p == WgPrecision::Bf16;
        let half = if bf16 { Scalar::BF16 } else { Scalar::F16 };
        let suffix = format!("wg{}x{}.{}{}", tile.bn, tile.stages, if bf16 { "bf16" } else { "f16" }, pad.map_or(String::new(), |(_, cp, _)| format!(".c{cp}")));
        self.derived(b, &suffix, half, |bytes| {
            let mut bits = half_bits(bytes, bf16);
            if let Some((c, cp, taps)) = pad {
                // Row (tap, ci) of B moves to row tap·cp + ci.
                let n = spec.n as usize;
                let mut padded = vec![0u16; (taps * cp) as usize * n];
                for (r, row) in bits.chunks(n).enumerate() {
                    let (tap, ci) = (r as u64 / c, r as u64 % c);
                    let at = (tap * cp + ci) as usize * n;
                    padded[at..at + n].copy_from_slice(row);
                }
                bits = padded;
            }
            pack_b(spec, tile, &bits).into_iter().flat_map(|v| v.to_le_bytes()).collect()
        })
    }

    /// The int8 OHWI weights at `w` of the convolution `spec`, packed for
    /// `gemm_s8::qconv_s8`.
    pub(super) fn s8_packed(&mut self, w: &Buf, spec: &QConvSpec) -> Result<Buf, String> {
        self.derived(w, "s8pack", Scalar::I8, |bytes| {
            let ohwi: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
            gemm_s8::pack_weights(spec, &ohwi).into_iter().map(|v| v as u8).collect()
        })
    }

    /// The int8 OHWI weights at `w` of the convolution `spec`, packed for
    /// `gemm_wgmma::qconv_wgmma` with `tile`.
    pub(super) fn s8_wg_packed(&mut self, w: &Buf, spec: &QConvSpec, tile: WgTile) -> Result<Buf, String> {
        self.derived(w, &format!("s8wg{}x{}", tile.bn, tile.stages), Scalar::I8, |bytes| {
            let ohwi: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
            pack_weights_wg(spec, tile, &ohwi).into_iter().map(|v| v as u8).collect()
        })
    }

    /// The int8 OHWI weights at `w` of the convolution `spec` unfolded
    /// along W into `cp` channels (`index::unfold_w_weights`), packed for
    /// `gemm_wgmma::qconv_wgmma` with `tile` on the unfolded geometry.
    pub(super) fn s8_wg_unfolded(&mut self, w: &Buf, spec: &QConvSpec, cp: u64, tile: WgTile) -> Result<Buf, String> {
        let g = spec.geom;
        let unfolded = QConvSpec { geom: unfold_w_geom(&g, cp), q: spec.q };
        self.derived(w, &format!("s8wg{}x{}.u{cp}", tile.bn, tile.stages), Scalar::I8, |bytes| {
            let ohwi: Vec<i8> = unfold_w_weights(&g, cp, bytes).into_iter().map(|b| b as i8).collect();
            pack_weights_wg(&unfolded, tile, &ohwi).into_iter().map(|v| v as u8).collect()
        })
    }

    /// The f32 `k × n` B at `b` of a sparse layer, rounded to f16 and
    /// packed for a sparse kernel's `tile` (`gemm_sp::pack_weight`, padded
    /// to an `mma.sp` or `wgmma.sp` tile):
    /// one blob, the values then the metadata words, returned as their two
    /// buffers; an error says why not (the rounded weight is not 2:4
    /// along k), and the layer then runs dense.
    pub(super) fn sparse_packed(&mut self, b: &Buf, n: u64, k: u64, tile: &impl SparsePadding) -> Result<(Buf, Buf), String> {
        let suffix = format!("sp{}x{}", tile.n_pad(1), tile.k_pad(1));
        let key = (b.offset, suffix.clone());
        let split = |h: Buf, values: u64| {
            (Buf { len: values, ..h }, Buf { offset: h.offset + values, len: h.len - values, ..h })
        };
        let values_bytes = tile.n_pad(n) * tile.k_pad(k);
        if let Some(h) = self.derived.get(&key) {
            return Ok(split(*h, values_bytes));
        }
        let src = self.source(b)?;
        if src.len() as u64 != n * k * 4 {
            return Err(format!("its weight holds {} bytes, not the {k}x{n} f32 the GEMM reads", src.len()));
        }
        let bits = half_bits(src, false);
        let p = pack_weight(n, k, tile, |j, kk| bits[(kk * n + j) as usize]).ok_or("its f16 weight is not 2:4 along the GEMM's k")?;
        let mut bytes: Vec<u8> = p.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        bytes.extend(p.meta.iter().flat_map(|w| w.to_le_bytes()));
        let h = self.derived(b, &suffix, Scalar::U8, |_| bytes)?;
        Ok(split(h, values_bytes))
    }

    /// The bytes of the weight blob starting at `b`.
    fn source(&self, b: &Buf) -> Result<&[u8], String> {
        let i = self
            .offsets
            .iter()
            .position(|&o| o == b.offset && b.space == Space::Weights)
            .ok_or("internal error: a weight operand does not start a weight blob")?;
        Ok(&self.blobs[i].bytes)
    }

    /// A new weight blob made from the one starting at `b` by `make` (once
    /// per blob and `suffix`): half copies, kernel-specific layouts.
    fn derived(&mut self, b: &Buf, suffix: &str, dtype: Scalar, make: impl FnOnce(&[u8]) -> Vec<u8>) -> Result<Buf, String> {
        if b.space != Space::Weights {
            return Err("internal error: a weight operand is not in the weights".to_string());
        }
        let key = (b.offset, suffix.to_string());
        if let Some(h) = self.derived.get(&key) {
            return Ok(*h);
        }
        let i = self
            .offsets
            .iter()
            .position(|&o| o == b.offset)
            .ok_or("internal error: a weight operand does not start a weight blob")?;
        let blob = &self.blobs[i];
        let bytes = make(&blob.bytes);
        let end = self.offsets.last().map_or(0, |&o| o + self.blobs.last().unwrap().bytes.len() as u64);
        let offset = end.div_ceil(64) * 64;
        let len = bytes.len() as u64;
        let name = format!("{}.{suffix}", blob.name);
        let count = len * 8 / dtype.bits() as u64;
        let shape = if count == blob.shape.iter().product::<u64>() { blob.shape.clone() } else { vec![count] };
        self.blobs.push(WeightBlob { name, dtype, shape, bytes });
        self.offsets.push(offset);
        let h = Buf { space: Space::Weights, index: 0, offset, len };
        self.derived.insert(key, h);
        Ok(h)
    }
}
