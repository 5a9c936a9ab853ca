//! Trace context: what ties a request to the events it caused and to their deliveries.
//!
//! Spans are ordinary `tracing` spans (`request`, `event`, `fanout`, `delivery.attempt`,
//! `component.invoke`); the command line installs an OpenTelemetry layer that exports them over
//! OTLP when `--otlp-endpoint` is set. An event outlives the request that caused it (it is
//! delivered later, by the engine, maybe after a restart), so the span that emitted it is written
//! down with it as a W3C `traceparent` ([`current_traceparent`]) and the delivery's spans take it
//! as their parent ([`set_parent`]): one trace runs from the request to every attempt.
//!
//! Without the OpenTelemetry layer no span has a trace context, nothing is written down and
//! nothing is parented: the cost is one lookup per event.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The length of a W3C `traceparent` (`00-{32 hex}-{16 hex}-{2 hex}`).
pub const TRACEPARENT_LEN: usize = 55;

/// The W3C `traceparent` of the current span, when traces are exported (the span has a valid
/// trace context); `None` otherwise.
pub fn current_traceparent() -> Option<String> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Makes `span` a child of the span a `traceparent` names (from a stored event, or a client's
/// `traceparent` header). A malformed value is ignored: the span starts a trace of its own.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if traceparent.len() != TRACEPARENT_LEN {
        return;
    }
    let carrier =
        std::collections::HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        // Only fails when the span is disabled (no layer wants it): then there is nothing to link.
        let _ = span.set_parent(cx);
    }
}

/// Names `span` in exported traces with a name known only once it has run (a request's route).
/// `name` is only called when traces are exported.
pub fn rename(span: &tracing::Span, name: impl FnOnce() -> String) {
    let cx = span.context();
    let otel = cx.span();
    if otel.span_context().is_valid() {
        otel.update_name(name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn without_an_exporter_nothing_is_written_down() {
        let _span = tracing::info_span!("request").entered();
        assert_eq!(current_traceparent(), None);
    }

    #[test]
    fn a_span_parented_from_a_traceparent_carries_its_trace_and_hands_it_on() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "test");
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::with_default(subscriber, || {
            let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
            let span = tracing::info_span!("delivery.attempt");
            set_parent(&span, parent);
            let child = span.in_scope(|| current_traceparent().expect("a trace context"));
            assert_eq!(child.len(), TRACEPARENT_LEN);
            assert!(child.starts_with("00-0af7651916cd43dd8448eb211c80319c-"));
            assert_ne!(child, parent, "the span has an id of its own");

            let fresh = tracing::info_span!("request");
            set_parent(&fresh, "00-not-a-trace");
            let _entered = fresh.enter();
            let own = current_traceparent().expect("a trace context");
            assert!(!own.contains("0af7651916cd43dd8448eb211c80319c"));
        });
    }
}
