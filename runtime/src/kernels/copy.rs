//! Data-movement kernels: the strided copy behind `Step::Copy` (transposes,
//! slices, concatenation pieces, expand, NCHW↔NHWC), `Step::Fill` and
//! `Step::Gather`. Elements are opaque runs of `elem_size` bytes, so one
//! kernel serves every element type.
//!
//! How a strided copy runs: the arguments are checked first (every source
//! and destination element touched lies inside its slice, computed from the
//! extreme offsets the strides reach), so no input can make the kernel read
//! or write out of bounds. Dimensions of length 1 are dropped; when the
//! destination strides are "nested" (sorted by decreasing stride, each one
//! larger than the span of all inner dimensions, so no two indices write
//! the same element) the dimensions are visited in destination order and
//! neighbours contiguous in both operands are merged. The innermost work
//! is then one of: a `copy_from_slice` run (contiguous in both), a blocked
//! 2-D transpose (some outer dimension is contiguous in the source), a
//! broadcast run (source stride 0) or an element loop. Large copies split
//! their outermost dimension into disjoint destination chunks over rayon.
//!
//! Invariants: no public function panics on bad arguments; the only
//! `unsafe` is the transpose (tiles, or columns when there are few), whose
//! corner offsets are checked before its loop runs. Destinations whose
//! strides overlap (e.g. stride 0) are written sequentially in row-major
//! index order, so the last write wins, as in a naive loop.

use rayon::prelude::*;

use super::KernelError;

/// Copies smaller than this many bytes stay on the calling thread.
const PAR_MIN_BYTES: usize = 64 * 1024;

fn err(message: String) -> KernelError {
    KernelError::new(message)
}

/// One dimension of a checked copy, strides in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dim {
    len: usize,
    src: isize,
    dst: usize,
}

/// `dst[Σ i·dst_strides] = src[src_start + Σ i·src_strides]` for every
/// index `i` of `shape`, in elements of `elem_size` bytes (semantics of
/// `Step::Copy`). Source strides may be 0 (broadcast) or negative.
pub fn strided_copy(
    elem_size: usize,
    shape: &[u64],
    src: &[u8],
    src_start: u64,
    src_strides: &[i64],
    dst: &mut [u8],
    dst_strides: &[u64],
) -> Result<(), KernelError> {
    strided_copy_with(
        elem_size,
        shape,
        src,
        src_start,
        src_strides,
        dst,
        dst_strides,
        PAR_MIN_BYTES,
    )
}

/// [`strided_copy`] with the parallel threshold as a parameter (tests force
/// the parallel split on small shapes with 0).
#[allow(clippy::too_many_arguments)]
pub(super) fn strided_copy_with(
    elem_size: usize,
    shape: &[u64],
    src: &[u8],
    src_start: u64,
    src_strides: &[i64],
    dst: &mut [u8],
    dst_strides: &[u64],
    par_min: usize,
) -> Result<(), KernelError> {
    let Some((mut dims, base)) = check_copy(
        elem_size,
        shape,
        src.len(),
        src_start,
        src_strides,
        dst.len(),
        dst_strides,
    )?
    else {
        return Ok(());
    };
    let es = elem_size;
    let total = dims.iter().map(|d| d.len).product::<usize>() * es;
    // Destination-order traversal is only valid (and chunking only safe)
    // when no two indices write the same element.
    let nested = sort_nested(&mut dims);
    merge(&mut dims);
    if nested && total >= par_min && rayon::current_num_threads() > 1 && !dims.is_empty() {
        copy_par(&dims, es, src, base, dst, par_min);
    } else {
        copy_seq(&dims, es, src, base, dst);
    }
    Ok(())
}

