//! One error type: a message that already names the file, field or tensor it is about.

use std::fmt;

/// Bad input or a broken set-up, never a measured failure of the package: those are judgements (NaN logits
/// included, see `judge::finite`). One exception is marked as such: ONNX Runtime refusing to load a model file
/// that is there (an invalid graph), which is the package's failure and which an xfail may expect as `refused`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    refused: bool,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error { message: message.into(), refused: false }
    }

    /// ONNX Runtime refused to load a model file of the package (it is there, and its graph is invalid).
    pub fn refused(message: impl Into<String>) -> Self {
        Error { message: message.into(), refused: true }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the package's runtime refused to load it ([`Error::refused`]).
    pub fn is_refusal(&self) -> bool {
        self.refused
    }

    /// Prefixes the message with where it happened (`cases/x.yaml: ...`).
    pub fn context(self, place: impl fmt::Display) -> Self {
        Error { message: format!("{place}: {}", self.message), ..self }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Adds a place to any displayable error: `fs::read(p).at(p.display())?`.
pub trait At<T> {
    fn at(self, place: impl fmt::Display) -> Result<T>;
}

impl<T, E: fmt::Display> At<T> for std::result::Result<T, E> {
    fn at(self, place: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::new(format!("{place}: {e}")))
    }
}

macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::error::Error::new(format!($($arg)*))) };
}
pub(crate) use bail;
