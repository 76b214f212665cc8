//! Batched integer MatMul of two 8-bit activations (`Step::QMatMul`: the
//! `QKᵀ` and `AV` products of a quantized attention block), on the int8
//! GEMM (`int8::gemm_u8s8`: AMX, AVX-512 VNNI, AVX2 or portable).
//!
//! Per batch, A (`m × k`) is gathered as u8 (i8 values shifted by 128, its
//! zero point with them) and B (`k × n`) as i8 (u8 values shifted by −128,
//! likewise), then packed; the GEMM gives `Σ (a − a_zero)·b`, and
//! subtracting `b_zero·Σ_k (a − a_zero)` per row leaves `Σ (a −
//! a_zero)·(b − b_zero)` exactly (shifting both a value and its zero point
//! changes neither difference). The requantization is the convolutions'
//! (`qconv::requantize`, no shift; vectorized as theirs).
//!
//! Invariants: strides and lengths are checked first (an error, never an
//! out-of-bounds access); `k·255·256` must fit in an i32 (the lowering
//! only emits such products).

use rayon::prelude::*;

use super::KernelError;
use super::int8::{gemm_u8s8, pack_b_s8_from_columns};
use super::qconv::requantize_rows;
use crate::plan::{QuantConv, QuantElem, QuantMatMul};

fn err(m: String) -> KernelError {
    KernelError::new(format!("quant.matmul: {m}"))
}

/// The largest element index `[batch, rows, cols]` with `strides` reads,
/// plus one; `None` on overflow.
fn extent(dims: [usize; 3], strides: [usize; 3]) -> Option<usize> {
    dims.iter().zip(strides).try_fold(1usize, |acc, (&d, s)| {
        if d == 0 { Some(acc) } else { acc.checked_add((d - 1).checked_mul(s)?) }
    })
}

/// `y[b] = requantize((a[b] − a_zero)·(b[b] − b_zero))` for each batch
/// (see the module doc); `dims` is `[batch, m, n, k]`, strides are
/// `[batch, row, col]` in elements.
#[allow(clippy::too_many_arguments)]
pub fn qmatmul(
    [batch, m, n, k]: [usize; 4],
    a: &[u8],
    sa: [usize; 3],
    b: &[u8],
    sb: [usize; 3],
    y: &mut [u8],
    sy: [usize; 3],
    q: &QuantMatMul,
) -> Result<(), KernelError> {
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if (k as i64) * 255 * 256 > i32::MAX as i64 {
        return Err(err(format!("a reduction of {k} may overflow 32-bit sums")));
    }
    for (name, dims, st, len) in [("lhs", [batch, m, k], sa, a.len()), ("rhs", [batch, k, n], sb, b.len()), ("output", [batch, m, n], sy, y.len())] {
        match extent(dims, st) {
            Some(need) if need <= len => {}
            _ => return Err(err(format!("{name} ({dims:?} with strides {st:?}) does not fit in its {len} bytes"))),
        }
    }
    // Distinct output elements: every (batch, row, col) maps to its own
    // byte, so batches can be written in parallel.
    if sy[2] == 0 || sy[1] < n.saturating_sub(1) * sy[2] + 1 || (batch > 1 && sy[0] < (m - 1) * sy[1] + (n - 1) * sy[2] + 1) {
        return Err(err(format!("output strides {sy:?} make elements overlap")));
    }
    let (a_flip, a_zero) = if q.a.signed { (0x80u8, q.a.zero + 128) } else { (0, q.a.zero) };
    let (b_flip, b_zero) = if q.b.signed { (0u8, q.b.zero) } else { (0x80, q.b.zero - 128) };
    let p = QuantConv { x_signed: false, x_zero: 0, y_signed: q.y_signed, y_zero: q.y_zero, y_min: q.y_min, y_max: q.y_max, elem: QuantElem::Int8 };
    let y_addr = y.as_mut_ptr() as usize;
    (0..batch).into_par_iter().try_for_each(|bi| -> Result<(), KernelError> {
        let mut av = vec![0u8; m * k];
        for (i, dst) in av.chunks_exact_mut(k).enumerate() {
            gather(dst, &a[bi * sa[0] + i * sa[1]..], sa[2], a_flip);
        }
        // Bᵀ (`n × k`), each row a column of B: contiguous for attention's
        // Kᵀ view, gathered otherwise, then packed by 4-byte copies.
        let mut bt = vec![0u8; n * k];
        for (j, dst) in bt.chunks_exact_mut(k).enumerate() {
            gather(dst, &b[bi * sb[0] + j * sb[2]..], sb[1], b_flip);
        }
        let bt: Vec<i8> = bt.into_iter().map(|v| v as i8).collect();
        let packed = pack_b_s8_from_columns(k, n, &bt, k)?;
        let mut c = vec![0i32; m * n];
        gemm_u8s8(m, n, k, &av, k, a_zero, packed.as_ref(), &mut c, n)?;
        let (zeros, scales) = (vec![0i32; n], vec![q.scale; n]);
        let shifts = vec![0f32; n];
        let mut row = vec![0u8; n];
        for i in 0..m {
            let row_sum = av[i * k..(i + 1) * k].iter().fold(0i32, |s, &v| s.wrapping_add(v as i32 - a_zero));
            let corr = b_zero.wrapping_mul(row_sum);
            let ci = &mut c[i * n..(i + 1) * n];
            for v in ci.iter_mut() {
                *v = v.wrapping_sub(corr);
            }
            // The convolutions' vectorized requantization, one "pixel" of
            // n channels with the same scale.
            requantize_rows(&p, 0, n, n, ci, &zeros, &scales, &shifts, &mut row);
            let base = bi * sy[0] + i * sy[1];
            if sy[2] == 1 {
                // SAFETY: the row's n bytes are inside y (extent checked)
                // and written by this batch only (strides checked: no two
                // elements share a byte).
                unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), (y_addr as *mut u8).add(base), n) };
                continue;
            }
            for (j, &v) in row.iter().enumerate() {
                // SAFETY: as above, element by element.
                unsafe { *(y_addr as *mut u8).add(base + j * sy[2]) = v };
            }
        }
        Ok(())
    })
}

