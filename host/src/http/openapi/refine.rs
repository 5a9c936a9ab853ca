//! The constraints the service layer checks that the derived schemas cannot say by themselves,
//! written into the generated document so that a client (or a generator such as schemathesis)
//! can tell a valid request from an invalid one without sending it.
//!
//! Each rule names the limit the service uses (`validate.rs`, `money.rs`, the list limits), so
//! the document and the checks cannot drift apart without a test noticing: the schemathesis run
//! in CI sends schema-valid requests and fails on any that the server refuses.

use serde_json::{Map, Value, json};

use crate::model::money::MAX_AMOUNT;
use crate::model::store::{MAX_ACTIVE_BANNERS, MAX_QUOTA};

/// Every text that must not be blank (`validate::text` with a minimum of 1 trims first).
const NOT_BLANK: &str = "\\S";

/// Applies every refinement to a document (`paths` and `components`).
pub fn refine(doc: &mut Value) {
    empty_query_values_mean_absent(doc);
    let requests = request_schemas(doc);
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    schemas.insert("CurrencyCode".to_owned(), currency_codes());
    for name in &requests {
        if let Some(schema) = schemas.get_mut(name) {
            constrain(name, schema);
        }
    }
    if let Some(customer) = schemas.get_mut("CreateCustomer") {
        // `customers.rs`: a customer needs an email or a phone number.
        customer["anyOf"] = json!([
            {"required": ["email"], "properties": {"email": {"type": "string"}}},
            {"required": ["phone"], "properties": {"phone": {"type": "string"}}},
        ]);
    }
    if let Some(replay) = schemas.get_mut("ReplayRequest") {
        // `webhooks/deliveries.rs`: exactly one of `event_id` and `since`.
        replay["oneOf"] = json!([
            {"required": ["event_id"], "properties": {"event_id": {"type": "string"}, "since": {"type": "null"}}},
            {"required": ["since"], "properties": {"since": {"type": "string"}, "event_id": {"type": "null"}}},
        ]);
        replay["properties"]["since"]["format"] = json!("date-time");
        replay["properties"]["event_id"]["pattern"] = json!("^evt_[0-9a-z_-]+$");
    }
    if let Some(adjust) = schemas.get_mut("AdjustInventory") {
        // `products/inventory.rs`: exactly one of `delta` and `set`.
        adjust["oneOf"] = json!([
            {"required": ["delta"], "properties": {"delta": {"type": "integer"}, "set": {"type": "null"}}},
            {"required": ["set"], "properties": {"set": {"type": "integer"}, "delta": {"type": "null"}}},
        ]);
    }
}

/// Every optional query parameter may be sent empty (`?limit=&cursor=`), which means the same
/// as leaving it out (see `http::extract::Query`).
fn empty_query_values_mean_absent(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for operation in item.values_mut() {
            let Some(parameters) = operation
                .get_mut("parameters")
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for parameter in parameters {
                if parameter["in"] == "query" && parameter["required"] != true {
                    parameter["allowEmptyValue"] = Value::Bool(true);
                }
            }
        }
    }
}