/// Checks a copy's arguments; returns its dimensions (length > 1, strides
/// in bytes) and the source start in bytes, or `None` when it copies nothing.
#[allow(clippy::too_many_arguments)]
fn check_copy(
    es: usize,
    shape: &[u64],
    src_len: usize,
    src_start: u64,
    src_strides: &[i64],
    dst_len: usize,
    dst_strides: &[u64],
) -> Result<Option<(Vec<Dim>, isize)>, KernelError> {
    if es == 0 {
        return Err(err("element size must be at least 1, found 0".into()));
    }
    let rank = shape.len();
    if src_strides.len() != rank || dst_strides.len() != rank {
        return Err(err(format!(
            "copy of rank {rank} needs {rank} source and destination strides, found {} and {}",
            src_strides.len(),
            dst_strides.len()
        )));
    }
    if shape.contains(&0) {
        return Ok(None);
    }
    let too_large = || err(format!("copy of shape {shape:?} is too large"));
    // Extreme element offsets, in i128 so that no u64 × i64 product wraps.
    let (mut lo, mut hi) = (i128::from(src_start), i128::from(src_start));
    let mut dhi: i128 = 0;
    for d in 0..rank {
        if shape[d] == 1 {
            continue;
        }
        let n = i128::from(shape[d] - 1);
        let s = n
            .checked_mul(i128::from(src_strides[d]))
            .ok_or_else(too_large)?;
        if s < 0 {
            lo = lo.checked_add(s).ok_or_else(too_large)?;
        } else {
            hi = hi.checked_add(s).ok_or_else(too_large)?;
        }
        let t = n
            .checked_mul(i128::from(dst_strides[d]))
            .ok_or_else(too_large)?;
        dhi = dhi.checked_add(t).ok_or_else(too_large)?;
    }
    let bytes = |elems: i128| elems.checked_mul(es as i128).ok_or_else(too_large);
    if lo < 0 {
        return Err(err(format!(
            "source strides reach element {lo}, before the start of the source"
        )));
    }
    if bytes(hi + 1)? > src_len as i128 {
        return Err(err(format!(
            "source needs {} elements of {es} bytes, found {src_len} bytes",
            hi + 1
        )));
    }
    if bytes(dhi + 1)? > dst_len as i128 {
        return Err(err(format!(
            "destination needs {} elements of {es} bytes, found {dst_len} bytes",
            dhi + 1
        )));
    }
    // Every product below is bounded by a span that fits in a slice length,
    // so the conversions and byte strides cannot overflow.
    let dims = (0..rank)
        .filter(|&d| shape[d] > 1)
        .map(|d| Dim {
            len: shape[d] as usize,
            src: src_strides[d] as isize * es as isize,
            dst: dst_strides[d] as usize * es,
        })
        .collect();
    Ok(Some((dims, src_start as isize * es as isize)))
}

/// Sorts `dims` by decreasing destination stride if the destination layout
/// is nested (each stride exceeds the span of the dimensions inside it);
/// otherwise leaves them in index order and returns `false`.
fn sort_nested(dims: &mut [Dim]) -> bool {
    let mut sorted = dims.to_vec();
    sorted.sort_by_key(|d| std::cmp::Reverse(d.dst));
    let mut span = 0usize;
    for d in sorted.iter().rev() {
        if d.dst <= span {
            return false;
        }
        span += (d.len - 1) * d.dst;
    }
    dims.copy_from_slice(&sorted);
    true
}

/// Merges neighbours whose outer stride is the inner one times the inner
/// length in both operands (row-major order of the visit is unchanged).
fn merge(dims: &mut Vec<Dim>) {
    let mut out: Vec<Dim> = Vec::with_capacity(dims.len());
    for &d in dims.iter().rev() {
        if let Some(inner) = out.last_mut()
            && d.dst == inner.dst * inner.len
            && d.src == inner.src * inner.len as isize
        {
            inner.len *= d.len;
            continue;
        }
        out.push(d);
    }
    out.reverse();
    *dims = out;
}

