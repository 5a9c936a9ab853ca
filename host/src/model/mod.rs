//! The model layer: the platform's vocabulary, with no behaviour beyond shaping its own data.
//!
//! Ids, the clock, the error type, money and quantities, scopes and event types, and every typed
//! record the host stores or answers with: stores and installations, plugins, orders, products,
//! customers, webhook subscriptions, events, deliveries and their attempts, messages and the
//! host's mail, plugin log lines, the entries of the work queue. Every other layer reads these
//! types; this layer imports nothing else of the crate (storage, the service layer and the
//! adapters sit above it).

pub mod account;
pub mod clock;
pub mod customer;
pub mod delivery;
pub mod error;
pub mod event;
pub mod failure;
pub mod ids;
pub mod log;
pub mod mail;
pub mod message;
pub mod money;
pub mod order;
pub mod plugin;
pub mod product;
pub mod scopes;
pub mod store;
pub mod webhook;
pub mod work;
