//! Each index's checking presets, one file per index: its `Checked` implementation (presets,
//! configurations, faults) and the key shapes its presets use.

mod chime;
mod clover;
mod cluster;
mod dolphin;
mod example;
mod hstore;
mod race;
mod sherman;
mod smart;

pub use chime::{chime_key, chime_var_key};
pub use dolphin::{dolphin_key, dolphin_options};
pub use smart::smart_key;
