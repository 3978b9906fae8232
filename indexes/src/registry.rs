//! Every index dmkit knows, one line each, and the one way the commands find them.
//!
//! An index owns its registration: its name ([`IndexKind::NAME`]), how its options follow
//! from a run's shape and a named configuration ([`IndexKind::for_run`]), and whether it is a
//! fixed-size hash table `dmkit fill` can fill ([`IndexKind::fixed_table`]), all in its own
//! folder, and what `dmkit check` explores ([`Checked`](crate::checking::Checked), in
//! `src/<name>/presets.rs`). This file adds the one line that makes the commands know it:
//! `dmkit run`, `reproduce`, `bench-load`, `server-node` and `fill` go through [`visit`];
//! `dmkit check` and `--list-plants` through [`registry!`](crate::registry), which hands the
//! same list to the checker's dispatcher (every listed type must implement `Checked`, or the
//! checker does not compile).
//!
//! To add an index: implement [`IndexKind`] and [`Checked`](crate::checking::Checked) in
//! `src/<name>/` and add its type to the list in [`registry!`](crate::registry).

use crate::IndexKind;

/// Hands the list of indexes to `$callback`, a macro of the caller's, as
/// `indexes: [T, ...], configurations: [T, ...]`:
///
/// - `indexes`: one type per name, in the order `--help` lists them (a named configuration of
///   another index with a name of its own, as ART of SMART, is a
///   [`Configured`](crate::configured::Configured) type: a line here, no forwarding code);
/// - `configurations`: types that run some named configurations of an index listed above,
///   under its name ([`IndexKind::serves`] says which configurations each takes).
///
/// A command whose visitor needs only [`IndexKind`] uses [`visit`] instead.
#[macro_export]
macro_rules! registry {
    ($callback:ident) => {
        $callback! {
            indexes: [
                $crate::example::Example,
                $crate::race::Race,
                $crate::cluster::Cluster,
                $crate::sherman::Sherman,
                $crate::smart::Smart,
                $crate::art::Art,
                $crate::chime::Chime,
                $crate::dolphin::Dolphin,
                $crate::hstore::HStore,
                $crate::clover::Clover,
                $crate::probe::Probe,
            ],
            configurations: [
                // Sherman with its values out of line (`sherman-…-ool`: HStore's baseline).
                $crate::indirect::Indirect<$crate::sherman::Sherman>,
            ]
        }
    };
}

/// What a run asks of an index's options: the shape its sizing follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunShape<'a> {
    /// Items the run may hold: the loaded keys and the run's inserts beyond them.
    pub items: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub memory_nodes: u16,
    /// A compute node's cache budget (`--cache-bytes`), if the run sets one.
    pub cache_bytes: Option<u64>,
    /// The workload's name, for messages.
    pub workload: &'a str,
}

/// `dmkit fill`'s table: one that never grows, filled until an insert fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableShape {
    /// Slots per bucket; the index's own default if `None`.
    pub slots: Option<u32>,
    /// Buckets, or bucket groups, as the index counts its size.
    pub size: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
}

/// Something done with one registered index, whichever it is: [`visit`] finds the index and
/// calls `visit::<K>()` with its type.
pub trait Visitor {
    type Out;
    fn visit<K: IndexKind>(self) -> Self::Out;
}

macro_rules! names {
    (indexes: [$($index:ty),* $(,)?], configurations: [$($config:ty),* $(,)?]) => {
        /// The names of the registered indexes, in the registry's order.
        pub fn index_names() -> Vec<&'static str> {
            vec![$(<$index as IndexKind>::NAME),*]
        }

        /// Calls `v` with the registered index named `name` that serves configuration `config`.
        pub fn visit<V: Visitor>(name: &str, config: &str, v: V) -> Result<V::Out, String> {
            $(
                if name == <$config as IndexKind>::NAME && <$config as IndexKind>::serves(config) {
                    return Ok(v.visit::<$config>());
                }
            )*
            $(
                if name == <$index as IndexKind>::NAME {
                    return Ok(v.visit::<$index>());
                }
            )*
            Err(unknown(name))
        }
    };
}
crate::registry!(names);

/// The error for a name no index has.
pub fn unknown(name: &str) -> String {
    format!("unknown index '{name}' (known: {})", index_names().join(", "))
}

/// The error for a configuration an index does not have.
pub fn no_configuration(index: &str, config: &str, known: &[&str]) -> String {
    format!("index {index} has no configuration '{config}' (configurations: {})", known.join(", "))
}

/// A configuration with overrides, `name,key=N,...` (CHIME's and SMART's): the name, and each
/// override's key and number in order, or the error naming a malformed one (met when the caller
/// reaches it, after it has checked the name).
pub fn config_overrides(spec: &str) -> (&str, impl Iterator<Item = Result<(&str, u64), String>>) {
    let mut parts = spec.split(',');
    let name = parts.next().unwrap_or_default().trim();
    let overrides = parts.map(|part| {
        let (k, v) = part.split_once('=').ok_or_else(|| format!("override '{part}' is not name=value"))?;
        let n = v.trim().parse().map_err(|_| format!("override {part}: '{v}' is not a number"))?;
        Ok((k.trim(), n))
    });
    (name, overrides)
}

/// The error for `--cache-bytes` given to an index without a compute-node cache budget.
pub fn no_cache_budget(index: &str, why: &str) -> String {
    format!("index {index} {why}: --cache-bytes does not apply")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Name;
    impl Visitor for Name {
        type Out = (&'static str, bool);
        fn visit<K: IndexKind>(self) -> Self::Out {
            (K::NAME, std::any::type_name::<K>().contains("Indirect"))
        }
    }

    #[test]
    fn names_are_distinct_and_each_finds_its_index() {
        let names = index_names();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "two indexes share a name: {names:?}");
        for name in names {
            assert_eq!(visit(name, "default", Name).unwrap(), (name, false));
        }
        assert!(visit("btree", "default", Name).unwrap_err().contains("known: example, race"));
    }

    #[test]
    fn a_configuration_of_another_type_goes_to_its_entry() {
        assert_eq!(visit("sherman", "sherman-hstore-ool", Name).unwrap(), ("sherman", true));
        assert_eq!(visit("sherman", "sherman-hstore", Name).unwrap(), ("sherman", false));
    }
}
