//! Rendering a wording within fixed limits, whoever wrote it.
//!
//! A wording is MiniJinja written by a plugin author or a merchant and rendered by the host with a
//! request's `data`, so it must not be able to take the host's memory or CPU. MiniJinja's fuel
//! counts steps, not bytes: `{{ 'x' * 99999999 }}` is one step that allocates 100 MB, and
//! `{% set s = s ~ s %}` doubles a string per step. Four limits hold instead:
//!
//! - **A cut-down language**, checked on the syntax tree at publish, at override and again before
//!   every render: text, `{{ … }}`, `{% if %}` and `{% for %}` (not recursive); variables,
//!   literals, attribute and item access, slices, comparisons, tests, `and`/`or`/`not`,
//!   `a if c else b`, arithmetic without `*`, `range(…)`, and the filters of [`FILTERS`]. No
//!   `*` (string and list repetition), no `set`, `with`, macros, `call`, `filter` blocks,
//!   includes, imports or other functions, so no value can grow from one step to the next. Within
//!   one expression, at most [`MAX_CONCATS`] `~`/`+` and one `join`: every value a render builds
//!   is a small multiple of the wording and `data` (a few MB at most).
//! - **A capped writer**: the output goes to a writer that fails once the channel's limit is
//!   passed, so a loop never builds a text longer than the message may be.
//! - **Fuel** ([`FUEL`] steps) bounds the time of a render.
//! - **A gate**: at most one render per core runs at once ([`Gate`]), on blocking threads.

use std::io;
use std::sync::{Condvar, LazyLock, Mutex, PoisonError};

use minijinja::machinery::ast::{self, BinOpKind, CallArg, Expr, Stmt};
use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value};

/// Rendering budget of one wording (MiniJinja fuel): stops runaway loops.
pub const FUEL: u64 = 100_000;
/// At most this many `~` and `+` in one expression.
pub const MAX_CONCATS: usize = 8;
/// At most this many filters in one expression.
pub const MAX_FILTERS: usize = 8;
/// The longest `join` separator.
pub const MAX_JOINER: usize = 16;

/// Filters a wording may use: each returns a value at most a few times the size of its input
/// (`join` is checked on its own). `replace`, `center`, `indent`, `format`, `wordwrap`, `string`,
/// `tojson`, `pprint`, `urlencode`, `batch`, `map`… are not here: they can multiply their input,
/// or are not needed to word a message. `safe` is not here either: values in an HTML part are
/// always escaped.
pub const FILTERS: &[&str] = &[
    "abs",
    "capitalize",
    "count",
    "d",
    "default",
    "first",
    "float",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lower",
    "max",
    "min",
    "reverse",
    "round",
    "title",
    "trim",
    "upper",
];

/// Why a wording did not render.
#[derive(Debug)]
pub enum RenderError {
    /// It uses a construct outside the cut-down language (the message says which, and where).
    Forbidden(String),
    /// The output passed the channel's limit.
    TooLong,
    /// It needed more than [`FUEL`] steps.
    OutOfFuel,
    /// Any other failure: a syntax error, a missing variable, a type error with this `data`.
    Failed(minijinja::Error),
}

/// The environment every wording renders in: strict about undefined values, with fuel.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env
}

/// Renders `source` (named `name`: a `.html` name escapes values) with `ctx`, stopping as soon
/// as the output passes `max_chars` characters. Callers hold a [`Gate`] permit.
pub fn render(
    env: &Environment<'static>,
    name: &str,
    source: &str,
    ctx: Value,
    max_chars: usize,
) -> Result<String, RenderError> {
    // Checked before compiling: MiniJinja folds constant expressions as it compiles.
    check_language(source).map_err(RenderError::Forbidden)?;
    let template = env
        .template_from_named_str(name, source)
        .map_err(RenderError::Failed)?;
    let mut out = Capped {
        bytes: Vec::new(),
        chars: 0,
        max_chars,
        over: false,
    };
    let rendered = template.render_captured_to(ctx, &mut out).map(drop);
    if out.over {
        return Err(RenderError::TooLong);
    }
    match rendered {
        Ok(()) => String::from_utf8(out.bytes).map_err(|_| {
            RenderError::Failed(minijinja::Error::new(
                ErrorKind::WriteFailure,
                "the output is not UTF-8",
            ))
        }),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(RenderError::OutOfFuel),
        Err(e) => Err(RenderError::Failed(e)),
    }
}

