//! One error type: a message that already names the file, field or tensor it is about.

use std::fmt;

/// Bad input or a broken set-up, never a measured failure of the package: those are judgements (NaN logits
/// included, see `judge::finite`). Two exceptions are marked as such: ONNX Runtime refusing to load a model file
/// that is there (an invalid graph), which is the package's failure and which an xfail may expect as `refused`; and
/// a device that does not start (CUDA's provider will not register, or will not run a one-node model either),
/// which is the machine's, never the package's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    cause: Cause,
}

/// Whose failure an error is, where it is not the set-up's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    SetUp,
    Refused,
    Device,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(message: impl Into<String>) -> Self {
        Error { message: message.into(), cause: Cause::SetUp }
    }

    /// ONNX Runtime refused to load a model file of the package (it is there, and its graph is invalid).
    pub fn refused(message: impl Into<String>) -> Self {
        Error { message: message.into(), cause: Cause::Refused }
    }

    /// The device did not start: its execution provider will not register, or will not run a one-node model.
    pub fn device(message: impl Into<String>) -> Self {
        Error { message: message.into(), cause: Cause::Device }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the package's runtime refused to load it ([`Error::refused`]).
    pub fn is_refusal(&self) -> bool {
        self.cause == Cause::Refused
    }

    /// Whether the device did not start ([`Error::device`]).
    pub fn is_device(&self) -> bool {
        self.cause == Cause::Device
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
