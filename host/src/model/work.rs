//! The durable work queue's entries and their keys: everything the delivery engine does after a
//! commit is one entry, written in the transaction of its cause (an event's fan-out, a replay, an
//! accepted message, a paused target's notice) and removed in the transaction that records what
//! came of it.
//!
//! `work/{kind}/{due ms}/{store}/{id}`: one lane per kind (`webhook`, `component`, `message`,
//! `mail`), each read in due order (zero-padded milliseconds) by a prefix scan, so that a backlog
//! of one kind never hides due work of another behind it. The `{id}` of a delivery is
//! `{target}/{event}`; the host's mail belongs to no store (`host`).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::model::delivery::{DueEntry, TargetRef, millis};
use crate::model::ids::{MailId, MessageId, StoreId};

/// Prefix of the work queue.
pub const WORK_PREFIX: &str = "work/";

/// The kinds of work, each a lane of the queue and a pool of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkKind {
    /// An attempt of a delivery to a webhook subscription.
    Webhook,
    /// An attempt of a delivery to an installed component.
    Component,
    /// Sending an accepted message through the merchant's sender.
    Message,
    /// Sending one of the host's own mails.
    Mail,
}

impl WorkKind {
    /// Every kind, in the order the engine visits their lanes.
    pub const ALL: [WorkKind; 4] = [Self::Webhook, Self::Component, Self::Message, Self::Mail];

    /// The kind's name in keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Component => "component",
            Self::Message => "message",
            Self::Mail => "mail",
        }
    }

    /// The prefix of the kind's lane (`work/webhook/`).
    pub fn prefix(self) -> String {
        format!("{WORK_PREFIX}{}/", self.as_str())
    }
}

/// One entry of the work queue: what is to be done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "work", rename_all = "snake_case")]
pub enum Work {
    /// An attempt of a delivery (webhook or component).
    Delivery(DueEntry),
    /// Sending an accepted message.
    Message {
        /// The store that sent it.
        store_id: StoreId,
        /// The message.
        message_id: MessageId,
    },
    /// Sending one of the host's own mails.
    Mail {
        /// The mail's record.
        mail_id: MailId,
    },
}

/// Where the host's mail sits in keys, which otherwise name a store.
const HOST: &str = "host";

impl Work {
    /// What kind of work it is.
    pub fn kind(&self) -> WorkKind {
        match self {
            Work::Delivery(entry) => match entry.target {
                TargetRef::Webhook(_) => WorkKind::Webhook,
                TargetRef::Component(_) => WorkKind::Component,
            },
            Work::Message { .. } => WorkKind::Message,
            Work::Mail { .. } => WorkKind::Mail,
        }
    }

    /// Its key when due at `at`.
    pub fn key(&self, at: Timestamp) -> String {
        self.key_at_ms(millis(at))
    }

    /// Its key when due at `ms` milliseconds since the epoch.
    pub fn key_at_ms(&self, ms: u64) -> String {
        // `{WORK_PREFIX}{kind}/{ms:020}/{names joined by '/'}`
        let names: &[&str] = match self {
            Work::Delivery(e) => &[e.store_id.as_str(), e.target.key(), e.event_id.as_str()],
            Work::Message {
                store_id,
                message_id,
            } => &[store_id.as_str(), message_id.as_str()],
            Work::Mail { mail_id } => &[HOST, mail_id.as_str()],
        };
        let kind = self.kind().as_str();
        let names_len: usize = names.iter().map(|name| name.len() + 1).sum();
        let mut key = String::with_capacity(WORK_PREFIX.len() + kind.len() + 1 + 20 + names_len);
        key.push_str(WORK_PREFIX);
        key.push_str(kind);
        key.push('/');
        super::push_padded(&mut key, ms);
        for name in names {
            key.push('/');
            key.push_str(name);
        }
        key
    }
}

