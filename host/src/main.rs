//! The `commerce-host` command line (see [`commerce_host::cli`]).

fn main() -> anyhow::Result<()> {
    commerce_host::cli::main()
}