/// Splits the outermost dimension into disjoint destination chunks, one
/// rayon task each; recurses into the next dimension when the outermost is
/// too short to feed every thread.
fn copy_par(dims: &[Dim], es: usize, src: &[u8], base: isize, dst: &mut [u8], par_min: usize) {
    // Trimmed to the bytes the copy writes, so the chunks below number
    // exactly as many as the indices they cover.
    let span = dims.iter().map(|d| (d.len - 1) * d.dst).sum::<usize>() + es;
    let dst = &mut dst[..span];
    let d0 = dims[0];
    let threads = rayon::current_num_threads();
    let inner_bytes = dims[1..].iter().map(|d| d.len).product::<usize>() * es;
    if d0.len < threads && dims.len() > 1 && inner_bytes >= par_min {
        // `sort_nested` guarantees the span of dims[1..] is below d0.dst.
        dst.par_chunks_mut(d0.dst)
            .enumerate()
            .for_each(|(i, chunk)| {
                copy_par(
                    &dims[1..],
                    es,
                    src,
                    base + i as isize * d0.src,
                    chunk,
                    par_min,
                );
            });
        return;
    }
    let mut per = d0.len.div_ceil((4 * threads).min(d0.len));
    if d0.src.unsigned_abs() == es {
        // Dimension 0 is the row dimension of a transpose: give each task
        // whole tiles, so source cache lines are not split between tasks.
        per = per.next_multiple_of(tile(es));
    }
    dst.par_chunks_mut(per * d0.dst)
        .enumerate()
        .for_each(|(t, chunk)| {
            let lo = t * per;
            let mut sub = dims.to_vec();
            sub[0].len = per.min(d0.len - lo);
            copy_seq(&sub, es, src, base + lo as isize * d0.src, chunk);
        });
}

/// Runs a checked copy on the calling thread, dispatching the element size
/// to a constant so the element moves compile to single loads and stores.
fn copy_seq(dims: &[Dim], es: usize, src: &[u8], base: isize, dst: &mut [u8]) {
    match es {
        1 => copy_seq_e::<1>(dims, es, src, base, dst),
        2 => copy_seq_e::<2>(dims, es, src, base, dst),
        4 => copy_seq_e::<4>(dims, es, src, base, dst),
        8 => copy_seq_e::<8>(dims, es, src, base, dst),
        _ => copy_seq_e::<0>(dims, es, src, base, dst),
    }
}

/// `E` is the element size, or 0 for "use `es`".
fn copy_seq_e<const E: usize>(dims: &[Dim], es: usize, src: &[u8], base: isize, dst: &mut [u8]) {
    let es = if E == 0 { es } else { E };
    let Some(&last) = dims.last() else {
        dst[..es].copy_from_slice(&src[base as usize..base as usize + es]);
        return;
    };
    let outer = &dims[..dims.len() - 1];
    if last.src == es as isize && last.dst == es {
        let run = last.len * es;
        for_each_outer(outer, base, 0, &mut |s, d| {
            let s = s as usize;
            dst[d..d + run].copy_from_slice(&src[s..s + run]);
        });
        return;
    }
    if last.dst == es
        && let Some(q) = outer.iter().rposition(|d| d.src.unsigned_abs() == es)
    {
        let rows = outer[q];
        let rest: Vec<Dim> = outer
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != q)
            .map(|(_, &d)| d)
            .collect();
        for_each_outer(&rest, base, 0, &mut |s, d| {
            let rows = (rows.len, rows.src, rows.dst);
            transpose::<E>(es, src, s, last.src, dst, d, rows, last.len);
        });
        return;
    }
    if last.dst == es && last.src == 0 {
        let run = last.len * es;
        for_each_outer(outer, base, 0, &mut |s, d| {
            let s = s as usize;
            let elem = &src[s..s + es];
            for out in dst[d..d + run].chunks_exact_mut(es) {
                out.copy_from_slice(elem);
            }
        });
        return;
    }
    for_each_outer(outer, base, 0, &mut |s, d| {
        for i in 0..last.len {
            let s = (s + i as isize * last.src) as usize;
            let d = d + i * last.dst;
            dst[d..d + es].copy_from_slice(&src[s..s + es]);
        }
    });
}

/// Calls `f(src_offset, dst_offset)` for every index of `dims`, row-major.
fn for_each_outer(dims: &[Dim], s0: isize, d0: usize, f: &mut impl FnMut(isize, usize)) {
    let n = dims.len();
    let mut idx = vec![0usize; n];
    let (mut s, mut d) = (s0, d0);
    loop {
        f(s, d);
        let mut k = n;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < dims[k].len {
                s += dims[k].src;
                d += dims[k].dst;
                break;
            }
            s -= dims[k].src * (dims[k].len - 1) as isize;
            d -= dims[k].dst * (dims[k].len - 1);
            idx[k] = 0;
        }
    }
}

