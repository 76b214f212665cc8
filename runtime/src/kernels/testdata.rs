//! Test data shared by the integer kernels' tests: one deterministic byte
//! generator, so a failure reproduces and no test module keeps its own.

/// `n` bytes from a xorshift sequence seeded by `seed`.
pub(crate) fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 7) as u8
        })
        .collect()
}
