//! sha256 as the suite records it: lowercase hex, the one spelling every golden, baseline, manifest and corpus check
//! compares. A leaf: the hasher and its hex, nothing else.

use sha2::{Digest, Sha256};

/// A hasher's digest as lowercase hex.
pub fn hex(h: Sha256) -> String {
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(Sha256::new_with_prefix(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_empty_input_has_its_well_known_digest() {
        assert_eq!(super::sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
