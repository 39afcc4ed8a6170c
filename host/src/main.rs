fn main() -> std::process::ExitCode {
    skillbox::cli::main()
}
