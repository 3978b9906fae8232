//! proptest over operation sequences against the executable specification, for any index
//! (`harness::run_sequence`); proptest shrinks a failing sequence to a minimal one. Shown here on
//! the example index, with small tables so that keys collide and buckets fill.

use dmkit_indexes::example::{Example, ExampleOptions};
use dmkit_indexes::spec::Op;
use dmkit_verify::harness::run_sequence;
use proptest::prelude::*;
use std::ops::Bound;

fn ops(keys: u8) -> impl Strategy<Value = Vec<Op>> {
    let key = (0..keys).prop_map(|k| vec![k; 1 + (k % 3) as usize]);
    let value = prop::collection::vec(any::<u8>(), 0..20);
    let op = prop_oneof![
        key.clone().prop_map(|key| Op::Search { key }),
        (key.clone(), value.clone()).prop_map(|(key, value)| Op::Insert { key, value }),
        (key.clone(), value).prop_map(|(key, value)| Op::Update { key, value }),
        key.clone().prop_map(|key| Op::Delete { key }),
        key.prop_map(|k| Op::Scan { start: Bound::Included(k), end: Bound::Unbounded, limit: 2 }),
    ];
    prop::collection::vec(op, 1..60)
}

fn options() -> impl Strategy<Value = ExampleOptions> {
    (1u64..4, 1u32..4, 8u32..24).prop_map(|(buckets, slots_per_bucket, max_value_bytes)| ExampleOptions {
        buckets,
        slots_per_bucket,
        max_value_bytes,
        ..ExampleOptions::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if std::env::var("CI").is_ok() { 32 } else { 128 }, ..ProptestConfig::default() })]

    /// Sequences and configurations together: full buckets and over-long values are errors the
    /// model does not have, so outcomes are compared where the index accepted the operation.
    #[test]
    fn example_sequences_match_the_specification(options in options(), ops in ops(10)) {
        let (got, want) = run_sequence::<Example>(&options, &ops);
        prop_assert_eq!(got.len(), want.len());
        let mut model = dmkit_indexes::spec::SpecMap::new();
        for (op, got) in ops.iter().zip(&got) {
            // Re-run the model only on operations the index accepted, so a rejected insert
            // (full bucket, value too long) does not change the model either.
            match got {
                dmkit_indexes::spec::Outcome::Failed(dmkit_indexes::IndexError::Full)
                | dmkit_indexes::spec::Outcome::Failed(dmkit_indexes::IndexError::ValueTooLong { .. }) => continue,
                _ => {}
            }
            let expected = model.apply(op, false);
            prop_assert_eq!(got, &expected, "{:?}", op);
        }
    }
}
