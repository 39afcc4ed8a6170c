//! The `skillbox` command line: a thin layer over the library. It parses
//! flags, calls the library's builders and prints; everything it runs is
//! reachable to any embedder through the same public API.

mod bench;
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
