//! Bulk load: building the initial structure with the index's own insert logic.
//!
//! Loading runs the index's real `insert` (splits, resizes and all), so a bulk-loaded structure
//! has the shape loading by inserts gives. Backends make it cheap: the simulator's instant mode
//! (`Sim::set_instant`) executes the verbs with no simulated time, NIC or CPU cost.

use crate::{Index, IndexError};

/// Inserts every item in order; returns how many keys were new.
pub async fn load<I: Index>(
    index: &mut I,
    items: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Result<u64, IndexError> {
    let mut new = 0;
    for (key, value) in items {
        if !index.insert(&key, &value).await? {
            new += 1;
        }
    }
    Ok(new)
}
