//! What the process tells its operator: log lines (text or JSON) and, with `--otlp-endpoint`,
//! traces exported over OTLP/HTTP (see [`crate::telemetry`] for the spans and how they link).

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, `span`, `spans`).
    Json,
}

/// The exporter of traces, kept to be shut down (flushed) at exit.
#[derive(Debug)]
pub struct Traces(SdkTracerProvider);

impl Traces {
    /// Sends the spans still batched and stops the exporter.
    pub fn shutdown(self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("commerce-host: exporting the last traces failed: {e}");
        }
    }
}

/// Installs the process's subscriber: log lines on stderr (stdout is for what a command prints),
/// filtered by `COMMERCE_HOST_LOG` (default `info`)
/// in `format`, and, with `otlp_endpoint`, an OpenTelemetry layer exporting every span of the
/// host (at `info` and above, whatever the log filter) to `{otlp_endpoint}/v1/traces`.
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> anyhow::Result<Option<Traces>> {
    let filter =
        EnvFilter::try_from_env("COMMERCE_HOST_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    };
    let (traces, provider) = match otlp_endpoint {
        None => (None, None),
        Some(endpoint) => {
            let url = traces_url(endpoint);
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
                .with_endpoint(url.clone())
                .build()
                .with_context(|| format!("the OTLP exporter for {url}"))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name("commerce-host")
                        .build(),
                )
                .build();
            let tracer = provider.tracer("commerce-host");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(EnvFilter::new("commerce_host=info"));
            (Some(layer), Some(Traces(provider)))
        }
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(provider)
}

/// The URL spans are posted to: `endpoint` itself when it already names `/v1/traces`, else
/// `/v1/traces` under it (as the OpenTelemetry exporters read `OTEL_EXPORTER_OTLP_ENDPOINT`).
fn traces_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim().trim_end_matches('/');
    if endpoint.ends_with("/v1/traces") {
        endpoint.to_owned()
    } else {
        format!("{endpoint}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn spans_go_to_v1_traces_under_the_endpoint() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector/otlp/v1/traces"),
            "http://collector/otlp/v1/traces"
        );
    }
}
