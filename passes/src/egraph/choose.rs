//! Which node of each class extraction takes: a greedy choice under DAG cost.
//!
//! A node's cost is the sum of the own costs of the distinct classes it
//! reaches through the current choices (its "cone"), itself included: a
//! value several ops read is paid for once, as the function pays for it.
//! Tree cost (a node plus its children's costs) counts a shared value once
//! per path to it, which grows exponentially with the depth of reuse: a
//! transformer layer reads its input four times, so twenty layers in, tree
//! costs were about 1e13 seconds, and the microsecond between an integer
//! add and its float expansion was below their last bit. Choices in the
//! later layers then fell to whichever node came first, silently.
//!
//! The fixpoint visits the classes in id order (children mostly before
//! parents) and recomputes every node each pass. A class keeps its node
//! unless another is cheaper by a relative `EPS`, so the passes end; a node
//! whose cone holds its own class would close a cycle and is skipped. At the
//! fixpoint each chosen node's cone is its class plus its children's cones,
//! so no chosen path returns to a class: the choice is acyclic. Should the
//! passes not settle within `MAX_PASSES`, the tree-cost choice is returned
//! instead (it is acyclic by construction).

use std::collections::HashMap;

use egg::Id;

use super::analysis::Graph;
use super::node::Node;

/// Relative cost difference below which two forms count as equal.
const EPS: f64 = 1e-9;
/// Passes before giving up on the DAG fixpoint.
const MAX_PASSES: usize = 64;

/// A set of class indices.
#[derive(Clone, Debug, Default, PartialEq)]
struct Cone(Vec<u64>);

impl Cone {
    fn contains(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn insert(&mut self, i: usize) {
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1 << (i % 64);
    }
    /// Adds `other`'s members, returning the sum of `own` over the new ones.
    fn absorb(&mut self, other: &Cone, own: &[f64]) -> f64 {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        let mut added = 0.0;
        for (w, (&o, mine)) in other.0.iter().zip(self.0.iter_mut()).enumerate() {
            let mut new = o & !*mine;
            *mine |= o;
            while new != 0 {
                added += own[w * 64 + new.trailing_zeros() as usize];
                new &= new - 1;
            }
        }
        added
    }
}

/// One class's candidate: its own cost, the node, its children's indices.
struct Cand<'a> {
    own: f64,
    node: &'a Node,
    children: Vec<usize>,
}

/// A class's current choice: candidate index, DAG cost, cone.
#[derive(Clone)]
struct Pick {
    cand: usize,
    cost: f64,
    cone: Cone,
}

/// The DAG cost and cone of candidate `c` of class `i`, or `None` when a
/// child has no choice yet or the cone would hold class `i` (a cycle).
fn cone_of(i: usize, c: &Cand, picks: &[Option<Pick>], own: &[f64]) -> Option<(f64, Cone)> {
    let kids: Vec<&Pick> = c.children.iter().map(|&k| picks[k].as_ref()).collect::<Option<_>>()?;
    // Start from the costliest child's cone (usually the largest) and add
    // the others' classes that it lacks.
    let (mut cost, mut cone) = match kids.iter().max_by(|a, b| a.cost.total_cmp(&b.cost)) {
        Some(p) => (p.cost, p.cone.clone()),
        None => (0.0, Cone::default()),
    };
    for p in &kids {
        cost += cone.absorb(&p.cone, own);
    }
    if cone.contains(i) {
        return None;
    }
    cone.insert(i);
    Some((cost + c.own, cone))
}

/// The chosen node of each class that has a well-typed form: class id ->
/// (DAG cost, node). `own_cost(class, node)` gives a node's own cost,
/// `None` for a node that does not type-check in its class.
pub fn choose(egraph: &Graph, own_cost: impl Fn(Id, &Node) -> Option<f64>) -> HashMap<Id, (f64, Node)> {
    // Class ids grow in insertion order and a node is added after its
    // children, so in id order most children are settled before parents.
    let mut ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    ids.sort();
    let index: HashMap<Id, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let cands: Vec<Vec<Cand>> = ids
        .iter()
        .map(|&id| {
            egraph[id]
                .nodes
                .iter()
                .filter_map(|n| {
                    let own = own_cost(id, n)?;
                    let children =
                        egg::Language::children(n).iter().map(|k| index.get(&egraph.find(*k)).copied()).collect::<Option<_>>()?;
                    Some(Cand { own, node: n, children })
                })
                .collect()
        })
        .collect();
    let picks = dag_picks(&cands, MAX_PASSES).unwrap_or_else(|| tree_picks(&cands));
    ids.iter()
        .zip(&picks)
        .enumerate()
        .filter_map(|(i, (&id, p))| p.map(|(k, cost)| (id, (cost, cands[i][k].node.clone()))))
        .collect()
}

