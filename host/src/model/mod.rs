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

/// Appends `n` in decimal, zero-padded to 20 digits (every `u64` fits): as `format!("{n:020}")`,
/// without its machinery (the keys an attempt reads and writes are joined with `concat`, which
/// allocates once at their size; through `format!` they took about 3 % of a backlog's samples).
pub fn push_padded(key: &mut String, mut n: u64) {
    let mut digits = [b'0'; 20];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
    key.extend(digits.iter().map(|&digit| char::from(digit)));
}
