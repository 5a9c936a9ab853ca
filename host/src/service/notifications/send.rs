//! Accepting a notification: validate, render, then count it against the quota and record it in
//! one transaction, so a refused message is never queued and a race never over-sends.

use jiff::{SignedDuration, Timestamp};

use super::request::{
    BannerInput, DEFAULT_TTL_HOURS, FeedCardInput, MessageInput, NotificationRequest, Outgoing,
    Recipient,
};
use super::senders::Sender;
use super::templates;
use crate::metrics::NotificationOutcome;
use crate::model::customer::Customer;
use crate::model::error::{Error, Result};
use crate::model::ids::{MessageId, StoreId};
use crate::model::message::QuotaState;
use crate::model::message::{
    Banner, Channel, FeedCard, Message, MessageStatus, Notification, NotificationAccepted,
};
use crate::model::store::{Installation, Store};
use crate::service::notifications::quota::ActiveBanner;
use crate::service::{Actor, Service};
use crate::storage::Tx;

fn store_in(tx: &mut Tx<'_>, id: &StoreId) -> Result<Store> {
    tx.read(&Store::key(id))?
        .ok_or_else(|| Error::not_found("store", id))
}

impl Service {
    /// `POST /v1/notifications`: any channel. Needs no scope; the message goes out through the
    /// merchant's sender, counted against the store's quota.
    pub fn send_notification(
        &self,
        actor: &Actor,
        request: NotificationRequest,
    ) -> Result<NotificationAccepted> {
        let sent = match request.validate()? {
            Outgoing::Message(message) => self.send_message(actor, message),
            Outgoing::Banner(banner) => self.post_banner(actor, banner),
            Outgoing::Feed(card) => self.post_feed_card(actor, card),
        };
        match &sent {
            Ok(accepted) => self.metrics.notification(
                accepted.notification.channel.as_str(),
                NotificationOutcome::Accepted,
            ),
            Err(Error::QuotaExceeded { channel, .. }) => self.metrics.quota_refused(channel),
            Err(_) => {}
        }
        sent
    }

    /// Sends a templated message (email, sms, whatsapp, push) to one recipient.
    pub fn send_message(&self, actor: &Actor, input: MessageInput) -> Result<NotificationAccepted> {
        let store = actor.store_id();
        let installation: Installation = self.installation(store, &actor.installation)?;
        let (template, over) = self
            .template_for(&installation, &input.template)?
            .ok_or_else(|| {
                Error::invalid(
                    "template",
                    format!(
                        "plugin `{}` has no template `{}`",
                        actor.plugin, input.template
                    ),
                )
            })?;
        let content = templates::render(
            input.channel,
            &input.template,
            &template,
            over.as_ref(),
            &input.data,
        )?;
        let address = self.resolve(store, input.channel, &input.recipient)?;
        let now = self.now();
        let id = MessageId::generate(now);
        let (message, quota) = self.db.tx(|tx| {
            let limit = store_in(tx, store)?
                .quotas
                .limit(input.channel)
                .unwrap_or(u64::MAX);
            let quota = tx.take_quota(store, input.channel, limit, now)?;
            let connected = tx
                .read::<Sender>(&Sender::key(store, input.channel))?
                .is_some();
            let status = if connected {
                MessageStatus::Queued
            } else {
                MessageStatus::Outbox
            };
            let mut message = self.record(actor, &id, input.channel, status, now);
            message.notification.to = Some(input.to.clone());
            message.notification.template = Some(input.template.clone());
            message.notification.next_attempt_at = connected.then_some(now);
            message.address = Some(address.clone());
            message.content = Some(content.clone());
            tx.write(&Message::key(store, &id), &message)?;
            if connected {
                let work = crate::model::work::Work::Message {
                    store_id: store.clone(),
                    message_id: id.clone(),
                };
                tx.enqueue(&work, now)?;
            }
            Ok((message, quota))
        })?;
        Ok(accepted(&message, None, None, Some(quota)))
    }

    /// The address a message goes to: the customer's email or phone (or id, for push), or the
    /// address given. A customer of another store, or without the address, is refused on `to`.
    fn resolve(&self, store: &StoreId, channel: Channel, recipient: &Recipient) -> Result<String> {
        let id = match recipient {
            Recipient::Email(a) | Recipient::Phone(a) => return Ok(a.clone()),
            Recipient::Customer(id) => id,
        };
        let customer: Customer = self
            .db
            .read(&Customer::key(store, id))?
            .ok_or_else(|| Error::invalid("to", format!("no customer `{id}` in this store")))?;
        let (address, what) = match channel {
            Channel::Email => (customer.email, "an email address"),
            Channel::Sms | Channel::Whatsapp => (customer.phone, "a phone number"),
            _ => (Some(customer.id.to_string()), ""),
        };
        address.ok_or_else(|| Error::invalid("to", format!("customer `{id}` has no {what}")))
    }

