//! Test events: a synthetic event of one of a subscription's types, sent to that subscription
//! only, through the delivery engine, with example data in the documented shape of its type.

use super::paused_conflict;
use crate::model::delivery::Delivery;
use crate::model::error::{Error, Result};
use crate::model::event::Event;
use crate::model::ids::WebhookId;
use crate::model::scopes::EventType;
use crate::model::store::Installation;
use crate::model::webhook::{TestEventRequest, WebhookStatus};
use crate::service::Service;
use crate::service::auth::Actor;

impl Service {
    /// Sends a synthetic event of one of the subscription's types (default: its first) to this
    /// subscription only, through the delivery engine: signed, retried, logged, marked with
    /// `X-Service-Test: true`. It is not in the store's event log and reaches no other target.
    pub fn send_test_event(
        &self,
        actor: &Actor,
        id: &WebhookId,
        request: &TestEventRequest,
    ) -> Result<Delivery> {
        let sub = self.own_subscription(actor, id)?;
        if sub.status == WebhookStatus::Paused {
            return Err(paused_conflict("sending a test event"));
        }
        let kind = match &request.event_type {
            None => *sub
                .events
                .first()
                .ok_or_else(|| Error::invalid("event_type", "the subscription has no events"))?,
            Some(raw) => {
                let kind: EventType = raw.parse().map_err(|_| {
                    Error::invalid("event_type", format!("`{raw}` is not an event type"))
                })?;
                if !sub.events.contains(&kind) {
                    return Err(Error::invalid(
                        "event_type",
                        format!(
                            "the subscription does not receive `{kind}`; it receives {}",
                            sub.events
                                .iter()
                                .map(|e| format!("`{e}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                kind
            }
        };
        let now = self.now();
        let installation: Installation = self
            .db
            .read(&Installation::key(&sub.store_id, &sub.installation_id))?
            .ok_or_else(|| Error::not_found("webhook", id))?;
        let event = Event::new(
            &actor.store,
            crate::service::events::examples::example_data(kind, &installation, now),
            now,
        );
        let target = sub.target();
        self.db
            .tx(|tx| crate::service::deliveries::queue::enqueue_test(tx, &event, &target, now))
    }
}
