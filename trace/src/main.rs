//! `rnic-trace TRACE.jsonl [-o PAGE.html]`: a trace as an HTML sequence
//! diagram (see the library's documentation).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Turns a TraceHal trace (JSON lines) into a self-contained HTML page: a
/// sequence diagram with lanes for application, driver, doorbell, device,
/// wire and peer, every row opening to its decoded fields and raw bytes.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The trace, one JSON event per line (rnic-middleware's JsonLines).
    trace: PathBuf,
    /// Where the page goes (default: the trace's name with .html).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The page's title (default: the trace's file name).
    #[arg(long)]
    title: Option<String>,
}

fn main() -> ExitCode {
    env_logger::init();
    let a = Args::parse();
    let text = match std::fs::read_to_string(&a.trace) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rnic-trace: {}: {e}", a.trace.display());
            return ExitCode::FAILURE;
        }
    };
    let events = match rnic_trace::parse(&text) {
        Ok(ev) => ev,
        Err(e) => {
            eprintln!("rnic-trace: {}: {e}", a.trace.display());
            return ExitCode::FAILURE;
        }
    };
    let out = a.output.unwrap_or_else(|| a.trace.with_extension("html"));
    let title = a.title.unwrap_or_else(|| {
        a.trace
            .file_name()
            .map_or("trace".into(), |n| n.to_string_lossy().into_owned())
    });
    if let Err(e) = std::fs::write(&out, rnic_trace::render(&title, &events)) {
        eprintln!("rnic-trace: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("rnic-trace: {} events -> {}", events.len(), out.display());
    ExitCode::SUCCESS
}
