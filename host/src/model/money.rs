//! Money and quantities: bounded, never negative, with checked arithmetic.
//!
//! Records keep plain `i64`s (minor units, units) so that their JSON and WIT shapes do not change;
//! every sum, difference or product of them goes through [`Money`] or [`Quantity`], whose
//! operations refuse to leave the documented range instead of wrapping around. With the bounds
//! below no product of two bounded values can overflow an `i64` (10¹² × 10⁶ < 9.2 × 10¹⁸), so the
//! checks are what define the errors, not the machine word.

use crate::model::error::{Error, Result};

/// The largest amount of money anywhere (a price, a line total, an order total, a refund, a
/// payment): 10¹² minor units (ten billion euros in cents).
pub const MAX_AMOUNT: i64 = 1_000_000_000_000;

/// The most units one order line may have.
pub const MAX_LINE_QUANTITY: i64 = 10_000;

/// The most units of stock a variant may hold (and the ceiling of every quantity).
pub const MAX_STOCK: i64 = 1_000_000_000;

/// At most this many refunds per order: each one is kept on the order.
pub const MAX_REFUNDS: usize = 100;

/// At most this many fulfilments per order: each one is kept on the order.
pub const MAX_FULFILLMENTS: usize = 100;

/// An amount of money in minor units: `0..=MAX_AMOUNT`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Money(i64);

impl Money {
    /// Nothing.
    pub const ZERO: Money = Money(0);

    /// An amount in range, or `None`.
    pub fn new(minor: i64) -> Option<Money> {
        (0..=MAX_AMOUNT).contains(&minor).then_some(Money(minor))
    }

    /// A positive amount from a request: 400 on `field` when it is not `1..=MAX_AMOUNT`.
    pub fn positive(field: &str, minor: i64) -> Result<Money> {
        match Money::new(minor) {
            Some(m) if minor > 0 => Ok(m),
            _ => Err(Error::invalid(
                field,
                format!(
                    "must be a positive amount in minor units, at most {MAX_AMOUNT}; got {minor}"
                ),
            )),
        }
    }

    /// An amount read from a stored record. Only a record written before the bounds existed can
    /// be out of range: refuse to compute with it (409 `amount_out_of_range`) rather than guess.
    pub fn stored(what: &str, minor: i64) -> Result<Money> {
        Money::new(minor).ok_or_else(|| {
            Error::conflict(
                "amount_out_of_range",
                format!("the record's {what} ({minor}) is outside 0 to {MAX_AMOUNT} minor units"),
            )
        })
    }

    /// The amount in minor units.
    pub fn minor(self) -> i64 {
        self.0
    }

    /// `self + rhs`, or `None` above [`MAX_AMOUNT`].
    pub fn checked_add(self, rhs: Money) -> Option<Money> {
        self.0.checked_add(rhs.0).and_then(Money::new)
    }

    /// `self - rhs`, or `None` below zero.
    pub fn checked_sub(self, rhs: Money) -> Option<Money> {
        self.0.checked_sub(rhs.0).and_then(Money::new)
    }

    /// `self × units`, or `None` above [`MAX_AMOUNT`].
    pub fn checked_mul(self, units: Quantity) -> Option<Money> {
        self.0.checked_mul(units.0).and_then(Money::new)
    }

    /// The sum of `amounts`, or `None` above [`MAX_AMOUNT`].
    pub fn sum(amounts: impl IntoIterator<Item = Money>) -> Option<Money> {
        amounts
            .into_iter()
            .try_fold(Money::ZERO, |acc, m| acc.checked_add(m))
    }
}

/// A number of units: `0..=MAX_STOCK`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i64);

/// Why a stock change was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRange {
    /// It would go below zero.
    BelowZero,
    /// It would go above [`MAX_STOCK`].
    AboveMax,
}

impl Quantity {
    /// None.
    pub const ZERO: Quantity = Quantity(0);

    /// A quantity in range, or `None`.
    pub fn new(units: i64) -> Option<Quantity> {
        (0..=MAX_STOCK).contains(&units).then_some(Quantity(units))
    }