/// The schemas of request bodies and every schema they refer to (responses are left as derived:
/// what they carry was checked when it came in).
fn request_schemas(doc: &Value) -> std::collections::BTreeSet<String> {
    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref")
                    && let Some(name) = r.strip_prefix("#/components/schemas/")
                {
                    out.push(name.to_owned());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut pending = Vec::new();
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        for item in paths.values() {
            for operation in item.as_object().into_iter().flat_map(|i| i.values()) {
                if let Some(body) = operation.get("requestBody") {
                    refs(body, &mut pending);
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = pending.pop() {
        if seen.insert(name.clone())
            && let Some(schema) = doc.pointer(&format!("/components/schemas/{name}"))
        {
            refs(schema, &mut pending);
        }
    }
    seen
}

/// The ISO 4217 codes `validate::currency` accepts.
fn currency_codes() -> Value {
    let mut codes: Vec<&str> = (0..=999u16)
        .filter_map(iso_currency::Currency::from_numeric)
        .map(|c| c.code())
        .collect();
    codes.sort_unstable();
    json!({
        "type": "string",
        "description": "An ISO 4217 currency code, upper case (`EUR`).",
        "enum": codes,
    })
}

/// The constraints of the properties of schema `name`, by property name.
fn constrain(name: &str, schema: &mut Value) {
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (property, value) in properties.iter_mut() {
        unsigned_32(value);
        let rule = rule(name, property);
        if rule.is_empty() {
            continue;
        }
        apply(value, &rule);
    }
}

/// A `u32` field (derived as `int32` from 0) takes every value up to 2³² − 1, not only those of
/// an `int32`.
fn unsigned_32(value: &mut Value) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    if object.get("format") == Some(&json!("int32")) && object.get("minimum") == Some(&json!(0)) {
        object.insert("format".into(), json!("uint32"));
        object.insert("maximum".into(), json!(u32::MAX));
    }
}

/// What the service checks of `property` in a request of schema `name`.
fn rule(name: &str, property: &str) -> Map<String, Value> {
    let at_most = |max: u64| {
        let mut m = Map::new();
        m.insert("maximum".into(), json!(max));
        m
    };
    if name == "Quotas" {
        return match property {
            "email" | "sms" | "whatsapp" | "push" | "banner" => at_most(MAX_QUOTA),
            "banner_active" => at_most(MAX_ACTIVE_BANNERS),
            _ => Map::new(),
        };
    }
    if name == "RateLimits" {
        let mut m = Map::new();
        m.insert("minimum".into(), json!(1));
        return m;
    }
    let text = |min: usize, max: usize| {
        let mut m = Map::new();
        m.insert("maxLength".into(), json!(max));
        if min > 0 {
            m.insert("minLength".into(), json!(min));
            m.insert("pattern".into(), json!(NOT_BLANK));
        }
        m
    };
    let amount = || {
        let mut m = Map::new();
        m.insert("minimum".into(), json!(1));
        m.insert("maximum".into(), json!(MAX_AMOUNT));
        m
    };
    if name == "InvitationBody" && property == "email" {
        // `service::plugins::validate_email`: one `@`, no spaces, a dotted domain.
        let mut m = Map::new();
        m.insert(
            "pattern".into(),
            json!("^[^\\s@]+@[^\\s@.][^\\s@]*\\.[^\\s@]*[^\\s@.]$"),
        );
        return m;
    }
    match property {
        "title" if name.contains("Product") || name.contains("LineItem") => text(1, 255),
        "title" | "vendor" | "first_name" | "last_name" | "reason" | "carrier"
        | "tracking_number" | "province" | "line2" => text(0, 255),
        "line1" | "city" => text(1, 255),
        "postal_code" => text(0, 32),
        "sku" => text(0, 64),
        "alt" => text(0, 512),
        "note" => text(0, 5000),
        "description" if name.contains("Product") => text(0, 65_535),
        "template" => text(1, 64),
        "price" | "unit_price" => amount(),
        "currency" => {
            let mut m = Map::new();
            m.insert("$ref".into(), json!("#/components/schemas/CurrencyCode"));
            m
        }
        "phone" => {
            let mut m = Map::new();
            m.insert("pattern".into(), json!("^\\+[1-9][0-9]{7,14}$"));
            m
        }
        "tags" => {
            let mut m = Map::new();
            m.insert("maxItems".into(), json!(50));
            m.insert(
                "items".into(),
                json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[^,]*[^,\\s][^,]*$"}),
            );
            m
        }
        "port" => {
            let mut m = Map::new();
            m.insert("minimum".into(), json!(1));
            m.insert("maximum".into(), json!(65_535));
            m
        }
        _ => Map::new(),
    }
}

/// Puts `rule` on a property schema. A nullable property (`"type": ["string", "null"]`, or a
/// `oneOf` with `null`) keeps accepting null: the rule applies to its non-null value.
fn apply(value: &mut Value, rule: &Map<String, Value>) {
    if let Some(Value::Array(variants)) = value.get_mut("oneOf") {
        for variant in variants.iter_mut() {
            if variant.get("type") != Some(&json!("null")) {
                apply(variant, rule);
            }
        }
        return;
    }
    let Some(object) = value.as_object_mut() else {
        return;
    };
    if let Some(reference) = rule.get("$ref") {
        let nullable = matches!(object.get("type"), Some(Value::Array(types)) if types.contains(&json!("null")));
        let description = object.get("description").cloned();
        object.clear();
        if nullable {
            object.insert(
                "oneOf".into(),
                json!([{"$ref": reference}, {"type": "null"}]),
            );
        } else {
            object.insert("$ref".into(), reference.clone());
        }
        if let Some(description) = description {
            object.insert("description".into(), description);
        }
        return;
    }
    for (key, constraint) in rule {
        object.insert(key.clone(), constraint.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_query_parameters_may_be_empty_and_texts_get_their_limits() {
        let mut doc = json!({
            "paths": {"/v1/orders": {"get": {"parameters": [
                {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer"}},
                {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
            ]}}, "/v1/products": {"post": {"requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/CreateProduct"}}}}}}},
            "components": {"schemas": {
                "CreateProduct": {"type": "object", "properties": {
                    "title": {"type": "string"},
                    "vendor": {"type": ["string", "null"]},
                    "currency": {"type": ["string", "null"], "description": "Currency"},
                }},
                "Product": {"type": "object", "properties": {"title": {"type": "string"}}},
            }},
        });
        refine(&mut doc);
        let parameters = &doc["paths"]["/v1/orders"]["get"]["parameters"];
        assert_eq!(parameters[0]["allowEmptyValue"], true);
        assert!(parameters[1].get("allowEmptyValue").is_none());
        let product = &doc["components"]["schemas"]["CreateProduct"]["properties"];
        assert_eq!(product["title"]["minLength"], 1);
        assert_eq!(product["title"]["maxLength"], 255);
        assert_eq!(product["vendor"]["maxLength"], 255);
        assert!(product["vendor"].get("minLength").is_none());
        assert_eq!(
            product["currency"]["oneOf"][0]["$ref"],
            "#/components/schemas/CurrencyCode"
        );
        assert_eq!(product["currency"]["description"], "Currency");
        // Responses are not requests: their schemas stay as derived.
        assert!(
            doc["components"]["schemas"]["Product"]["properties"]["title"]
                .get("minLength")
                .is_none()
        );
        let codes = doc["components"]["schemas"]["CurrencyCode"]["enum"]
            .as_array()
            .expect("codes");
        assert!(codes.contains(&json!("EUR")) && codes.contains(&json!("JPY")));
        assert!(!codes.contains(&json!("XYZ")));
    }
}