/// A writer that keeps what it is given until it has seen `max_chars` characters, then fails.
struct Capped {
    bytes: Vec<u8>,
    chars: usize,
    max_chars: usize,
    over: bool,
}

impl io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // MiniJinja writes whole `str`s: a character is a byte that does not continue one.
        let chars = buf.iter().filter(|b| (**b & 0xC0) != 0x80).count();
        if self.chars + chars > self.max_chars {
            self.over = true;
            return Err(io::Error::other("the rendered text is too long"));
        }
        self.chars += chars;
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// At most one render per core at once: a burst of requests queues here instead of taking every
/// core (each render is bounded, so the wait is too).
pub struct Gate {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A place in the [`Gate`], given back when dropped.
pub struct Permit<'a>(&'a Gate);

impl Gate {
    /// A gate with `permits` places.
    pub fn new(permits: usize) -> Self {
        Self {
            free: Mutex::new(permits.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Waits for a place. Call it on a blocking thread, never on an async worker.
    pub fn enter(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

/// The gate every wording render of this process goes through.
pub static RENDERS: LazyLock<Gate> = LazyLock::new(|| {
    Gate::new(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get))
});

/// Checks that `source` stays within the cut-down language; the error names the construct and
/// its line. A source that does not parse passes here: compiling it reports the syntax error.
pub fn check_language(source: &str) -> Result<(), String> {
    let Ok(tree) = minijinja::machinery::parse(source, "wording", Default::default()) else {
        return Ok(());
    };
    stmt(&tree)
}

fn at(span: minijinja::machinery::Span, what: &str) -> String {
    format!("line {}: {what}", span.start_line)
}

fn stmts(body: &[Stmt<'_>]) -> Result<(), String> {
    body.iter().try_for_each(stmt)
}

fn stmt(s: &Stmt<'_>) -> Result<(), String> {
    let refuse = |span, what: &str| {
        Err(at(
            span,
            &format!(
                "{what} is not allowed in a wording (only text, `{{{{ … }}}}`, `{{% if %}}` and `{{% for %}}`)"
            ),
        ))
    };
    match s {
        Stmt::Template(t) => stmts(&t.children),
        Stmt::EmitRaw(_) => Ok(()),
        Stmt::EmitExpr(e) => top_expr(&e.expr),
        Stmt::IfCond(c) => {
            top_expr(&c.expr)?;
            stmts(&c.true_body)?;
            stmts(&c.false_body)
        }
        Stmt::ForLoop(f) => {
            if f.recursive {
                return refuse(f.span(), "a recursive `for`");
            }
            loop_target(&f.target)?;
            top_expr(&f.iter)?;
            if let Some(filter) = &f.filter_expr {
                top_expr(filter)?;
            }
            stmts(&f.body)?;
            stmts(&f.else_body)
        }
        Stmt::Set(x) => refuse(x.span(), "`{% set %}`"),
        Stmt::SetBlock(x) => refuse(x.span(), "`{% set %}`"),
        Stmt::WithBlock(x) => refuse(x.span(), "`{% with %}`"),
        Stmt::AutoEscape(x) => refuse(x.span(), "`{% autoescape %}`"),
        Stmt::FilterBlock(x) => refuse(x.span(), "`{% filter %}`"),
        Stmt::Macro(x) => refuse(x.span(), "`{% macro %}`"),
        Stmt::CallBlock(x) => refuse(x.span(), "`{% call %}`"),
        Stmt::Block(x) => refuse(x.span(), "`{% block %}`"),
        Stmt::Extends(x) => refuse(x.span(), "`{% extends %}`"),
        Stmt::Include(x) => refuse(x.span(), "`{% include %}`"),
        Stmt::Import(x) => refuse(x.span(), "`{% import %}`"),
        Stmt::FromImport(x) => refuse(x.span(), "`{% from … import %}`"),
        Stmt::Do(x) => refuse(x.span(), "`{% do %}`"),
        #[allow(unreachable_patterns)] // statements of MiniJinja features this host does not use
        _ => Err("a statement that is not allowed in a wording".to_owned()),
    }
}

/// A `for` target is names (`item`, `k, v`, `(a, b), c`): nothing is evaluated.
fn loop_target(target: &Expr<'_>) -> Result<(), String> {
    match target {
        Expr::Var(_) => Ok(()),
        Expr::List(l) => l.items.iter().try_for_each(loop_target),
        other => Err(at(other.span(), "a `for` takes one or more names")),
    }
}

/// What one expression has used of its budget.
#[derive(Default)]
struct Budget {
    concats: usize,
    filters: usize,
    joins: usize,
}

fn top_expr(e: &Expr<'_>) -> Result<(), String> {
    expr(e, &mut Budget::default())
}

fn expr(e: &Expr<'_>, budget: &mut Budget) -> Result<(), String> {
    match e {
        Expr::Var(_) | Expr::Const(_) => Ok(()),
        Expr::GetAttr(g) => expr(&g.expr, budget),
        Expr::GetItem(g) => {
            expr(&g.expr, budget)?;
            expr(&g.subscript_expr, budget)
        }
        Expr::Slice(s) => {
            expr(&s.expr, budget)?;
            for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                expr(part, budget)?;
            }
            Ok(())
        }
        Expr::UnaryOp(u) => expr(&u.expr, budget),
        Expr::BinOp(b) => {
            match b.op {
                BinOpKind::Mul => {
                    return Err(at(
                        b.span(),
                        "`*` is not allowed in a wording (it repeats text)",
                    ));
                }
                BinOpKind::Concat | BinOpKind::Add => {
                    budget.concats += 1;
                    if budget.concats > MAX_CONCATS {
                        return Err(at(
                            b.span(),
                            &format!("at most {MAX_CONCATS} `~` or `+` in one expression"),
                        ));
                    }
                }
                _ => {}
            }
            expr(&b.left, budget)?;
            expr(&b.right, budget)
        }
        Expr::Compare(c) => {
            expr(&c.expr, budget)?;
            c.ops.iter().try_for_each(|op| expr(&op.expr, budget))
        }
        Expr::IfExpr(i) => {
            expr(&i.test_expr, budget)?;
            expr(&i.true_expr, budget)?;
            i.false_expr.iter().try_for_each(|f| expr(f, budget))
        }
        Expr::Test(t) => {
            expr(&t.expr, budget)?;
            args(&t.args, budget)
        }
        Expr::Filter(f) => filter(f, e.span(), budget),
        Expr::Call(c) => match c.identify_call() {
            ast::CallType::Function("range") => args(&c.args, budget),
            _ => Err(at(
                c.span(),
                "calls are not allowed in a wording, except `range(…)`",
            )),
        },
        Expr::List(l) => Err(at(l.span(), "list literals are not allowed in a wording")),
        Expr::Tuple(t) => Err(at(t.span(), "tuples are not allowed in a wording")),
        Expr::Map(m) => Err(at(m.span(), "map literals are not allowed in a wording")),
    }
}

fn filter(
    f: &ast::Filter<'_>,
    span: minijinja::machinery::Span,
    budget: &mut Budget,
) -> Result<(), String> {
    if !FILTERS.contains(&f.name) {
        return Err(at(
            span,
            &format!(
                "the filter `{}` is not allowed in a wording; use one of {}",
                f.name,
                FILTERS.join(", ")
            ),
        ));
    }
    budget.filters += 1;
    if budget.filters > MAX_FILTERS {
        return Err(at(
            span,
            &format!("at most {MAX_FILTERS} filters in one expression"),
        ));
    }
    if f.name == "join" {
        budget.joins += 1;
        let joiner_ok = match f.args.as_slice() {
            [] => true,
            [CallArg::Pos(Expr::Const(c))] => c
                .value
                .as_str()
                .is_some_and(|s| s.chars().count() <= MAX_JOINER),
            _ => false,
        };
        if budget.joins > 1 || !joiner_ok {
            return Err(at(
                span,
                &format!(
                    "`join` takes a literal separator of at most {MAX_JOINER} characters, once per expression"
                ),
            ));
        }
    }
    if let Some(inner) = &f.expr {
        expr(inner, budget)?;
    }
    args(&f.args, budget)
}

fn args(args: &[CallArg<'_>], budget: &mut Budget) -> Result<(), String> {
    args.iter().try_for_each(|arg| match arg {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) => expr(e, budget),
        CallArg::PosSplat(e) | CallArg::KwargSplat(e) => Err(at(
            e.span(),
            "`*args` and `**kwargs` are not allowed in a wording",
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(source: &str) -> String {
        check_language(source).expect_err(source)
    }

    #[test]
    fn the_cut_down_language_takes_what_a_message_needs() {
        for ok in [
            "Hi {{ first_name|title }}, order {{ order.id }} ({{ items|length }} items)",
            "{% for item in items if item.qty > 0 %}{{ loop.index }}. {{ item.name }}{% else %}none{% endfor %}",
            "{% for k, v in totals|items %}{{ k }}={{ v|round(2) }}{% endfor %}",
            "{% if vip and total >= 100 %}Thanks!{% elif total is number %}{{ total - 1 }}{% endif %}",
            "{{ name ~ ' ' ~ last }} {{ tags|join(', ') }} {{ coupon|default('none') }}",
            "{% for i in range(3) %}!{% endfor %}{{ code[:4] }}{{ 'a' if x else 'b' }}",
        ] {
            check_language(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn constructs_that_can_grow_a_value_are_refused_with_their_line() {
        assert_eq!(
            refused("ok\n{% for i in range(1000) %}{{ 'x' * 99999999 }}{% endfor %}"),
            "line 2: `*` is not allowed in a wording (it repeats text)"
        );
        for source in [
            "{% set s = 'x' %}",
            "{% set ns = namespace(s='x') %}",
            "{% with s = a ~ a %}{{ s }}{% endwith %}",
            "{% macro m(s) %}{{ m(s ~ s) }}{% endmacro %}",
            "{% filter upper %}x{% endfilter %}",
            "{{ 'x'|center(99999999) }}",
            "{{ a|replace('', a) }}",
            "{{ a|indent(99999999) }}",
            "{{ '%s'|format(a) }}",
            "{{ a|join(a) }}",
            "{{ a|join(', ')|join(', ') }}",
            "{{ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a }}",
            "{{ [a, a, a] }}",
            "{{ lipsum(1000) }}",
            "{{ a.upper() }}",
            "{% include 'x' %}",
            "{% for x in a recursive %}{{ loop(x) }}{% endfor %}",
        ] {
            refused(source);
        }
    }

    #[test]
    fn the_writer_stops_at_the_limit_instead_of_building_the_whole_text() {
        let env = environment();
        let big = "y".repeat(30_000);
        let ctx = Value::from(minijinja::value::Serde(serde_json::json!({ "big": big })));
        let source = "{% for i in range(100000) %}{{ big }}{% endfor %}";
        assert!(matches!(
            render(&env, "t", source, ctx.clone(), 100_000),
            Err(RenderError::TooLong)
        ));
        let fuel =
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        assert!(matches!(
            render(&env, "t", fuel, ctx, 100_000),
            Err(RenderError::OutOfFuel)
        ));
    }

    #[test]
    fn the_gate_lets_a_fixed_number_through() {
        let gate = Gate::new(2);
        let a = gate.enter();
        let _b = gate.enter();
        assert_eq!(*gate.free.lock().expect("lock"), 0);
        drop(a);
        assert_eq!(*gate.free.lock().expect("lock"), 1);
    }
}
