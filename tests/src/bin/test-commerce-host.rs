//! The `commerce-host` binary, built inside the tests package so that integration tests find it
//! through `CARGO_BIN_EXE_test-commerce-host` (the kill-and-restart test runs it as a child).

#[global_allocator]
static ALLOCATOR: commerce_host::Allocator = commerce_host::Allocator;

fn main() -> anyhow::Result<()> {
    commerce_host::cli::main()
}
