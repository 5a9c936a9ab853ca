//! Outbound messages, banners and feed cards, sent through the merchant's own senders and counted
//! against the merchant's quotas exactly as `POST /v1/notifications`.
//!
//! Banners are built so that the spec's limit holds before any call: a banner takes at most two
//! buttons, and a third does not compile.
//!
//! ```compile_fail
//! use commerce_guest_sdk::notify::{Banner, Tone};
//! let banner = Banner::new(Tone::Warn, "Low stock", "Mugs are running out")
//!     .link("Restock", "/products/prod_1")
//!     .dismiss("Later")
//!     .dismiss("Never"); // a third button: no such method
//! ```

use serde::Serialize;

use crate::__bindings::commerce::plugin::notifications as wit;
use crate::Result;

pub use wit::{Channel, Receipt, Tone};

/// Sends a templated email. `to` is `customer:<id>` or an email address; `data` holds the
/// template's variables.
pub fn email(to: &str, template: &str, data: &impl Serialize) -> Result<Receipt> {
    send(Channel::Email, to, template, data)
}

/// Sends a templated SMS to `customer:<id>` or a phone number (E.164).
pub fn sms(to: &str, template: &str, data: &impl Serialize) -> Result<Receipt> {
    send(Channel::Sms, to, template, data)
}

/// Sends a templated WhatsApp message to `customer:<id>` or a phone number (E.164).
pub fn whatsapp(to: &str, template: &str, data: &impl Serialize) -> Result<Receipt> {
    send(Channel::Whatsapp, to, template, data)
}

/// Sends a templated push notification to `customer:<id>`.
pub fn push(to: &str, template: &str, data: &impl Serialize) -> Result<Receipt> {
    send(Channel::Push, to, template, data)
}

/// Sends a templated message on `channel`.
pub fn send(channel: Channel, to: &str, template: &str, data: &impl Serialize) -> Result<Receipt> {
    let message = wit::Message {
        channel,
        to: to.to_owned(),
        template: template.to_owned(),
        data: serde_json::to_string(data)?,
    };
    Ok(wit::send(&message)?)
}

/// No button yet.
#[derive(Debug)]
pub struct NoButton;
/// One button.
#[derive(Debug)]
pub struct OneButton;
/// Two buttons: the most a banner has.
#[derive(Debug)]
pub struct TwoButtons;

/// A banner at the top of the merchant dashboard, for something the merchant must act on (not for
/// upsell). Shown for 24 hours unless [`Banner::ttl_hours`] says otherwise, or until dismissed.
#[derive(Debug)]
pub struct Banner<B = NoButton> {
    banner: wit::Banner,
    buttons: std::marker::PhantomData<B>,
}

impl Banner<NoButton> {
    /// A banner with a tone, a title and a body.
    pub fn new(tone: Tone, title: &str, body: &str) -> Self {
        Self {
            banner: wit::Banner {
                tone,
                title: title.to_owned(),
                body: body.to_owned(),
                ctas: Vec::new(),
                ttl_hours: 24,
            },
            buttons: std::marker::PhantomData,
        }
    }
}

impl<B> Banner<B> {
    /// How long the banner shows, in hours.
    pub fn ttl_hours(mut self, hours: u32) -> Self {
        self.banner.ttl_hours = hours;
        self
    }

    fn with<C>(mut self, label: &str, action: wit::CtaAction) -> Banner<C> {
        self.banner.ctas.push(wit::Cta {
            label: label.to_owned(),
            action,
        });
        Banner {
            banner: self.banner,
            buttons: std::marker::PhantomData,
        }
    }

    /// Shows the banner.
    pub fn show(self) -> Result<Receipt> {
        Ok(wit::show_banner(&self.banner)?)
    }
}

/// Banners that can take one more button.
pub trait AddButton: Sized {
    /// The banner with one more button.
    type Next;
    /// Adds a button that opens a dashboard `path` (starting with `/`).
    fn link(self, label: &str, path: &str) -> Self::Next;
    /// Adds a button that dismisses the banner.
    fn dismiss(self, label: &str) -> Self::Next;
}

macro_rules! add_button {
    ($from:ty => $to:ty) => {
        impl AddButton for Banner<$from> {
            type Next = Banner<$to>;
            fn link(self, label: &str, path: &str) -> Banner<$to> {
                self.with(label, wit::CtaAction::Href(path.to_owned()))
            }
            fn dismiss(self, label: &str) -> Banner<$to> {
                self.with(label, wit::CtaAction::Dismiss)
            }
        }
    };
}
add_button!(NoButton => OneButton);
add_button!(OneButton => TwoButtons);

/// A card on the merchant's decision feed, attributed to the plugin: at most one per plugin per
/// merchant per 24 hours.
#[derive(Debug, Clone)]
pub struct FeedCard {
    card: wit::FeedCard,
}

impl FeedCard {
    /// A `suggestion` card with a title, a body and its main action (a dashboard path).
    pub fn suggestion(title: &str, body: &str, label: &str, path: &str) -> Self {
        Self {
            card: wit::FeedCard {
                kind: wit::CardKind::Suggestion,
                title: title.to_owned(),
                body: body.to_owned(),
                primary: wit::Link {
                    label: label.to_owned(),
                    href: path.to_owned(),
                },
            },
        }
    }

    /// Posts the card.
    pub fn post(self) -> Result<Receipt> {
        Ok(wit::post_feed_card(&self.card)?)
    }
}
