//! What a plugin logged during an invocation.

/// One line a plugin logged during an invocation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// `trace`, `debug`, `info`, `warn`, `error`, or `stderr` (what the guest wrote there, such as a
    /// panic message).
    pub level: String,
    /// The text.
    pub message: String,
}

/// The most a [`Recording`] keeps of the records an invocation read, in bytes of JSON; reads
/// beyond it are left out and the recording says so.
pub const MAX_RECORDING_BYTES: usize = 256 * 1024;

/// What one component invocation read from its store: the records (as the plugin got them) and
/// the settings, kept with the attempt so that `commerce-host plugin run --replay` can run a
/// local build on exactly what the real invocation saw.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Recording {
    /// Each record read (orders, products, customers), once, in the order first read.
    pub records: Vec<SeenRecord>,
    /// The settings, when the plugin read them (`settings.get`).
    #[schema(value_type = Option<Object>)]
    pub settings: Option<serde_json::Value>,
    /// Whether reads beyond [`MAX_RECORDING_BYTES`] were left out.
    pub truncated: bool,
    /// Bytes of JSON kept so far.
    #[serde(skip)]
    bytes: usize,
}

/// A record an invocation read.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SeenRecord {
    /// `order`, `product` or `customer`.
    pub kind: RecordKind,
    /// Its id.
    pub id: String,
    /// The record as the plugin got it.
    #[schema(value_type = Object)]
    pub record: serde_json::Value,
}

/// The kinds of record a recording keeps.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// An order.
    Order,
    /// A product.
    Product,
    /// A customer.
    Customer,
}

impl Recording {
    /// Keeps a record read (the first read of each), within [`MAX_RECORDING_BYTES`].
    pub fn saw(&mut self, kind: RecordKind, id: &str, record: &impl serde::Serialize) {
        if self.truncated || self.records.iter().any(|r| r.kind == kind && r.id == id) {
            return;
        }
        let Ok(value) = serde_json::to_value(record) else {
            return;
        };
        let size = value.to_string().len();
        if self.bytes + size > MAX_RECORDING_BYTES {
            self.truncated = true;
            return;
        }
        self.bytes += size;
        self.records.push(SeenRecord {
            kind,
            id: id.to_owned(),
            record: value,
        });
    }

    /// Keeps the settings read.
    pub fn saw_settings(&mut self, settings: &serde_json::Value) {
        self.settings = Some(settings.clone());
    }
}

/// One invocation of a component as kept for a replay (`inv/{attempt}`), removed with its attempt.
/// Its recording is read as a [`Recording`], and written from a reference to one (`&Recording`),
/// not a copy.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InvocationRecord<R = Recording> {
    /// The store.
    pub store_id: crate::model::ids::StoreId,
    /// The installation whose component ran.
    pub installation_id: crate::model::ids::InstallationId,
    /// The event it handled.
    pub event_id: crate::model::ids::EventId,
    /// What it read.
    pub recording: R,
}

/// Key of the invocation kept for the attempt `attempt`.
pub fn invocation_key(attempt: &crate::model::ids::AttemptId) -> String {
    ["inv/", attempt.as_str()].concat()
}
