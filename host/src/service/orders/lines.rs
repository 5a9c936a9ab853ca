//! Line quantities of fulfilments and refunds: checked before the order is read, resolved
//! against its lines, and what each line has left to ship or refund.

use std::collections::BTreeMap;

use crate::model::error::{Error, Result};
use crate::model::money::Quantity;
use crate::model::order::{LineItem, LineQuantity, Order};

/// Checks the line quantities of a fulfilment or refund before the order is read: at most 250
/// entries (an order has no more lines), each line item named once, each quantity within
/// `1..=MAX_LINE_QUANTITY`. Naming a line twice is refused rather than merged: a merge is a sum of
/// untrusted numbers, and it is what let `i64::MAX` twice wrap to a small number.
pub(super) fn validate_line_quantities(field: &str, lines: &[LineQuantity]) -> Result<()> {
    if lines.len() > 250 {
        return Err(Error::invalid(
            field,
            "at most 250 entries, one per line item of the order",
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(first) = seen.insert(&line.line_item_id, i) {
            return Err(Error::invalid(
                format!("{field}[{i}].line_item_id"),
                format!(
                    "line item `{}` is already in {field}[{first}]; name each line item once",
                    line.line_item_id
                ),
            ));
        }
    }
    for (i, line) in lines.iter().enumerate() {
        Quantity::line(&format!("{field}[{i}].quantity"), line.quantity)?;
    }
    Ok(())
}

/// Resolves checked line quantities against an order: (index into its lines, units).
pub(super) fn resolve_lines(
    order: &Order,
    lines: &[LineQuantity],
    field: &str,
) -> Result<Vec<(usize, Quantity)>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let idx = order.line_index(&line.line_item_id).ok_or_else(|| {
                Error::invalid(
                    format!("{field}[{i}].line_item_id"),
                    format!("order has no line item `{}`", line.line_item_id),
                )
            })?;
            Ok((
                idx,
                Quantity::line(&format!("{field}[{i}].quantity"), line.quantity)?,
            ))
        })
        .collect()
}

/// What is left of `line` after `done` units (shipped or refunded). Only an order damaged
/// before quantities were checked can have done more than it has (409 `quantity_out_of_range`).
pub(super) fn units_left(line: &LineItem, done: i64, what: &str) -> Result<Quantity> {
    let ordered = Quantity::stored("line_items.quantity", line.quantity)?;
    let done = Quantity::stored(what, done)?;
    ordered.checked_sub(done).ok_or_else(|| {
        Error::conflict(
            "quantity_out_of_range",
            format!(
                "line item `{}` has {what} {} above its quantity {}",
                line.id,
                done.units(),
                line.quantity
            ),
        )
    })
}
