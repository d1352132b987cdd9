use core::fmt;

/// Why a packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header or than a length field says.
    Truncated,
    /// A field has a value the format does not allow (bad version, bad header
    /// length, malformed option, ...).
    Malformed,
    /// The checksum does not verify.
    Checksum,
    /// Well-formed but not something this implementation handles.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "bad checksum",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;
