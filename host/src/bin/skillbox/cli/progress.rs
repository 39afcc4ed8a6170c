//! Progress for a compile a person waits for: the first run of a large
//! component on a machine (the Python runtimes take seconds to a minute)
//! says what it is doing, on a terminal, once it has taken over a second,
//! and every ten seconds after. Elsewhere (a server's log, CI) it is a log
//! event (`SKILLBOX_LOG=info`).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use skillbox_sandbox::{Compiling, watch_compiles};

const QUIET_FOR: Duration = Duration::from_secs(1);
const EVERY: Duration = Duration::from_secs(10);

pub(super) fn init() {
    let terminal = std::io::stderr().is_terminal();
    watch_compiles(Box::new(move |compiling: Compiling<'_>| {
        let label = compiling.label.to_string();
        let mib = compiling.bytes as f64 / (1 << 20) as f64;
        let quick = compiling.quick;
        if !terminal {
            tracing::info!(component = %label, mib, quick, "compiling (first run on this machine)");
            return Box::new(move |took: Duration| {
                tracing::info!(component = %label, seconds = took.as_secs_f64(), "compiled");
            });
        }
        // What the ticker has shown and whether the compile has ended, under
        // one lock, so the last line is printed by the compile's own thread
        // before it goes on, never after the command's output.
        let shown = Arc::new(Mutex::new(Shown::default()));
        let (done, ended) = mpsc::channel::<()>();
        let started = Instant::now();
        let ticker = (shown.clone(), label.clone());
        std::thread::spawn(move || {
            let (shown, label) = ticker;
            let mut wait = QUIET_FOR;
            while let Err(mpsc::RecvTimeoutError::Timeout) = ended.recv_timeout(wait) {
                let mut shown = shown.lock().unwrap_or_else(|e| e.into_inner());
                if shown.ended {
                    return;
                }
                if shown.announced {
                    eprintln!(
                        "skillbox: still compiling {label}, {} s so far",
                        started.elapsed().as_secs()
                    );
                } else if quick {
                    eprintln!(
                        "skillbox: compiling {label} ({mib:.0} MiB) quickly for its first run \
                         on this machine; the optimized code follows in the background"
                    );
                } else {
                    eprintln!(
                        "skillbox: compiling {label} ({mib:.0} MiB), the first run on this \
                         machine; the compiled code is kept, so later runs start at once"
                    );
                }
                shown.announced = true;
                wait = EVERY;
            }
        });
        Box::new(move |took: Duration| {
            let mut shown = shown.lock().unwrap_or_else(|e| e.into_inner());
            shown.ended = true;
            if shown.announced {
                eprintln!("skillbox: compiled {label} in {:.1} s", took.as_secs_f64());
            }
            let _ = done.send(());
        })
    }));
}

/// Said before a command waits at exit for the optimizing compiles its
/// quick first run started.
pub(super) fn finishing(labels: &[String]) {
    let labels = labels.join(", ");
    if std::io::stderr().is_terminal() {
        eprintln!(
            "skillbox: finishing the optimized compile of {labels}, kept for later runs \
             (a few seconds, once per machine)"
        );
    } else {
        tracing::info!(components = %labels, "finishing the optimized compile");
    }
}

#[derive(Default)]
struct Shown {
    announced: bool,
    ended: bool,
}
