//! Arena placement: the heuristic the lowering places its buffers with, and
//! the checker that proves a placement safe.
//!
//! A buffer lives over `[start, end]`, inclusive, in whatever time its
//! caller counts (the lowering counts steps). Offsets come from TFLite's
//! "greedy by size" heuristic: buffers in decreasing size, each into the
//! smallest gap (between already placed buffers whose lifetimes overlap its
//! own) that fits it.
//!
//! Invariants of a placement (proved by [`check_placement`], which
//! `lower::lower` runs on every plan it makes): every offset and size is a
//! multiple of [`ALIGN`]; every buffer lies inside the arena; two buffers
//! whose lifetimes overlap share no byte.

use std::collections::BTreeMap;

/// Alignment of every buffer's offset and size, in bytes (one cache line,
/// and the width of an AVX-512 register).
pub const ALIGN: u64 = 64;

/// When a buffer is in use: `[start, end]`, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    pub start: usize,
    pub end: usize,
}

impl Lifetime {
    pub fn overlaps(self, other: Lifetime) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// TFLite's greedy-by-size placement of `(lifetime, size)` groups:
/// biggest first (ties: earlier start), each into the smallest gap between
/// placed, lifetime-overlapping groups that fits it, else above the highest
/// of them. Returns each group's offset.
///
/// The placed groups overlapping a lifetime come from [`PlacedSet`]'s
/// segment tree, in `O((k + 1) log n)` for `k` of them, so a model of short
/// lifetimes (a long chain) places in `O(n log n)`, not `O(n²)`.
pub fn greedy_by_size(groups: &[(Lifetime, u64)]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by_key(|&g| (std::cmp::Reverse(groups[g].1), groups[g].0.start, g));
    let mut offsets = vec![0u64; groups.len()];
    let mut placed = PlacedSet::new(groups);
    let mut hits: Vec<usize> = vec![];
    for g in order {
        let (life, size) = groups[g];
        hits.clear();
        placed.overlapping(life, &mut hits);
        let mut busy: Vec<(u64, u64)> = hits.iter().map(|&p| (offsets[p], offsets[p] + groups[p].1)).collect();
        busy.sort_unstable();
        let mut best: Option<(u64, u64)> = None; // (gap, offset)
        let mut cursor = 0u64;
        for (lo, hi) in busy {
            if lo >= cursor + size {
                let gap = lo - cursor;
                if best.is_none_or(|(b, _)| gap < b) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(hi);
        }
        offsets[g] = best.map_or(cursor, |(_, o)| o);
        placed.insert(g);
    }
    offsets
}

/// The placed groups, queryable by lifetime: groups sorted by start, and a
/// segment tree holding the largest end among the placed ones of each
/// range. The groups overlapping `[s, e]` are the placed ones among those
/// starting at or before `e` whose end is at least `s`.
struct PlacedSet<'a> {
    groups: &'a [(Lifetime, u64)],
    /// Group indices by start.
    by_start: Vec<usize>,
    /// Each group's position in `by_start`.
    pos: Vec<usize>,
    /// Leaves from `size`; `-1`: nothing placed below.
    max_end: Vec<i64>,
    size: usize,
}

impl<'a> PlacedSet<'a> {
    fn new(groups: &'a [(Lifetime, u64)]) -> Self {
        let mut by_start: Vec<usize> = (0..groups.len()).collect();
        by_start.sort_by_key(|&g| (groups[g].0.start, g));
        let mut pos = vec![0; groups.len()];
        for (i, &g) in by_start.iter().enumerate() {
            pos[g] = i;
        }
        let size = groups.len().next_power_of_two().max(1);
        PlacedSet { groups, by_start, pos, max_end: vec![-1; 2 * size], size }
    }

    fn insert(&mut self, g: usize) {
        let mut i = self.size + self.pos[g];
        self.max_end[i] = self.groups[g].0.end as i64;
        while i > 1 {
            i /= 2;
            self.max_end[i] = self.max_end[2 * i].max(self.max_end[2 * i + 1]);
        }
    }