/// The due time (ms) of a work key.
pub fn due_ms_of(key: &str) -> Option<u64> {
    let (_, rest) = key.strip_prefix(WORK_PREFIX)?.split_once('/')?;
    rest.get(..20)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_due_time_within_a_lane_and_name_their_work() {
        let store: StoreId = "store_a".parse().expect("id");
        let message = Work::Message {
            store_id: store.clone(),
            message_id: "msg_a".parse().expect("id"),
        };
        let early = message.key(Timestamp::from_second(9).expect("ts"));
        let late = message.key(Timestamp::from_second(10).expect("ts"));
        assert!(early < late);
        assert!(early.starts_with(&WorkKind::Message.prefix()));
        assert_eq!(due_ms_of(&early), Some(9_000));
        let delivery = Work::Delivery(DueEntry {
            store_id: store,
            target: TargetRef::Webhook("wh_a".parse().expect("id")),
            event_id: "evt_a".parse().expect("id"),
        });
        assert_eq!(
            delivery.key_at_ms(7),
            "work/webhook/00000000000000000007/store_a/wh_a/evt_a"
        );
        // The records' keys, joined from the same parts.
        let Work::Delivery(entry) = &delivery else {
            unreachable!()
        };
        let (store, target, event) = (&entry.store_id, &entry.target, &entry.event_id);
        use crate::model::delivery::{attempt_key, delivery_key};
        assert_eq!(delivery_key(store, target, event), "dlv/store_a/wh_a/evt_a");
        let attempt = "att_a".parse().expect("id");
        assert_eq!(
            attempt_key(store, target, &attempt),
            "att/store_a/wh_a/att_a"
        );
        assert_eq!(
            crate::model::event::event_key(store, event),
            "evt/store_a/evt_a"
        );
        assert_eq!(crate::model::log::invocation_key(&attempt), "inv/att_a");
        let mail = Work::Mail {
            mail_id: "mail_a".parse().expect("id"),
        };
        assert_eq!(mail.kind(), WorkKind::Mail);
        assert_eq!(
            mail.key_at_ms(u64::MAX),
            format!("work/mail/{}/host/mail_a", u64::MAX)
        );
        assert_eq!(
            message.key_at_ms(1_234),
            "work/message/00000000000000001234/store_a/msg_a"
        );
        let json = serde_json::to_string(&delivery).expect("json");
        assert_eq!(
            serde_json::from_str::<Work>(&json).expect("decode"),
            delivery
        );
    }
}

/// Who holds a claim on work where hosts share the storage: a host (the id kept in its data
/// folder, the same after a restart) in one boot of its process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The host, across its restarts.
    pub host: String,
    /// This boot of it: ids of later boots sort after those of earlier ones.
    pub boot: String,
}

impl Holder {
    /// A number of this boot of this host, the same at every call, spread over `u64` (for work
    /// that hosts divide among themselves without asking each other).
    pub fn spread(&self) -> usize {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.host, &self.boot).hash(&mut hasher);
        hasher.finish() as usize
    }
}

/// A host's claim on one attempt of a piece of work (hosts sharing the storage only), so that
/// one host makes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The work queue entry claimed: a claim of another entry of the same work holds nothing.
    pub due_key: String,
    /// Until when (ms since the epoch).
    pub until_ms: u64,
    /// Who claimed it (absent: anyone's, holding until its lease ends).
    #[serde(default)]
    pub holder: Option<Holder>,
}

impl Claim {
    /// `holder`'s claim on the entry `due_key` from `now` for `lease`.
    pub fn new(due_key: &str, holder: &Holder, now: Timestamp, lease: std::time::Duration) -> Self {
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        Self {
            due_key: due_key.to_owned(),
            until_ms: millis(now).saturating_add(lease_ms),
            holder: Some(holder.clone()),
        }
    }

    /// Whether this claim keeps `holder` from claiming the entry `due_key` at `now`: it is a
    /// claim of that same entry, its lease has not ended, and it is not the same host's from an
    /// earlier boot (a smaller boot id: that process ended, and its attempt with it). A claim of
    /// the same boot holds too (the attempt is in flight).
    pub fn holds_against(&self, due_key: &str, holder: &Holder, now: Timestamp) -> bool {
        let earlier_boot = self
            .holder
            .as_ref()
            .is_some_and(|h| h.host == holder.host && h.boot < holder.boot);
        self.due_key == due_key && self.until_ms > millis(now) && !earlier_boot
    }
}
