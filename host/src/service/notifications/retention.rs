//! How long what the outbound API produces is kept. Housekeeping (`Service::purge_expired`, run
//! by the maintenance loop on the injected clock) removes:
//!
//! - banners (with their notification) [`BANNER_RETENTION`] after they stopped showing (expired
//!   or dismissed);
//! - feed cards (with their notification) [`FEED_RETENTION`] after they were posted;
//! - messages that are done (`sent`, `failed`, `outbox`) [`MESSAGE_RETENTION`] after their last
//!   change; queued ones stay until they are done;
//! - quota counters of past days, feed slots older than their interval, and the expired entries
//!   of the active-banner lists.

use jiff::{SignedDuration, Timestamp};

use crate::model::error::Result;
use crate::model::ids::StoreId;
use crate::model::message::{Banner, FeedCard, Message, MessageStatus};
use crate::service::Service;
use crate::service::maintenance::{Sweep, sweep};
use crate::service::notifications::quota::{self, ActiveBanners, FEED_CARD_INTERVAL};

/// Banners are kept this long after they stopped showing (the plugin can still read them).
pub const BANNER_RETENTION: SignedDuration = SignedDuration::from_hours(7 * 24);
/// Feed cards are kept this long after they were posted.
pub const FEED_RETENTION: SignedDuration = SignedDuration::from_hours(90 * 24);
/// Messages that are done are kept this long after their last change.
pub const MESSAGE_RETENTION: SignedDuration = SignedDuration::from_hours(30 * 24);

/// What one pass removed from one store.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutboundPurged {
    /// Banners (and their notifications).
    pub banners: usize,
    /// Feed cards (and their notifications).
    pub feed_cards: usize,
    /// Sent, failed and outbox messages.
    pub messages: usize,
    /// Quota counters of past days, old feed slots, empty active-banner lists.
    pub counters: usize,
}

fn past(at: Timestamp, retention: SignedDuration, now: Timestamp) -> bool {
    at.saturating_add(retention).is_ok_and(|until| until <= now)
}

impl Service {
    /// Removes a store's outbound records past their retention at `now`.
    pub fn purge_outbound(&self, store: &StoreId, now: Timestamp) -> Result<OutboundPurged> {
        // Banners, cards and messages are keyed by time-ordered ids: the scan stops at the first
        // one too young for any later one to be due.
        let banners = sweep(
            &self.db,
            &format!("banner/{store}/"),
            |_, b: &Banner| {
                let stopped = b.dismissed_at.map_or(b.expires_at, |d| d.min(b.expires_at));
                if !past(b.created_at, BANNER_RETENTION, now) {
                    Sweep::Stop
                } else if past(stopped, BANNER_RETENTION, now) {
                    Sweep::Remove
                } else {
                    Sweep::Keep
                }
            },
            |b: &Banner| vec![Message::key(store, &b.id)],
        )?;
        let feed_cards = sweep(
            &self.db,
            &format!("feed/{store}/"),
            |_, c: &FeedCard| {
                if past(c.created_at, FEED_RETENTION, now) {
                    Sweep::Remove
                } else {
                    Sweep::Stop
                }
            },
            |c: &FeedCard| vec![Message::key(store, &c.id)],
        )?;
        let messages = sweep(
            &self.db,
            &Message::prefix(store),
            |_, m: &Message| {
                let n = &m.notification;
                let done = matches!(
                    n.status,
                    MessageStatus::Sent | MessageStatus::Failed | MessageStatus::Outbox
                );
                if !past(n.created_at, MESSAGE_RETENTION, now) {
                    Sweep::Stop
                } else if done && past(n.updated_at, MESSAGE_RETENTION, now) {
                    Sweep::Remove
                } else {
                    Sweep::Keep
                }
            },
            |_| Vec::new(),
        )?;
        let (today, _) = quota::day_window(now);
        let keep_or_remove = |due: bool| if due { Sweep::Remove } else { Sweep::Keep };
        // `quota/<store>/<channel>/<day>`: days sort as text.
        let days = sweep(
            &self.db,
            &quota::counters_prefix(store),
            |key, _: &u64| {
                keep_or_remove(
                    key.rsplit('/')
                        .next()
                        .is_some_and(|day| day < today.as_str()),
                )
            },
            |_| Vec::new(),
        )?;
        let slots = sweep(
            &self.db,
            &quota::feed_slots_prefix(store),
            |_, last: &Timestamp| keep_or_remove(past(*last, FEED_CARD_INTERVAL, now)),
            |_| Vec::new(),
        )?;
        let lists = sweep(
            &self.db,
            &quota::active_banners_prefix(store),
            |_, active: &ActiveBanners| keep_or_remove(active.iter().all(|b| b.expires_at <= now)),
            |_| Vec::new(),
        )?;
        Ok(OutboundPurged {
            banners,
            feed_cards,
            messages,
            counters: days + slots + lists,
        })
    }
}
