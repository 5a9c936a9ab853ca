//! Message templates: a key, a wording per channel, and the variables the wording may use.
//!
//! A plugin ships one TOML file per template in its package's `templates/` folder
//! (`templates/order-thanks.toml`: the file name is the key) and publishing uploads them. The
//! wording is MiniJinja (Jinja2) rendered in strict mode: every variable a wording uses must be
//! declared, every declared variable must be given, and nothing else may be. A merchant may
//! reword a template per store, never add a variable or a channel. The language is cut down and
//! every render bounded (see [`super::render`]); a wording is tried with sample values at publish
//! and at override.
//!
//! The parts:
//!
//! - [`source`]: what a plugin ships (variables, wording per channel) and loading it from files;
//! - [`checks`]: checking a plugin's templates at publish and a merchant's rewording;
//! - [`rendering`]: rendering one message from a template and its `data`;
//! - [`stored`]: templates and merchant overrides in storage, and the operator's view of them.

pub mod checks;
pub mod rendering;
pub mod source;
pub mod stored;

pub use checks::{MAX_SOURCE, MAX_TEMPLATES, MAX_VARIABLES, validate_templates};
pub use rendering::render;
pub use source::{EmailWording, PushWording, TemplateSource, TextWording, Wording, load_dir};
pub use stored::{Override, TemplateView, template_key};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::message::Channel;

    const ORDER_THANKS: &str = r#"
description = "Sent when an order is paid"
variables = ["first_name", "order_id"]

[email]
subject = "Thanks for order {{ order_id }}"
body = """
Hi {{ first_name }},
{% for i in range(2) %}!{% endfor %}
"""
html = "<p>Hi {{ first_name }}</p>"

[sms]
body = "Order {{ order_id }} confirmed"
"#;

    fn data(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
            .collect()
    }

    #[test]
    fn a_toml_template_file_validates_and_renders_strictly() {
        let template = TemplateSource::from_toml(ORDER_THANKS).expect("toml");
        let templates = BTreeMap::from([("order-thanks".to_owned(), template.clone())]);
        validate_templates(&templates).expect("valid");
        let data = data(&[("first_name", "<Ann>"), ("order_id", "1001")]);
        let email = render(Channel::Email, "order-thanks", &template, None, &data).expect("email");
        assert_eq!(email.subject.as_deref(), Some("Thanks for order 1001"));
        assert!(email.body.contains("Hi <Ann>,"), "{}", email.body);
        assert_eq!(email.html.as_deref(), Some("<p>Hi &lt;Ann&gt;</p>"));
        let err =
            render(Channel::Push, "order-thanks", &template, None, &data).expect_err("no push");
        assert_eq!(err.field(), Some("channel"));
    }

    #[test]
    fn a_stored_wording_outside_the_language_is_refused_before_it_renders() {
        // Stored before wordings were checked for it: refused at send, without rendering.
        let template = TemplateSource {
            sms: Some(TextWording {
                body: "{% for i in range(1000) %}{{ 'x' * 99999999 }}{% endfor %}".into(),
            }),
            ..TemplateSource::default()
        };
        let err = render(Channel::Sms, "bloat", &template, None, &data(&[])).expect_err("refused");
        assert_eq!(err.field(), Some("template"));
    }

    #[test]
    fn undeclared_variables_and_syntax_errors_name_the_wording() {
        let mut template = TemplateSource::from_toml(ORDER_THANKS).expect("toml");
        template.sms = Some(TextWording {
            body: "{{ coupon }}".into(),
        });
        let err = validate_templates(&BTreeMap::from([("t".to_owned(), template.clone())]))
            .expect_err("undeclared");
        assert_eq!(err.field(), Some("templates.t.sms.body"));
        template.sms = Some(TextWording {
            body: "{{ order_id ".into(),
        });
        let err =
            validate_templates(&BTreeMap::from([("t".to_owned(), template)])).expect_err("syntax");
        assert_eq!(err.field(), Some("templates.t.sms.body"));
    }
}
