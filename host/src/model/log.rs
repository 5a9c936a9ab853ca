//! What a plugin logged during an invocation.

/// One line a plugin logged during an invocation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn`, `error`, or `stderr` (what the guest wrote there, such as a
    /// panic message).
    pub level: String,
    /// The text.
    pub message: String,
}
