//! The merchant's connected senders, one per message channel and store: SMTP for email, an HTTP
//! endpoint for SMS, WhatsApp and push. The operator sets them; secrets are stored, never shown.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::error::{Error, Result};
use crate::model::ids::StoreId;
use crate::model::message::Channel;
use crate::service::Service;
use crate::service::validate;

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain SMTP (a relay on a trusted network).
    None,
    /// STARTTLS required (usually port 587).
    Starttls,
    /// TLS from the first byte (usually port 465).
    Tls,
}

/// An SMTP server, as the operator sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    /// Host name or address.
    #[schema(example = "smtp.acme.example")]
    pub host: String,
    /// Port (1 to 65535).
    #[schema(example = 587)]
    pub port: u16,
    /// User name for AUTH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password for AUTH (needs `username`); stored, never shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The `From` of every email: `shop@acme.example` or `Acme <shop@acme.example>`.
    #[schema(example = "Acme <shop@acme.example>")]
    pub from: String,
    /// `none`, `starttls` or `tls`.
    pub tls: SmtpTls,
}

/// Body of `PUT /admin/v1/stores/{store_id}/senders/{channel}`: `smtp` for email, `url` (and an
/// optional `auth_token`) for sms, whatsapp and push.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SenderSettings {
    /// Email: the SMTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smtp: Option<SmtpSettings>,
    /// SMS, WhatsApp, push: the provider endpoint that receives `POST {id, channel, to, body,
    /// title?, store}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "https://sms.provider.example/v1/messages")]
    pub url: Option<String>,
    /// Sent as `Authorization: Bearer <auth_token>`; stored, never shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token: Option<String>,
}

/// A connected sender as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The channel it sends.
    pub channel: Channel,
    /// Its settings, secrets included.
    pub settings: SenderSettings,
    /// When it was set.
    #[serde(with = "crate::model::clock::api_ts")]
    pub updated_at: Timestamp,
}

/// An SMTP server as shown: no password.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SmtpView {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// User name.
    pub username: Option<String>,
    /// Whether a password is set.
    pub password_set: bool,
    /// The `From` address.
    pub from: String,
    /// Transport security.
    pub tls: SmtpTls,
}

/// A connected sender as the operator API shows it: secrets are never echoed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SenderView {
    /// The channel.
    pub channel: Channel,
    /// Email: the SMTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smtp: Option<SmtpView>,
    /// The provider endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether an `auth_token` is set.
    pub auth_token_set: bool,
    /// When it was set.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
}

impl Sender {
    /// Key of a store's sender for a channel.
    pub fn key(store: &StoreId, channel: Channel) -> String {
        format!("sender/{store}/{channel}")
    }

    /// The sender without its secrets.
    pub fn view(&self) -> SenderView {
        SenderView {
            channel: self.channel,
            smtp: self.settings.smtp.as_ref().map(|s| SmtpView {
                host: s.host.clone(),
                port: s.port,
                username: s.username.clone(),
                password_set: s.password.is_some(),
                from: s.from.clone(),
                tls: s.tls,
            }),
            url: self.settings.url.clone(),
            auth_token_set: self.settings.auth_token.is_some(),
            updated_at: self.updated_at,
        }
    }
}

/// The message channel a sender path names; banner and feed have none.
pub fn sender_channel(name: &str) -> Result<Channel> {
    Channel::parse(name)
        .filter(|c| c.is_message())
        .ok_or_else(|| Error::not_found("sender channel", name))
}

impl SenderSettings {
    /// Checks the settings fit the channel.
    pub fn validate(&self, channel: Channel) -> Result<()> {
        let misplaced = |field: &str| {
            Error::invalid(
                field,
                format!("`{field}` does not apply to a {channel} sender"),
            )
        };
        if channel == Channel::Email {
            if self.url.is_some() {
                return Err(misplaced("url"));
            }
            if self.auth_token.is_some() {
                return Err(misplaced("auth_token"));
            }
            let smtp = self
                .smtp
                .as_ref()
                .ok_or_else(|| Error::invalid("smtp", "an email sender needs `smtp`"))?;
            let host_ok = !smtp.host.is_empty()
                && smtp.host.len() <= 253
                && !smtp.host.chars().any(|c| c.is_whitespace() || c == '/');
            if !host_ok {
                return Err(Error::invalid(
                    "smtp.host",
                    "must be a host name or address",
                ));
            }
            if smtp.port == 0 {
                return Err(Error::invalid("smtp.port", "must be from 1 to 65535"));
            }
            validate::opt_text("smtp.username", smtp.username.as_deref(), 255)?;
            validate::opt_text("smtp.password", smtp.password.as_deref(), 255)?;
            if smtp.password.is_some() && smtp.username.is_none() {
                return Err(Error::invalid("smtp.password", "needs `username`"));
            }
            smtp.from
                .parse::<lettre::message::Mailbox>()
                .map_err(|e| Error::invalid("smtp.from", format!("not a mailbox: {e}")))?;
        } else {
            if self.smtp.is_some() {
                return Err(misplaced("smtp"));
            }
            let url = self
                .url
                .as_deref()
                .ok_or_else(|| Error::invalid("url", format!("a {channel} sender needs `url`")))?;
            validate::http_url("url", url)?;
            validate::opt_text("auth_token", self.auth_token.as_deref(), 1024)?;
        }
        Ok(())
    }
}

impl Service {
    /// Connects (or replaces) a store's sender for a message channel.
    pub fn set_sender(
        &self,
        store: &StoreId,
        channel: Channel,
        settings: SenderSettings,
    ) -> Result<SenderView> {
        settings.validate(channel)?;
        self.store(store)?;
        let sender = Sender {
            channel,
            settings,
            updated_at: self.now(),
        };
        self.db
            .tx(|tx| tx.write(&Sender::key(store, channel), &sender))?;
        Ok(sender.view())
    }

    /// A store's connected senders.
    pub fn senders(&self, store: &StoreId) -> Result<Vec<SenderView>> {
        self.store(store)?;
        Ok(self
            .db
            .list::<Sender>(&format!("sender/{store}/"), None, false, 16)?
            .into_iter()
            .map(|(_, s)| s.view())
            .collect())
    }

    /// Disconnects a sender: later messages of the channel land in the outbox.
    pub fn delete_sender(&self, store: &StoreId, channel: Channel) -> Result<()> {
        self.store(store)?;
        self.db.tx(|tx| {
            let key = Sender::key(store, channel);
            if tx.read::<Sender>(&key)?.is_none() {
                return Err(Error::not_found("sender", channel));
            }
            tx.remove(&key)
        })
    }
}
