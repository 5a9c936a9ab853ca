//! Outbound messages: `POST /v1/notifications` on six channels, the templates they render, the
//! merchant's quotas and senders, and the records of what the delivery engine sent.
//!
//! Every rule lives here, in the service layer, so that an HTTP plugin and a component calling the
//! WIT host functions are held to exactly the same checks:
//!
//! - [`request`]: the request body and its validation into typed inputs;
//! - [`templates`]: plugin templates, merchant overrides, strict rendering;
//! - [`render`]: rendering a wording within fixed limits (language, output size, fuel, a gate);
//! - [`text`]: the characters a text may hold and the links a banner or card may carry;
//! - [`quota`]: the per-store daily quotas and the feed's one card per plugin per 24 hours;
//! - [`send`]: accepting a notification (validate, render, count, record, queue) in one
//!   transaction;
//! - [`dashboard`]: what the merchant sees (banners, feed cards) and the operator's message lists;
//! - [`senders`]: the merchant's connected senders (SMTP, HTTP providers);
//! - [`queue`]: claiming queued messages from the work queue and recording each attempt's
//!   outcome (the sending itself is the delivery engine's, `crate::delivery::messages`);
//! - [`retention`]: what housekeeping purges, and when.

pub mod dashboard;
pub mod queue;
pub mod quota;
pub mod render;
pub mod request;
pub mod retention;
pub mod send;
pub mod senders;
pub mod templates;
pub mod text;

pub use request::NotificationRequest;
