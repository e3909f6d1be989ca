//! The `ozone` binary: parses the command line, runs it, maps the outcome to
//! an exit status (see the library's docs).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = ozone_cli::Cli::parse();
    // Warnings and errors only, unless RUST_LOG asks for more.
    proto_crate::init_logging_as("warn", cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            ozone_cli::output::status(format_args!("error: starting the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(ozone_cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if ozone_cli::output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes on one line: these messages are for a person.
            ozone_cli::output::status(format_args!("error: {e:#}"));
            ExitCode::from(ozone_cli::exit_status(&e))
        }
    }
}
