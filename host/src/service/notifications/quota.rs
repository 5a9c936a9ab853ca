//! Quotas: per store and channel, per UTC calendar day; the feed's one card per plugin per
//! rolling 24 hours; and at most so many banners showing per installation.
//!
//! The check and the increment run inside the transaction that records the message, so two
//! requests racing for the last slot can never both get it, and a refused message is never
//! queued.

use crate::model::message::QuotaState;
use crate::model::store::Quotas;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::model::error::{Error, Result};
use crate::model::ids::{InstallationId, MessageId, StoreId};
use crate::model::message::Channel;
use crate::storage::Tx;

/// How long a plugin waits between two feed cards in one store.
pub const FEED_CARD_INTERVAL: SignedDuration = SignedDuration::from_hours(24);

/// The UTC day `now` falls in (`2026-01-05`) and when it ends.
pub fn day_window(now: Timestamp) -> (String, Timestamp) {
    let date = now.to_zoned(TimeZone::UTC).date();
    let ends = date
        .tomorrow()
        .and_then(|d| d.to_zoned(TimeZone::UTC))
        .map(|z| z.timestamp())
        .unwrap_or(Timestamp::MAX);
    (date.to_string(), ends)
}

/// Whole seconds from `now` until `at`, rounded up, at least 1: what `Retry-After` says.
pub fn seconds_until(now: Timestamp, at: Timestamp) -> u64 {
    let ms = at.as_millisecond().saturating_sub(now.as_millisecond());
    u64::try_from(ms).map_or(1, |ms| ms.div_ceil(1000).max(1))
}

fn counter_key(store: &StoreId, channel: Channel, day: &str) -> String {
    format!("quota/{store}/{channel}/{day}")
}

/// Key prefix of a store's quota counters.
pub fn counters_prefix(store: &StoreId) -> String {
    format!("quota/{store}/")
}

fn feed_key(store: &StoreId, plugin: &str) -> String {
    format!("feed-last/{store}/{plugin}")
}

/// Key prefix of a store's feed slots (when each plugin posted its last card).
pub fn feed_slots_prefix(store: &StoreId) -> String {
    format!("feed-last/{store}/")
}

fn active_banners_key(store: &StoreId, installation: &InstallationId) -> String {
    format!("banner-active/{store}/{installation}")
}

/// Key prefix of a store's active-banner lists.
pub fn active_banners_prefix(store: &StoreId) -> String {
    format!("banner-active/{store}/")
}

/// A banner that counts against its installation's `banner_active` quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveBanner {
    /// The banner.
    pub id: MessageId,
    /// When it stops counting, unless it is dismissed before.
    #[serde(with = "crate::model::clock::api_ts")]
    pub expires_at: Timestamp,
}

/// The banners of one installation that may still be showing: one record, read and written in
/// the transaction that posts or dismisses a banner, so concurrent posts never overshoot.
pub type ActiveBanners = Vec<ActiveBanner>;

