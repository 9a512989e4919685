//! Maps that give their room back: after a sweep forgets many entries of a map, a `HashMap`
//! keeps its capacity; the stores' maps that sweep shrink with this.

use std::collections::HashMap;
use std::hash::Hash;

/// Gives back what a map no longer needs after a sweep: a `HashMap` keeps its capacity when
/// entries go.
pub(crate) fn shrink<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}
