//! Checking presets of Clover (`dmkit_indexes::clover`).

use crate::Counters;
use crate::checking::{Checked, Mix, Preset, ScanBounds, be_key, point};
use crate::clover::{
    CHAIN_HOP, Clover, CloverOptions, MS_FULL, MS_LOOKUP, MS_REGISTER_RACED, REGISTER_LOST, REGISTERED, STALE_CACHE,
    STALE_HINT,
};

/// Key `k` as the last `k % 8 + 1` big-endian bytes of `k + 1`: keys of 1 to 8 bytes, all but
/// the eighth shorter than the presets' maximum, distinct for `k < 256`.
fn varied_key(k: u64) -> Vec<u8> {
    let len = (k % 8 + 1) as usize;
    (k + 1).to_be_bytes()[8 - len..].to_vec()
}

/// Clover (HStore's other baseline): four keys, so that writers of one key race on its tail's
/// CAS, registrations race at the metadata server, and readers and writers find their cached
/// tails and the shortcuts stale.
impl Checked for Clover {
    fn presets() -> Vec<(Preset, CloverOptions)> {
        let options = CloverOptions {
            max_key_bytes: 8,
            max_value_bytes: 64,
            rpc_threads: 2,
            max_keys: 64,
            max_retries: 2_000,
            chunk_bytes: 1 << 16,
            ..Default::default()
        };
        let base = Preset {
            name: "default",
            compute_nodes: 2,
            memory_nodes: 1,
            clients: 3,
            ops_per_client: 6,
            keys: 4,
            key_of: be_key,
            value_bytes: 8,
            preload: 2,
            mix: Mix { search: 35, insert: 30, update: 20, delete: 15, scan: 0 },
            scan_limit: 4,
            scan_bounds: ScanBounds::From,
            required_counters: &[Counters::CAS_FAILURES, STALE_HINT, STALE_CACHE, REGISTERED, MS_LOOKUP],
            step_limit: 1_000_000,
            low_client_ids: false,
        };
        vec![
            (base.clone(), options.clone()),
            (
                Preset {
                    name: "pair",
                    clients: 2,
                    ops_per_client: 3,
                    keys: 2,
                    required_counters: &[],
                    step_limit: 300_000,
                    ..base.clone()
                },
                options.clone(),
            ),
            // Sizes at the edges of the version format: keys of 1 to 4 bytes (below the
            // options' maximum of 8) and 109-byte values, so versions are 126 to 129 bytes: two
            // 64-byte units, exactly full for the 3-byte key, and three for the 4-byte one.
            // Added for the mutation run: no preset had a version of more than one unit, one
            // that fills its units, or a key shorter than the maximum, so mutants of the unit
            // count, of the length check and of the metadata server's key check survived.
            (
                Preset {
                    name: "sizes",
                    key_of: varied_key,
                    value_bytes: 109,
                    required_counters: &[Counters::CAS_FAILURES, REGISTERED, MS_LOOKUP],
                    ..base
                },
                CloverOptions { max_value_bytes: 128, ..options },
            ),
        ]
    }

    fn sweep() -> Vec<(Preset, CloverOptions)> {
        let (base, o) = Self::presets().swap_remove(0);
        // The largest value a 255-unit version holds with an 8-byte key.
        let max_value = 255 * 64 - 16 - 8;
        vec![
            // As many shortcut words as keys, none preloaded, inserts first: registrations of
            // one key race at the MS, and a raced registration must not cost a later key its
            // word.
            point(
                "sweep-max-keys-tight",
                Preset {
                    preload: 0,
                    mix: Mix { search: 20, insert: 50, update: 15, delete: 15, scan: 0 },
                    required_counters: &[REGISTERED, REGISTER_LOST, MS_REGISTER_RACED],
                    ..base.clone()
                },
                CloverOptions { max_keys: 4, ..o.clone() },
            ),
            // One shortcut word fewer than keys: the MS refuses the last new key, whose insert
            // gives its unlinked version back to the allocator (a free of the exact block: an
            // allocator refuses one of a length it never handed out) and answers `Full`, while
            // the other keys' chains grow. Added for the mutation run: no preset reached the
            // refusal, so mutants of its free survived.
            point(
                "sweep-max-keys-short",
                Preset {
                    preload: 0,
                    mix: Mix { search: 20, insert: 50, update: 15, delete: 15, scan: 0 },
                    required_counters: &[REGISTERED, MS_FULL],
                    ..base.clone()
                },
                CloverOptions { max_keys: 3, ..o.clone() },
            ),
            // One retry: a reader follows no version past the first, a writer whose CAS lost
            // gives up, so every lost race ends in an operation of unknown effect.
            point(
                "sweep-retries-1",
                Preset { required_counters: &[Counters::CAS_FAILURES], ..base.clone() },
                CloverOptions { max_retries: 1, ..o.clone() },
            ),
            // One MS thread: registrations are served one at a time, so only clients race.
            point(
                "sweep-rpc-1",
                Preset { preload: 0, required_counters: &[REGISTERED, REGISTER_LOST], ..base.clone() },
                CloverOptions { rpc_threads: 1, ..o.clone() },
            ),
            // Versions of 255 units (the largest value an 8-byte key allows): a READ of a
            // version spans 255 lines beside the `next` word writers CAS.
            point(
                "sweep-value-max",
                Preset {
                    value_bytes: max_value,
                    required_counters: &[Counters::CAS_FAILURES, STALE_HINT],
                    step_limit: 20_000_000,
                    ..base.clone()
                },
                CloverOptions { max_value_bytes: max_value as u32, ..o.clone() },
            ),
            // Keys of 255 bytes sharing a 247-byte prefix (the MS's directory and the versions'
            // key check at their longest).
            point(
                "sweep-key-max",
                Preset { key_of: long_key, required_counters: &[REGISTERED, STALE_HINT], ..base.clone() },
                CloverOptions { max_key_bytes: 255, ..o.clone() },
            ),
            // Four memory nodes, three compute nodes (each caches shortcut addresses itself), and
            // the smallest chunk the allocator accepts (every version fetched whole).
            point(
                "sweep-nodes-4",
                Preset {
                    compute_nodes: 3,
                    memory_nodes: 4,
                    required_counters: &[STALE_HINT, MS_LOOKUP, Counters::CAS_FAILURES],
                    ..base.clone()
                },
                CloverOptions { memory_nodes: 4, chunk_bytes: 32, ..o.clone() },
            ),
            // The query cache off (configuration `nocache`): every operation asks the MS, and
            // every read and write starts from the version the MS names.
            point(
                "sweep-nocache",
                Preset { required_counters: &[Counters::CAS_FAILURES, STALE_CACHE, MS_LOOKUP], ..base.clone() },
                CloverOptions { query_cache: false, ..o.clone() },
            ),
            // Long runs: 4 clients x 25 operations on 3 keys, so chains grow and hints lag by
            // several versions.
            point(
                "sweep-long",
                Preset {
                    clients: 4,
                    ops_per_client: 25,
                    keys: 3,
                    required_counters: &[Counters::CAS_FAILURES, STALE_HINT, CHAIN_HOP, REGISTER_LOST],
                    step_limit: 6_000_000,
                    ..base
                },
                o,
            ),
        ]
    }
}

/// Key `k` at the longest Clover allows (255 bytes): a shared 247-byte prefix, then `k`.
fn long_key(k: u64) -> Vec<u8> {
    let mut key = vec![0x4b; 247];
    key.extend_from_slice(&k.to_be_bytes());
    key
}
