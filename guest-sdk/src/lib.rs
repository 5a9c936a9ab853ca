//! The SDK for commerce-host plugins.
//!
//! Plugins that live outside the host as plain HTTP services receive signed webhooks: verify
//! each request with [`webhook::verify`] before trusting its body.

pub mod webhook;
