//! The `commerce-host` command line (see [`commerce_host::cli`]).

#[global_allocator]
static ALLOCATOR: commerce_host::Allocator = commerce_host::Allocator;

fn main() -> anyhow::Result<()> {
    commerce_host::cli::main()
}