    /// Shows a banner at the top of the merchant dashboard until it expires or is dismissed.
    /// Counted against the store's daily banners and the installation's banners showing.
    pub fn post_banner(&self, actor: &Actor, input: BannerInput) -> Result<NotificationAccepted> {
        input.validate("banner")?;
        let now = self.now();
        let id = MessageId::generate(now);
        let ttl_hours = input.ttl_hours.unwrap_or(DEFAULT_TTL_HOURS);
        let banner = Banner {
            id: id.clone(),
            plugin: actor.plugin.clone(),
            installation_id: actor.installation.clone(),
            tone: input.tone,
            title: input.title,
            body: input.body,
            ctas: input.ctas,
            ttl_hours,
            created_at: now,
            expires_at: now
                .saturating_add(SignedDuration::from_hours(i64::from(ttl_hours)))
                .unwrap_or(Timestamp::MAX),
            dismissed_at: None,
        };
        let message = self.record(actor, &id, Channel::Banner, MessageStatus::Shown, now);
        let slot = ActiveBanner {
            id: id.clone(),
            expires_at: banner.expires_at,
        };
        self.db.tx(|tx| {
            let quotas = store_in(tx, actor.store_id())?.quotas;
            tx.take_banner_slot(
                actor.store_id(),
                &actor.installation,
                slot.clone(),
                &quotas,
                now,
            )?;
            tx.write(&Message::key(actor.store_id(), &id), &message)?;
            tx.write(&Banner::key(actor.store_id(), &id), &banner)
        })?;
        Ok(accepted(&message, Some(banner), None, None))
    }

    /// Posts a card on the merchant's decision feed: one per plugin per store per 24 hours.
    pub fn post_feed_card(
        &self,
        actor: &Actor,
        input: FeedCardInput,
    ) -> Result<NotificationAccepted> {
        let kind = input.validate("card")?;
        let now = self.now();
        let id = MessageId::generate(now);
        let card = FeedCard {
            id: id.clone(),
            plugin: actor.plugin.clone(),
            installation_id: actor.installation.clone(),
            kind,
            title: input.title,
            body: input.body,
            primary: input.primary,
            created_at: now,
            dismissed_at: None,
        };
        let message = self.record(actor, &id, Channel::Feed, MessageStatus::Shown, now);
        self.db.tx(|tx| {
            store_in(tx, actor.store_id())?;
            tx.take_feed_slot(actor.store_id(), &actor.plugin, now)?;
            tx.write(&Message::key(actor.store_id(), &id), &message)?;
            tx.write(&FeedCard::key(actor.store_id(), &id), &card)
        })?;
        Ok(accepted(&message, None, Some(card), None))
    }

    /// A new message record of `actor`, without recipient or content.
    fn record(
        &self,
        actor: &Actor,
        id: &MessageId,
        channel: Channel,
        status: MessageStatus,
        now: Timestamp,
    ) -> Message {
        Message {
            notification: Notification {
                id: id.clone(),
                channel,
                status,
                to: None,
                template: None,
                attempts: 0,
                last_error: None,
                last_error_category: None,
                created_at: now,
                updated_at: now,
                next_attempt_at: None,
                sent_at: None,
                banner: None,
                card: None,
            },
            store: actor.store.clone(),
            plugin: actor.plugin.clone(),
            installation_id: actor.installation.clone(),
            address: None,
            content: None,
            last_error_detail: None,
        }
    }

    /// `GET /v1/notifications/{id}`: one of the calling installation's notifications.
    pub fn notification(&self, actor: &Actor, id: &MessageId) -> Result<Notification> {
        let store = actor.store_id();
        let message: Message = self
            .db
            .read(&Message::key(store, id))?
            .filter(|m: &Message| m.installation_id == actor.installation)
            .ok_or_else(|| Error::not_found("notification", id))?;
        let banner = match message.notification.channel {
            Channel::Banner => self.db.read(&Banner::key(store, id))?,
            _ => None,
        };
        let card = match message.notification.channel {
            Channel::Feed => self.db.read(&FeedCard::key(store, id))?,
            _ => None,
        };
        Ok(message.view(banner, card))
    }
}

fn accepted(
    message: &Message,
    banner: Option<Banner>,
    card: Option<FeedCard>,
    quota: Option<QuotaState>,
) -> NotificationAccepted {
    NotificationAccepted {
        notification: message.view(banner, card),
        quota,
    }
}
