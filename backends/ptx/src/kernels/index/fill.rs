//! `Step::Fill`: every element of `dst` set to one bit pattern.
//!
//! Invariants:
//! - Power-of-two element sizes: an item is a 16-byte store of the pattern
//!   repeated (then one of the tail's elements), taken only after a
//!   run-time test that `dst` is 16-byte aligned; otherwise an item is one
//!   element stored at its natural alignment, all the contract promises.
//! - Other element sizes (3, 5, 6 or 7 bytes) store an element byte by
//!   byte.
//! - A `count` of 0 gives a kernel that returns at once (grid 1).

use super::builder::{BLOCK, K, chunk_ty, index_type, launch, product};
use crate::irtext::{ModuleText, check_entry_name};
use crate::kernels::Geometry;

/// `Step::Fill` of `count` elements: every `elem_size`-byte element (1 to
/// 8) of `dst` set to the low bytes of `bits`, little endian. Parameters
/// `(dst)`.
pub fn fill(
    m: &mut ModuleText,
    name: &str,
    elem_size: u64,
    count: u64,
    bits: u64,
) -> Result<Geometry, String> {
    check_entry_name(name)?;
    if !(1..=8).contains(&elem_size) {
        return Err(format!(
            "fill: element size must be between 1 and 8, found {elem_size}"
        ));
    }
    let es = elem_size;
    let bytes = product("fill", &[count, es])? as u64;
    let elem = &bits.to_le_bytes()[..es as usize];
    let ix = index_type(bytes as u128);
    if !es.is_power_of_two() {
        let g = launch(count, BLOCK);
        let mut k = K::new(m, ix, g);
        k.items(count, |k, i| {
            for (b, &byte) in elem.iter().enumerate() {
                let off = k.lin(b as i128, &[(i, es as i128)]);
                let p = k.at("%dst", ix, &off);
                k.store("i8", &(byte as i8).to_string(), &p, 1);
            }
        });
        let text = k.finish(name, &["%dst"], 1);
        m.func(text);
        return Ok(g);
    }
    let value = (bits & (u64::MAX >> (64 - 8 * es))) as i64;
    let value = match es {
        1 => (value as i8).to_string(),
        2 => (value as i16).to_string(),
        4 => (value as i32).to_string(),
        _ => value.to_string(),
    };
    let ety = chunk_ty(es);
    let pattern: Vec<u8> = elem.iter().copied().cycle().take(16).collect();
    let words: Vec<String> = pattern
        .chunks(4)
        .map(|w| format!("i32 {}", i32::from_le_bytes([w[0], w[1], w[2], w[3]])))
        .collect();
    let pattern = format!("<{}>", words.join(", "));
    let (nvec, tail) = (bytes / 16, (bytes % 16) / es);
    let items = nvec.max(tail);
    let g = launch(items, BLOCK);
    let mut k = K::new(m, ix, g);
    if bytes > 0 {
        let ok = k.aligned(&["%dst"], 16);
        k.if_else(
            &ok,
            |k| {
                k.items(items, |k, i| {
                    let v = k.v(format!("icmp ult {ix} {i}, {nvec}"));
                    k.if_(&v, |k| {
                        let off = k.lin(0, &[(i, 16)]);
                        let p = k.at("%dst", ix, &off);
                        k.store("<4 x i32>", &pattern, &p, 16);
                    });
                    let t = k.v(format!("icmp ult {ix} {i}, {tail}"));
                    k.if_(&t, |k| {
                        let off = k.lin((nvec * 16) as i128, &[(i, es as i128)]);
                        let p = k.at("%dst", ix, &off);
                        k.store(ety, &value, &p, es);
                    });
                })
            },
            |k| {
                k.items(count, |k, i| {
                    let off = k.lin(0, &[(i, es as i128)]);
                    let p = k.at("%dst", ix, &off);
                    k.store(ety, &value, &p, es);
                })
            },
        );
    }
    let text = k.finish(name, &["%dst"], 1);
    m.func(text);
    Ok(g)
}
