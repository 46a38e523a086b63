//! Arithmetic over one logits vector (top-k, summaries, comparisons against a reference), and the brief forms of
//! logits the run stage keeps for the judges.
//!
//! The code is the `mobius-numeric` crate (`suite/numeric`): a decode step scans a row of up to 262,144 logits, and
//! that crate alone is compiled at `opt-level = 3` in the dev profile (tests, xtask), where the rest of the suite is at 1 for its
//! build time. This leaf is its name inside the suite.

pub use mobius_numeric::*;