    /// The units of an order line from a request: 400 on `field` unless `1..=MAX_LINE_QUANTITY`.
    pub fn line(field: &str, units: i64) -> Result<Quantity> {
        if (1..=MAX_LINE_QUANTITY).contains(&units) {
            Ok(Quantity(units))
        } else {
            Err(Error::invalid(
                field,
                format!("must be from 1 to {MAX_LINE_QUANTITY}; got {units}"),
            ))
        }
    }

    /// A stock level from a request: 400 on `field` unless `0..=MAX_STOCK`.
    pub fn stock(field: &str, units: i64) -> Result<Quantity> {
        Quantity::new(units).ok_or_else(|| {
            Error::invalid(field, format!("must be from 0 to {MAX_STOCK}; got {units}"))
        })
    }

    /// A quantity read from a stored record (409 `quantity_out_of_range`, see [`Money::stored`]).
    pub fn stored(what: &str, units: i64) -> Result<Quantity> {
        Quantity::new(units).ok_or_else(|| {
            Error::conflict(
                "quantity_out_of_range",
                format!("the record's {what} ({units}) is outside 0 to {MAX_STOCK} units"),
            )
        })
    }

    /// The number of units.
    pub fn units(self) -> i64 {
        self.0
    }

    /// `self + rhs`, or `None` above [`MAX_STOCK`].
    pub fn checked_add(self, rhs: Quantity) -> Option<Quantity> {
        self.0.checked_add(rhs.0).and_then(Quantity::new)
    }

    /// `self - rhs`, or `None` below zero.
    pub fn checked_sub(self, rhs: Quantity) -> Option<Quantity> {
        self.0.checked_sub(rhs.0).and_then(Quantity::new)
    }

    /// `self + delta` for a signed change (a stock adjustment), kept within `0..=MAX_STOCK`.
    pub fn shifted(self, delta: i64) -> Result<Quantity, OutOfRange> {
        match self.0.checked_add(delta) {
            Some(v) if v < 0 => Err(OutOfRange::BelowZero),
            Some(v) if v > MAX_STOCK => Err(OutOfRange::AboveMax),
            Some(v) => Ok(Quantity(v)),
            None if delta < 0 => Err(OutOfRange::BelowZero),
            None => Err(OutOfRange::AboveMax),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_never_leaves_its_range() {
        let max = Money::new(MAX_AMOUNT).expect("max");
        assert_eq!(max.checked_add(Money::new(1).expect("1")), None);
        assert_eq!(Money::ZERO.checked_sub(Money::new(1).expect("1")), None);
        assert_eq!(max.checked_mul(Quantity::new(2).expect("2")), None);
        assert_eq!(
            Money::new(i64::MAX).and_then(|m| m.checked_mul(Quantity::new(MAX_STOCK)?)),
            None
        );
        assert_eq!(Money::new(-1), None);
        assert_eq!(
            Money::sum([Money::new(3).expect("3"), Money::new(4).expect("4")]),
            Money::new(7)
        );
        assert!(Money::positive("amount", 0).is_err());
        assert!(Money::positive("amount", MAX_AMOUNT + 1).is_err());
    }

    #[test]
    fn quantities_never_wrap() {
        let q = Quantity::new(5).expect("5");
        assert_eq!(q.shifted(-6), Err(OutOfRange::BelowZero));
        assert_eq!(q.shifted(i64::MIN), Err(OutOfRange::BelowZero));
        assert_eq!(q.shifted(i64::MAX), Err(OutOfRange::AboveMax));
        assert_eq!(
            q.shifted(MAX_STOCK - 5),
            Quantity::new(MAX_STOCK).ok_or(OutOfRange::AboveMax)
        );
        assert_eq!(q.checked_sub(Quantity::new(6).expect("6")), None);
        assert!(Quantity::line("q", i64::MAX).is_err());
        assert!(Quantity::line("q", 0).is_err());
    }
}
