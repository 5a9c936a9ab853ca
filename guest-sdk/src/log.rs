//! Log lines, kept with the delivery attempt and shown by `commerce-host plugin logs`. The bytes
//! per invocation are capped by the host; a plugin that goes over the cap is stopped.

use crate::__bindings::commerce::plugin::log::{Level, write};

/// Logs at debug level.
pub fn debug(message: &str) {
    write(Level::Debug, message);
}

/// Logs at info level.
pub fn info(message: &str) {
    write(Level::Info, message);
}

/// Logs at warn level.
pub fn warn(message: &str) {
    write(Level::Warn, message);
}

/// Logs at error level.
pub fn error(message: &str) {
    write(Level::Error, message);
}