/// Side of a transpose tile: one 64-byte cache line of elements.
fn tile(es: usize) -> usize {
    (64 / es).max(4)
}

/// `dst[d0 + r·dq + c·es] = src[s0 + r·sr + c·sc]` for `r < rows`,
/// `c < cols` (`rows = (rows, sr, dq)`, `|sr| = es`), in square tiles whose
/// source columns and destination rows are one cache line each.
#[allow(clippy::too_many_arguments)]
fn transpose<const E: usize>(
    es: usize,
    src: &[u8],
    s0: isize,
    sc: isize,
    dst: &mut [u8],
    d0: usize,
    (rows, sr, dq): (usize, isize, usize),
    cols: usize,
) {
    let es = if E == 0 { es } else { E };
    if E == 4 && rows.min(cols) <= 8 && rows > 0 && cols > 0 {
        // Few columns or few rows (a 3-channel NCHW image to NHWC, an
        // NHWC map of a few classes back to NCHW): a loop over the short
        // side outside, the long side inside, one element per iteration
        // with no tile bookkeeping.
        let corner = |r: usize, c: usize| s0 + r as isize * sr + c as isize * sc;
        let corners = [
            corner(0, 0),
            corner(0, cols - 1),
            corner(rows - 1, 0),
            corner(rows - 1, cols - 1),
        ];
        let smin = *corners.iter().min().unwrap_or(&0);
        let smax = *corners.iter().max().unwrap_or(&0);
        assert!(smin >= 0 && smax as usize + es <= src.len());
        assert!(d0 + (rows - 1) * dq + cols * es <= dst.len());
        // (outer count, inner count, source and destination steps of each)
        let (outer, inner, (so, do_), (si, di)) = if cols <= rows {
            (cols, rows, (sc, es), (sr, dq))
        } else {
            (rows, cols, (sr, dq), (sc, es))
        };
        for o in 0..outer {
            // SAFETY: every (r, c) offset lies between the corners checked
            // above (both offsets are affine in (r, c)).
            unsafe {
                let mut sp = src.as_ptr().offset(s0 + o as isize * so);
                let mut dp = dst.as_mut_ptr().add(d0 + o * do_);
                for _ in 0..inner {
                    std::ptr::write_unaligned(dp.cast::<u32>(), std::ptr::read_unaligned(sp.cast::<u32>()));
                    sp = sp.wrapping_offset(si);
                    dp = dp.wrapping_add(di);
                }
            }
        }
        return;
    }
    let tile = tile(es);
    for rb in (0..rows).step_by(tile) {
        let re = (rb + tile).min(rows);
        for cb in (0..cols).step_by(tile) {
            let ce = (cb + tile).min(cols);
            // The source offset is affine in (r, c): its extremes are at the
            // tile's corners. Check them so the loop below stays in bounds
            // whatever a caller's bug might be.
            let corner = |r: usize, c: usize| s0 + r as isize * sr + c as isize * sc;
            let corners = [
                corner(rb, cb),
                corner(rb, ce - 1),
                corner(re - 1, cb),
                corner(re - 1, ce - 1),
            ];
            let smin = *corners.iter().min().unwrap_or(&0);
            let smax = *corners.iter().max().unwrap_or(&0);
            assert!(smin >= 0 && smax as usize + es <= src.len());
            assert!(d0 + (re - 1) * dq + ce * es <= dst.len());
            let sp = src.as_ptr();
            let dp = dst.as_mut_ptr();
            for r in rb..re {
                for c in cb..ce {
                    // SAFETY: (r, c) lies in the tile, whose corner offsets
                    // were checked above; both offsets are affine in (r, c).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            sp.offset(corner(r, c)),
                            dp.add(d0 + r * dq + c * es),
                            es,
                        );
                    }
                }
            }
        }
    }
}

