//! The text decoder's pipeline: the prompt's token ids straight into a decoder-only model.

use std::path::Path;

use crate::error::{Error, Result};
use crate::feed::inputs::Inputs;

/// Refuses media inputs: a decoder that takes ids has no session that could carry them to it.
pub fn check(package: &Path, inputs: &Inputs) -> Result<()> {
    if inputs.tensors.iter().any(|t| t.name != "input_ids") {
        return Err(Error::new(format!(
            "{}: the decoder takes input_ids; media inputs need a package with an embedding session",
            package.display()
        )));
    }
    Ok(())
}