/// The DAG-cost fixpoint over classes `0..cands.len()`: each class's
/// chosen candidate and cost, or `None` when `max_passes` do not settle.
fn dag_picks(cands: &[Vec<Cand>], max_passes: usize) -> Option<Vec<Option<(usize, f64)>>> {
    let n = cands.len();
    let mut picks: Vec<Option<Pick>> = vec![None; n];
    let mut own = vec![0.0; n];
    for _ in 0..max_passes {
        let mut changed = false;
        for i in 0..n {
            let current = picks[i].as_ref().map(|p| p.cand);
            let mut best: Option<Pick> = None;
            // The current node first: another replaces it only when cheaper.
            let order = current.into_iter().chain((0..cands[i].len()).filter(|&k| Some(k) != current));
            for k in order {
                let Some((cost, cone)) = cone_of(i, &cands[i][k], &picks, &own) else { continue };
                if best.as_ref().is_none_or(|b| cost < b.cost * (1.0 - EPS)) {
                    best = Some(Pick { cand: k, cost, cone });
                }
            }
            let same = match (&picks[i], &best) {
                (Some(a), Some(b)) => a.cand == b.cand && a.cone == b.cone && (a.cost - b.cost).abs() <= EPS * a.cost,
                (None, None) => true,
                _ => false,
            };
            if !same {
                changed = true;
                own[i] = best.as_ref().map_or(0.0, |b| cands[i][b.cand].own);
                picks[i] = best;
            }
        }
        if !changed {
            return Some(picks.iter().map(|p| p.as_ref().map(|p| (p.cand, p.cost))).collect());
        }
    }
    None
}

/// The tree-cost fixpoint: a node's cost plus its children's; each class's
/// chosen candidate and cost.
fn tree_picks(cands: &[Vec<Cand>]) -> Vec<Option<(usize, f64)>> {
    let mut best: Vec<Option<(f64, usize)>> = vec![None; cands.len()];
    loop {
        let mut changed = false;
        for i in 0..cands.len() {
            for (k, c) in cands[i].iter().enumerate() {
                let total = c.children.iter().try_fold(c.own, |t, &k| best[k].map(|(b, _)| t + b));
                if let Some(total) = total
                    && best[i].is_none_or(|(b, _)| total < b)
                {
                    best[i] = Some((total, k));
                    changed = true;
                }
            }
        }
        if !changed {
            return best.iter().map(|b| b.map(|(t, k)| (k, t))).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates `(own cost, children)` per class; every node is a
    /// placeholder (the algorithm reads only costs and children).
    fn cands(spec: &[&[(f64, &[usize])]]) -> Vec<Vec<Cand<'static>>> {
        static LEAF: std::sync::LazyLock<Node> = std::sync::LazyLock::new(|| Node::Param(0));
        spec.iter().map(|c| c.iter().map(|&(own, ch)| Cand { own, node: &LEAF, children: ch.to_vec() }).collect()).collect()
    }

    /// A diamond: class 3 is either `h(f(x), g(x))` (x paid once: 13) or
    /// `k(x)` at 22. Tree cost counts x twice (23) and picks `k`.
    #[test]
    fn a_shared_value_is_paid_once() {
        let c = cands(&[&[(10.0, &[])], &[(1.0, &[0])], &[(1.0, &[0])], &[(1.0, &[1, 2]), (12.0, &[0])]]);
        let dag = dag_picks(&c, MAX_PASSES).expect("settles");
        assert_eq!(dag[3], Some((0, 13.0)));
        assert_eq!(tree_picks(&c)[3], Some((1, 22.0)));
    }

    /// Doubling reuse 200 deep: tree costs reach 2^200, where a saving of
    /// 0.5 at the top is below the last bit; DAG costs stay exact.
    #[test]
    fn deep_reuse_keeps_small_differences() {
        let mut spec: Vec<Vec<(f64, Vec<usize>)>> = vec![vec![(1.0, vec![])]];
        for i in 1..=200 {
            spec.push(vec![(1.0, vec![i - 1, i - 1])]);
        }
        // The top: the same product two ways, 0.5 apart.
        spec.push(vec![(2.0, vec![200]), (1.5, vec![200])]);
        let spec: Vec<Vec<(f64, &[usize])>> = spec.iter().map(|c| c.iter().map(|(o, ch)| (*o, ch.as_slice())).collect()).collect();
        let refs: Vec<&[(f64, &[usize])]> = spec.iter().map(|c| c.as_slice()).collect();
        let c = cands(&refs);
        assert_eq!(dag_picks(&c, MAX_PASSES).expect("settles")[201].map(|p| p.0), Some(1));
        assert_eq!(tree_picks(&c)[201].map(|p| p.0), Some(0), "tree cost lost the difference (the old bug)");
    }

    /// A candidate whose cone holds its own class closes a cycle and is
    /// never chosen; a class with only such candidates has no choice.
    #[test]
    fn cycles_are_refused() {
        // Class 0: a leaf (5) or f(class 1); class 1: g(class 0) (1) or h(class 1).
        let c = cands(&[&[(5.0, &[]), (0.1, &[1])], &[(1.0, &[0]), (0.1, &[1])]]);
        let p = dag_picks(&c, MAX_PASSES).expect("settles");
        assert_eq!(p[0], Some((0, 5.0)));
        assert_eq!(p[1], Some((0, 6.0)));
        let only_cycle = cands(&[&[(1.0, &[0])]]);
        assert_eq!(dag_picks(&only_cycle, MAX_PASSES).expect("settles")[0], None);
    }
}
