//! Typed indices into arenas, in the style of Cranelift's `entity` crate.
//!
//! Invariant: an id is only meaningful for the arena that made it; ids are
//! dense and never reused, so a `Vec` indexed by id is the natural side table.

use std::marker::PhantomData;

/// An index type usable as a key in [`Arena`].
pub trait EntityId: Copy + Eq + std::hash::Hash + Ord + std::fmt::Debug {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

/// Declares a `u32` newtype that implements [`EntityId`] and prints with a prefix.
#[macro_export]
macro_rules! entity_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);
        impl $crate::entity::EntityId for $name {
            fn new(index: usize) -> Self {
                $name(u32::try_from(index).expect("arena larger than u32::MAX"))
            }
            fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

/// A growable arena: push returns a fresh id; ids index it directly.
#[derive(Clone, Debug)]
pub struct Arena<K: EntityId, V> {
    items: Vec<V>,
    _key: PhantomData<K>,
}

impl<K: EntityId, V> Default for Arena<K, V> {
    fn default() -> Self {
        Arena { items: Vec::new(), _key: PhantomData }
    }
}

impl<K: EntityId, V> Arena<K, V> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn push(&mut self, value: V) -> K {
        let k = K::new(self.items.len());
        self.items.push(value);
        k
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn get(&self, k: K) -> Option<&V> {
        self.items.get(k.index())
    }
    pub fn keys(&self) -> impl Iterator<Item = K> + use<K, V> {
        (0..self.items.len()).map(K::new)
    }
    pub fn iter(&self) -> impl Iterator<Item = (K, &V)> {
        self.items.iter().enumerate().map(|(i, v)| (K::new(i), v))
    }
}

impl<K: EntityId, V> std::ops::Index<K> for Arena<K, V> {
    type Output = V;
    fn index(&self, k: K) -> &V {
        &self.items[k.index()]
    }
}

impl<K: EntityId, V> std::ops::IndexMut<K> for Arena<K, V> {
    fn index_mut(&mut self, k: K) -> &mut V {
        &mut self.items[k.index()]
    }
}
