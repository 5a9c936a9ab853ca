//! What the merchant sees (active banners, feed cards) and the operator's view of a store's
//! messages, outbox included.

use serde::Deserialize;
use utoipa::IntoParams;

use crate::model::error::{Error, Result};
use crate::model::ids::{MessageId, StoreId};
use crate::model::message::{Banner, Channel, FeedCard, Message, MessageStatus};
use crate::service::Service;
use crate::service::pagination::{Listing, Page, PageRequest};

/// Filters of `GET /admin/v1/stores/{store_id}/notifications`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MessageFilter {
    /// Only messages with this status (`queued`, `sent`, `failed`, `outbox`, `shown`).
    pub status: Option<MessageStatus>,
    /// Only messages on this channel.
    pub channel: Option<Channel>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl Service {
    /// The banners showing on a store's dashboard now (not expired, not dismissed), newest first.
    pub fn active_banners(&self, store: &StoreId, page: &PageRequest) -> Result<Page<Banner>> {
        self.store(store)?;
        let now = self.now();
        let prefix = format!("banner/{store}/");
        Listing {
            prefix: &prefix,
            list_id: &prefix,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |b: &Banner| b.is_active(now))
    }

    /// The merchant dismisses a banner. Dismissing it again changes nothing.
    pub fn dismiss_banner(&self, store: &StoreId, id: &MessageId) -> Result<Banner> {
        self.store(store)?;
        let now = self.now();
        self.db.tx(|tx| {
            let key = Banner::key(store, id);
            let mut banner: Banner = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("banner", id))?;
            if banner.dismissed_at.is_none() {
                banner.dismissed_at = Some(now);
                tx.write(&key, &banner)?;
                tx.release_banner_slot(store, &banner.installation_id, id)?;
            }
            Ok(banner)
        })
    }

    /// A store's feed cards, newest first.
    pub fn feed(&self, store: &StoreId, page: &PageRequest) -> Result<Page<FeedCard>> {
        self.store(store)?;
        let prefix = format!("feed/{store}/");
        Listing {
            prefix: &prefix,
            list_id: &prefix,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }

    /// The merchant dismisses a feed card: it leaves the feed page. Dismissing it again changes
    /// nothing.
    pub fn dismiss_feed_card(&self, store: &StoreId, id: &MessageId) -> Result<FeedCard> {
        self.store(store)?;
        let now = self.now();
        self.db.tx(|tx| {
            let key = FeedCard::key(store, id);
            let mut card: FeedCard = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("feed card", id))?;
            if card.dismissed_at.is_none() {
                card.dismissed_at = Some(now);
                tx.write(&key, &card)?;
            }
            Ok(card)
        })
    }

    /// The feed the merchant's home page shows: cards not dismissed, newest first.
    pub fn open_feed(&self, store: &StoreId, page: &PageRequest) -> Result<Page<FeedCard>> {
        self.store(store)?;
        let prefix = format!("feed/{store}/");
        let list_id = format!("{prefix}open");
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |c: &FeedCard| {
            c.dismissed_at.is_none()
        })
    }

    /// What a message says, in a line, for the merchant's list of sent messages: an email's
    /// subject, a push's title, the start of a text, or the title of a banner or feed card.
    pub fn message_summary(&self, store: &StoreId, message: &Message) -> Result<String> {
        let id = &message.notification.id;
        let summary = match message.notification.channel {
            Channel::Banner => self
                .db
                .read::<Banner>(&Banner::key(store, id))?
                .map(|b| b.title),
            Channel::Feed => self
                .db
                .read::<FeedCard>(&FeedCard::key(store, id))?
                .map(|c| c.title),
            _ => message.content.as_ref().map(|c| {
                c.subject
                    .clone()
                    .or_else(|| c.title.clone())
                    .unwrap_or_else(|| c.body.chars().take(120).collect())
            }),
        };
        Ok(summary.unwrap_or_default())
    }

    /// A store's messages, newest first, with their resolved address, content and delivery state
    /// (operator API). The outbox is `status=outbox`.
    pub fn messages(
        &self,
        store: &StoreId,
        filter: &MessageFilter,
        page: &PageRequest,
    ) -> Result<Page<Message>> {
        self.store(store)?;
        let prefix = Message::prefix(store);
        let list_id = format!("{prefix}?{:?}&{:?}", filter.status, filter.channel);
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |m: &Message| {
            filter.status.is_none_or(|s| m.notification.status == s)
                && filter.channel.is_none_or(|c| m.notification.channel == c)
        })
    }

    /// One message of a store (operator API).
    pub fn message(&self, store: &StoreId, id: &MessageId) -> Result<Message> {
        self.db
            .read(&Message::key(store, id))?
            .ok_or_else(|| Error::not_found("notification", id))
    }
}