/// `dst[i] = src[i·stride] ^ flip` (a plain copy when the stride is 1).
fn gather(dst: &mut [u8], src: &[u8], stride: usize, flip: u8) {
    if stride == 1 {
        dst.copy_from_slice(&src[..dst.len()]);
    } else if stride == 0 {
        dst.fill(src[0]);
    } else {
        for (d, s) in dst.iter_mut().zip(src.iter().step_by(stride)) {
            *d = *s;
        }
    }
    if flip != 0 {
        for d in dst.iter_mut() {
            *d ^= flip;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testdata::bytes;
    use crate::kernels::qconv::requantize;
    use crate::plan::QuantOperand;


    /// Against the integer definition computed directly: u8 and i8 on
    /// either side, zero points anywhere in range, a transposed B (strides
    /// as a `QKᵀ` head view), a clamp, several batches.
    #[test]
    fn qmatmul_is_the_integer_product() {
        let load = |v: u8, s: bool| if s { v as i8 as i32 } else { v as i32 };
        for (case, (a_signed, za, b_signed, zb, y_signed)) in
            [(false, 3, false, 200, false), (true, -100, false, 0, true), (false, 255, true, 17, false), (true, 0, true, -128, true)].into_iter().enumerate()
        {
            let (batch, m, n, k) = (3usize, 19usize, 21usize, 37usize);
            let a = bytes(batch * m * k, 1 + case as u32);
            let b = bytes(batch * n * k, 50 + case as u32);
            // A row-major [batch][m][k]; B stored as [batch][n][k] and read
            // transposed (odd cases), or row-major [batch][k][n].
            let transposed = case % 2 == 1;
            let (sa, sb, sy) = ([m * k, k, 1], if transposed { [n * k, 1, k] } else { [n * k, n, 1] }, [m * n, n, 1]);
            let q = QuantMatMul {
                a: QuantOperand { signed: a_signed, zero: za, scale: 0.02 },
                b: QuantOperand { signed: b_signed, zero: zb, scale: 0.03 },
                y_signed,
                y_zero: if y_signed { -5 } else { 100 },
                y_min: if y_signed { -120 } else { 10 },
                y_max: if y_signed { 127 } else { 250 },
                scale: 0.02 * 0.03 / 0.9,
            };
            let mut y = vec![0u8; batch * m * n];
            qmatmul([batch, m, n, k], &a, sa, &b, sb, &mut y, sy, &q).unwrap();
            let p = QuantConv { x_signed: false, x_zero: 0, y_signed, y_zero: q.y_zero, y_min: q.y_min, y_max: q.y_max, elem: QuantElem::Int8 };
            for bi in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let acc: i32 = (0..k)
                            .map(|kk| (load(a[bi * sa[0] + i * k + kk], a_signed) - za) * (load(b[bi * sb[0] + kk * sb[1] + j * sb[2]], b_signed) - zb))
                            .sum();
                        let want = requantize(acc, q.scale, 0.0, &p) as u8;
                        assert_eq!(y[bi * m * n + i * n + j], want, "case {case}: batch {bi} ({i}, {j})");
                    }
                }
            }
        }
    }

    /// Packing by columns gives `pack_b_s8`'s bytes and column sums, for
    /// sizes that leave partial groups and panels.
    #[test]
    fn packing_by_columns_is_packing_the_transpose() {
        use crate::kernels::int8::pack_b_s8;
        for (k, n) in [(64usize, 128usize), (37, 21), (5, 3), (130, 17)] {
            let bt: Vec<i8> = bytes(n * k, (k * n) as u32).into_iter().map(|v| v as i8).collect();
            let b: Vec<i8> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
            let (want, got) = (pack_b_s8(k, n, &b, n).unwrap(), crate::kernels::int8::pack_b_s8_from_columns(k, n, &bt, k).unwrap());
            assert_eq!(got.data(), want.data(), "{k}x{n}");
            assert_eq!(got.col_sums(), want.col_sums(), "{k}x{n}");
        }
    }

    #[test]
    fn qmatmul_refuses_bad_strides() {
        let q = QuantMatMul {
            a: QuantOperand { signed: false, zero: 0, scale: 1.0 },
            b: QuantOperand { signed: false, zero: 0, scale: 1.0 },
            y_signed: false,
            y_zero: 0,
            y_min: 0,
            y_max: 255,
            scale: 1.0,
        };
        let mut y = vec![0u8; 4];
        assert!(qmatmul([1, 2, 2, 2], &[0; 3], [4, 2, 1], &[0; 4], [4, 2, 1], &mut y, [4, 2, 1], &q).is_err());
        assert!(qmatmul([1, 2, 2, 2], &[0; 4], [4, 2, 1], &[0; 4], [4, 2, 1], &mut y, [4, 1, 1], &q).is_err());
        assert!(qmatmul([1, 2, 2, 2], &[0; 4], [4, 2, 1], &[0; 4], [4, 2, 1], &mut y, [4, 2, 1], &q).is_ok());
    }
}