impl Tx<'_> {
    /// Counts one message of `channel` against `limit` for today, or refuses it with
    /// `quota_exceeded` (and `Retry-After` = seconds until midnight UTC) when none is left.
    pub fn take_quota(
        &mut self,
        store: &StoreId,
        channel: Channel,
        limit: u64,
        now: Timestamp,
    ) -> Result<QuotaState> {
        let (day, resets_at) = day_window(now);
        let key = counter_key(store, channel, &day);
        let used: u64 = self.read(&key)?.unwrap_or(0);
        if used >= limit {
            return Err(Error::QuotaExceeded {
                channel: channel.to_string(),
                limit,
                retry_after: seconds_until(now, resets_at),
            });
        }
        self.write(&key, &(used + 1))?;
        Ok(QuotaState {
            limit,
            used: used + 1,
            remaining: limit - used - 1,
            resets_at,
        })
    }

    /// Counts a new banner of `installation`: refused with `quota_exceeded` when it already has
    /// `quotas.banner_active` banners showing (`Retry-After`: until the first of them expires;
    /// dismissing one frees a place at once) or the store had `quotas.banner` banners today
    /// (`Retry-After`: until midnight UTC).
    pub fn take_banner_slot(
        &mut self,
        store: &StoreId,
        installation: &InstallationId,
        banner: ActiveBanner,
        quotas: &Quotas,
        now: Timestamp,
    ) -> Result<()> {
        let key = active_banners_key(store, installation);
        let mut active: ActiveBanners = self.read(&key)?.unwrap_or_default();
        active.retain(|b| b.expires_at > now);
        if active.len() as u64 >= quotas.banner_active {
            let free_at = active
                .iter()
                .map(|b| b.expires_at)
                .min()
                .unwrap_or_else(|| day_window(now).1);
            return Err(Error::QuotaExceeded {
                channel: Channel::Banner.to_string(),
                limit: quotas.banner_active,
                retry_after: seconds_until(now, free_at),
            });
        }
        self.take_quota(store, Channel::Banner, quotas.banner, now)?;
        active.push(banner);
        self.write(&key, &active)
    }

    /// A dismissed banner no longer counts against its installation's active banners.
    pub fn release_banner_slot(
        &mut self,
        store: &StoreId,
        installation: &InstallationId,
        id: &MessageId,
    ) -> Result<()> {
        let key = active_banners_key(store, installation);
        let Some(mut active) = self.read::<ActiveBanners>(&key)? else {
            return Ok(());
        };
        active.retain(|b| &b.id != id);
        if active.is_empty() {
            self.remove(&key)
        } else {
            self.write(&key, &active)
        }
    }

    /// Takes the plugin's feed slot: one card per plugin per store per rolling 24 hours from its
    /// last card, else `quota_exceeded` with `Retry-After` = seconds until the slot frees.
    pub fn take_feed_slot(&mut self, store: &StoreId, plugin: &str, now: Timestamp) -> Result<()> {
        let key = feed_key(store, plugin);
        if let Some(last) = self.read::<Timestamp>(&key)? {
            let free_at = last
                .saturating_add(FEED_CARD_INTERVAL)
                .unwrap_or(Timestamp::MAX);
            if now < free_at {
                return Err(Error::QuotaExceeded {
                    channel: Channel::Feed.to_string(),
                    limit: 1,
                    retry_after: seconds_until(now, free_at),
                });
            }
        }
        self.write(&key, &now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn the_day_ends_at_the_next_utc_midnight() {
        let (day, ends) = day_window(ts("2026-01-05T23:59:59.500Z"));
        assert_eq!(day, "2026-01-05");
        assert_eq!(ends, ts("2026-01-06T00:00:00Z"));
        let (day, ends) = day_window(ts("2026-01-06T00:00:00Z"));
        assert_eq!(day, "2026-01-06");
        assert_eq!(ends, ts("2026-01-07T00:00:00Z"));
    }

    #[test]
    fn stores_saved_before_quotas_load_with_the_default_quotas() {
        let mut record = serde_json::to_value(crate::model::store::Store {
            id: "store_a".parse().expect("id"),
            domain: "a.example".into(),
            created_at: ts("2026-01-05T00:00:00Z"),
            rate_limits: crate::model::store::RateLimits::default(),
            quotas: Quotas {
                email: 1,
                sms: 1,
                whatsapp: 1,
                push: 1,
                banner: 1,
                banner_active: 1,
            },
        })
        .expect("json");
        record.as_object_mut().expect("object").remove("quotas");
        let store: crate::model::store::Store = serde_json::from_value(record).expect("old record");
        assert_eq!(store.quotas, Quotas::default());
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let midnight = ts("2026-01-06T00:00:00Z");
        assert_eq!(seconds_until(ts("2026-01-05T23:59:59.500Z"), midnight), 1);
        assert_eq!(seconds_until(ts("2026-01-05T00:00:00Z"), midnight), 86_400);
        assert_eq!(seconds_until(midnight, midnight), 1);
    }
}