/// Sets every `elem_size`-byte element of `dst` to the low `elem_size`
/// bytes of `bits`, little endian (semantics of `Step::Fill`).
pub fn fill(elem_size: usize, bits: u64, dst: &mut [u8]) -> Result<(), KernelError> {
    if !(1..=8).contains(&elem_size) {
        return Err(err(format!(
            "element size of a fill must be between 1 and 8, found {elem_size}"
        )));
    }
    if !dst.len().is_multiple_of(elem_size) {
        return Err(err(format!(
            "fill destination of {} bytes is not a whole number of {elem_size}-byte elements",
            dst.len()
        )));
    }
    let elem = &bits.to_le_bytes()[..elem_size];
    if elem.iter().all(|&b| b == elem[0]) {
        if dst.len() >= PAR_MIN_BYTES {
            dst.par_chunks_mut(PAR_MIN_BYTES)
                .for_each(|c| c.fill(elem[0]));
        } else {
            dst.fill(elem[0]);
        }
        return Ok(());
    }
    // A block of 64 elements, copied whole; chunks are multiples of it.
    let block: Vec<u8> = elem.iter().copied().cycle().take(64 * elem_size).collect();
    let fill_chunk = |c: &mut [u8]| {
        let mut blocks = c.chunks_exact_mut(block.len());
        for b in &mut blocks {
            b.copy_from_slice(&block);
        }
        let rest = blocks.into_remainder();
        let n = rest.len();
        rest.copy_from_slice(&block[..n]);
    };
    if dst.len() >= PAR_MIN_BYTES {
        dst.par_chunks_mut(block.len() * 256).for_each(fill_chunk);
    } else {
        fill_chunk(dst);
    }
    Ok(())
}

/// `out[o, j, i] = data[o, indices[j], i]` for `data` of `outer × axis ×
/// inner` elements of `elem_size` bytes and `count` little-endian i64
/// indices (semantics of `Step::Gather`). Negative indices count from the
/// end of the axis; any index out of `-axis..axis` is an error, reported
/// before anything is written.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    elem_size: usize,
    outer: usize,
    axis: usize,
    inner: usize,
    count: usize,
    data: &[u8],
    indices: &[u8],
    out: &mut [u8],
) -> Result<(), KernelError> {
    let too_large = || err("gather is too large".to_string());
    let mul = |a: usize, b: usize| a.checked_mul(b).ok_or_else(too_large);
    if elem_size == 0 {
        return Err(err("element size must be at least 1, found 0".into()));
    }
    let row = mul(inner, elem_size)?;
    let need_data = mul(mul(outer, axis)?, row)?;
    let need_out = mul(mul(outer, count)?, row)?;
    let need_idx = mul(count, 8)?;
    if data.len() < need_data {
        return Err(err(format!(
            "gather data needs {need_data} bytes, found {}",
            data.len()
        )));
    }
    if indices.len() < need_idx {
        return Err(err(format!(
            "gather needs {count} indices ({need_idx} bytes), found {} bytes",
            indices.len()
        )));
    }
    if out.len() < need_out {
        return Err(err(format!(
            "gather output needs {need_out} bytes, found {}",
            out.len()
        )));
    }
    let rows: Vec<usize> = indices[..need_idx]
        .chunks_exact(8)
        .map(|b| {
            let i = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            let n = axis as i128;
            let j = if i < 0 { i as i128 + n } else { i as i128 };
            if j < 0 || j >= n {
                Err(err(format!(
                    "gather index {i} is out of range for an axis of {axis}"
                )))
            } else {
                Ok(j as usize)
            }
        })
        .collect::<Result<_, _>>()?;
    if row == 0 || count == 0 {
        return Ok(());
    }
    let out = &mut out[..need_out];
    let copy_row = |(r, dst): (usize, &mut [u8])| {
        let (o, j) = (r / count, r % count);
        let s = (o * axis + rows[j]) * row;
        dst.copy_from_slice(&data[s..s + row]);
    };
    if need_out >= PAR_MIN_BYTES {
        out.par_chunks_mut(row).enumerate().for_each(copy_row);
    } else {
        out.chunks_mut(row).enumerate().for_each(copy_row);
    }
    Ok(())
}
