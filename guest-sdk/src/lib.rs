//! Placeholder until the SDK lands.
