//! A clip's duration, from its FLAC header.

use std::path::Path;

/// A FLAC file's duration, from the STREAMINFO block the format puts first.
pub(super) fn flac_seconds(path: &Path) -> Result<f64, String> {
    use std::io::Read;
    let mut head = [0u8; 26];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).map_err(|e| format!("{}: {e}", path.display()))?;
    flac_duration(&head).ok_or_else(|| {
        format!("{}: not a FLAC file stating its length (the bench reads a clip's duration from FLAC's header)", path.display())
    })
}

/// Duration from a FLAC file's first 26 bytes: `fLaC`, the STREAMINFO block's header, then after its block and
/// frame sizes (10 bytes), 64 bits holding the sample rate (20 bits), channels and bits per sample (8), and the
/// total samples (36). `None` for anything else, or a stream that does not state its length (0 samples).
pub(super) fn flac_duration(head: &[u8; 26]) -> Option<f64> {
    if &head[..4] != b"fLaC" || head[4] & 0x7f != 0 {
        return None;
    }
    let bits = u64::from_be_bytes(head[18..26].try_into().ok()?);
    let (rate, samples) = (bits >> 44, bits & ((1 << 36) - 1));
    (rate > 0 && samples > 0).then(|| samples as f64 / rate as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mobius_conformance::paths::workspace_root;

    /// The first 26 bytes of a FLAC file: `fLaC`, a last-block STREAMINFO header of 34 bytes, block and frame sizes,
    /// then the sample rate (20 bits), channels - 1 (3), bits per sample - 1 (5) and the total samples (36).
    fn flac_head(rate: u64, samples: u64) -> [u8; 26] {
        let mut head = [0u8; 26];
        head[..8].copy_from_slice(&[b'f', b'L', b'a', b'C', 0x80, 0, 0, 34]);
        let bits = (rate << 44) | (15 << 36) | samples; // mono, 16 bits
        head[18..].copy_from_slice(&bits.to_be_bytes());
        head
    }

    #[test]
    fn flac_duration_reads_streaminfo_and_refuses_what_does_not_state_it() {
        assert_eq!(flac_duration(&flac_head(16_000, 145_840)), Some(9.115));
        assert_eq!(flac_duration(&flac_head(48_000, (1 << 36) - 1)), Some(((1u64 << 36) - 1) as f64 / 48_000.0));
        assert_eq!(flac_duration(&flac_head(16_000, 0)), None, "a stream of unknown length");
        let mut wav = flac_head(16_000, 1);
        wav[..4].copy_from_slice(b"RIFF");
        assert_eq!(flac_duration(&wav), None);
        let mut padding_first = flac_head(16_000, 1);
        padding_first[4] = 1;
        assert_eq!(flac_duration(&padding_first), None, "STREAMINFO must come first");
    }

    #[test]
    fn the_committed_clip_is_as_long_as_soundfile_says() {
        let clip = workspace_root().join("fixtures/media/652-129742-0006.flac");
        assert_eq!(flac_seconds(&clip).unwrap(), 9.115);
        let e = flac_seconds(&workspace_root().join("Cargo.toml")).unwrap_err();
        assert!(e.contains("Cargo.toml") && e.contains("not a FLAC file"), "{e}");
    }
}