    /// Appends the placed groups overlapping `life` to `out`.
    fn overlapping(&self, life: Lifetime, out: &mut Vec<usize>) {
        let upto = self.by_start.partition_point(|&g| self.groups[g].0.start <= life.end);
        self.visit(1, 0, self.size, upto, life.start as i64, out);
    }

    fn visit(&self, node: usize, lo: usize, hi: usize, upto: usize, start: i64, out: &mut Vec<usize>) {
        if lo >= upto || self.max_end[node] < start {
            return;
        }
        if hi - lo == 1 {
            out.push(self.by_start[lo]);
            return;
        }
        let mid = (lo + hi) / 2;
        self.visit(2 * node, lo, mid, upto, start, out);
        self.visit(2 * node + 1, mid, hi, upto, start, out);
    }
}

/// One placed buffer, for [`check_placement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub life: Lifetime,
    pub offset: u64,
    pub size: u64,
}

/// Proves a placement safe: offsets and sizes are multiples of [`ALIGN`],
/// every buffer lies inside `arena_bytes`, and buffers whose lifetimes
/// overlap share no byte. The error names the first offending buffers with
/// `name` (given an index into `items`). `O(n log n)`: a sweep over time keeps the live buffers ordered by
/// offset, and each buffer that starts is compared with its neighbours
/// there (the live set stays disjoint, so neighbours are enough).
pub fn check_placement(
    items: &[Placed],
    arena_bytes: u64,
    name: &dyn Fn(usize) -> String,
) -> Result<(), String> {
    for (i, p) in items.iter().enumerate() {
        let i = name(i);
        if p.offset % ALIGN != 0 || p.size % ALIGN != 0 {
            return Err(format!(
                "{i}: offset {} or size {} not aligned to {ALIGN}",
                p.offset, p.size
            ));
        }
        if p.offset.checked_add(p.size).is_none_or(|end| end > arena_bytes) {
            return Err(format!(
                "{i}: bytes {}..{} outside the arena of {arena_bytes}",
                p.offset,
                p.offset.saturating_add(p.size)
            ));
        }
        if p.life.start > p.life.end {
            return Err(format!(
                "{i}: lifetime {}..={} ends before it starts",
                p.life.start, p.life.end
            ));
        }
    }
    // Starts in time order; at one time, buffers that ended before it leave
    // first (an end is inclusive: a buffer ending at t - 1 and one starting
    // at t are never live together).
    let mut by_start: Vec<usize> = (0..items.len()).filter(|&i| items[i].size > 0).collect();
    by_start.sort_by_key(|&i| items[i].life.start);
    let mut by_end = by_start.clone();
    by_end.sort_by_key(|&i| items[i].life.end);
    let mut ends = by_end.into_iter().peekable();
    // Live buffers: offset -> index (disjoint, so offsets are unique).
    let mut live: BTreeMap<u64, usize> = BTreeMap::new();
    for i in by_start {
        let p = items[i];
        while let Some(&j) = ends.peek() {
            if items[j].life.end >= p.life.start {
                break;
            }
            if live.get(&items[j].offset) == Some(&j) {
                live.remove(&items[j].offset);
            }
            ends.next();
        }
        let below = live.range(..=p.offset).next_back();
        let above = live.range(p.offset..).next();
        for (_, &j) in below.into_iter().chain(above) {
            let q = items[j];
            if p.offset < q.offset + q.size && q.offset < p.offset + p.size {
                return Err(format!(
                    "{} (live {}..={}, bytes {}..{}) and {} (live {}..={}, bytes {}..{}) share bytes",
                    name(j),
                    q.life.start,
                    q.life.end,
                    q.offset,
                    q.offset + q.size,
                    name(i),
                    p.life.start,
                    p.life.end,
                    p.offset,
                    p.offset + p.size
                ));
            }
        }
        live.insert(p.offset, i);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(start: usize, end: usize, offset: u64, size: u64) -> Placed {
        Placed {
            life: Lifetime { start, end },
            offset,
            size,
        }
    }

    fn index(i: usize) -> String {
        format!("buffer {i}")
    }

    /// The quadratic form of the heuristic: every placed group scanned.
    fn greedy_by_scan(groups: &[(Lifetime, u64)]) -> Vec<u64> {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| (std::cmp::Reverse(groups[g].1), groups[g].0.start, g));
        let mut offsets = vec![0u64; groups.len()];
        let mut placed: Vec<usize> = vec![];
        for g in order {
            let (life, size) = groups[g];
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&p| groups[p].0.overlaps(life))
                .map(|&p| (offsets[p], offsets[p] + groups[p].1))
                .collect();
            busy.sort_unstable();
            let (mut best, mut cursor): (Option<(u64, u64)>, u64) = (None, 0);
            for (lo, hi) in busy {
                if lo >= cursor + size && best.is_none_or(|(b, _)| lo - cursor < b) {
                    best = Some((lo - cursor, cursor));
                }
                cursor = cursor.max(hi);
            }
            offsets[g] = best.map_or(cursor, |(_, o)| o);
            placed.push(g);
        }
        offsets
    }

    #[test]
    fn the_segment_tree_places_as_the_scan_does() {
        let mut s = 0x1234_5678u64;
        let mut next = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        for n in [0usize, 1, 2, 3, 7, 64, 300] {
            let groups: Vec<(Lifetime, u64)> = (0..n)
                .map(|_| {
                    let start = next(200) as usize;
                    let len = if next(10) == 0 { next(200) } else { next(6) } as usize;
                    (Lifetime { start, end: start + len }, 64 * (1 + next(8)))
                })
                .collect();
            assert_eq!(greedy_by_size(&groups), greedy_by_scan(&groups), "{n} groups");
        }
    }

    #[test]
    fn greedy_placements_pass_the_checker() {
        // A chain a -> b -> c with a long-lived d: a and c share bytes.
        let groups = [
            (Lifetime { start: 0, end: 1 }, 128),
            (Lifetime { start: 1, end: 2 }, 64),
            (Lifetime { start: 2, end: 3 }, 128),
            (Lifetime { start: 0, end: 3 }, 64),
        ];
        let offsets = greedy_by_size(&groups);
        assert_eq!(offsets[0], offsets[2]);
        let items: Vec<Placed> = groups
            .iter()
            .zip(&offsets)
            .map(|(&(life, size), &offset)| Placed { life, offset, size })
            .collect();
        let arena = items.iter().map(|p| p.offset + p.size).max().unwrap();
        assert_eq!(arena, 256);
        check_placement(&items, arena, &index).unwrap();
    }

    #[test]
    fn the_checker_rejects_unsafe_placements() {
        let ok = [placed(0, 1, 0, 64), placed(2, 3, 0, 64), placed(1, 2, 64, 64)];
        check_placement(&ok, 128, &index).unwrap();
        // Lifetimes touching at one time overlap.
        let clash = [placed(0, 1, 0, 64), placed(1, 2, 0, 128)];
        let e = check_placement(&clash, 128, &index).unwrap_err();
        assert!(e.starts_with("buffer 0 (live 0..=1, bytes 0..64) and buffer 1 (live 1..=2, bytes 0..128) share bytes"), "{e}");
        // A neighbour below that reaches into the new buffer.
        let below = [placed(0, 5, 0, 128), placed(1, 2, 192, 64), placed(3, 4, 64, 64)];
        assert!(check_placement(&below, 256, &index).unwrap_err().starts_with("buffer 0 "));
        // One that has ended no longer counts.
        let ended = [placed(0, 2, 0, 128), placed(3, 4, 64, 64)];
        check_placement(&ended, 128, &index).unwrap();
        assert!(check_placement(&[placed(0, 0, 8, 64)], 128, &index).unwrap_err().contains("not aligned"));
        assert!(check_placement(&[placed(0, 0, 0, 96)], 128, &index).unwrap_err().contains("not aligned"));
        assert!(check_placement(&[placed(0, 0, 64, 128)], 128, &index).unwrap_err().contains("outside the arena"));
        assert!(check_placement(&[placed(0, 0, u64::MAX - 63, 64)], 128, &index).unwrap_err().contains("outside the arena"));
        assert!(check_placement(&[placed(2, 1, 0, 64)], 128, &index).unwrap_err().contains("ends before"));
    }
}
