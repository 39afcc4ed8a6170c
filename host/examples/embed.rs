//! Embeds skillbox in an application: loads the bundled skills, grants a
//! workspace read-only, calls a tool, then calls it again under a fuel
//! budget too small for it and handles the limit error.
//!
//! ```sh
//! scripts/build-guests     # once: builds the bundled skills' components
//! cargo run -p skillbox --no-default-features --example embed
//! ```

use std::path::Path;

use serde_json::json;
use skillbox::{CallError, LimitOverrides, SandboxError, Skillbox};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let skills = repository.join("skills");
    let workspace = repository.join("examples/workspace");

    // Nothing is granted that the builder does not name: here the bundled
    // skills, and one folder mounted read-only at /workspace.
    let skillbox = Skillbox::builder()
        .skills_dir(&skills)
        .workspace(&workspace)
        .build()?;

    let tools = skillbox.tools().await;
    println!("{} skills, {} tools", skillbox.skills().len(), tools.len());

    let arguments = json!({"path": "logs/app.log", "pattern": "ERROR", "max-matches": 3});
    let output = skillbox
        .call_tool("log-inspect__grep", arguments.clone())
        .await?;
    println!("grep: {}", output.value);
    println!(
        "used {} fuel in {:?}",
        output.usage.fuel, output.usage.duration
    );

    // The same call with a CPU budget far too small: the sandbox stops the
    // guest, and the error says what happened and what to do.
    let mut tiny_fuel = LimitOverrides::default();
    tiny_fuel.fuel = Some(10_000);
    let starved = Skillbox::builder()
        .skills_dir(&skills)
        .workspace(&workspace)
        .limits(tiny_fuel)
        .build()?;
    match starved.call_tool("log-inspect__grep", arguments).await {
        Err(CallError::Sandbox {
            error: SandboxError::OutOfFuel { fuel },
            ..
        }) => println!("limit hit as expected: out of fuel after {fuel} units"),
        Err(other) => return Err(format!("expected out of fuel, got: {other}").into()),
        Ok(output) => return Err(format!("expected out of fuel, got {}", output.value).into()),
    }
    Ok(())
}
