//! `nereus plugin build DIR`: runs the folder's `build.sh` — which installs the language's
//! toolchain where it is missing, once — to write the component where the server looks for the
//! model's backend (`DIR/<backend>.wasm`), then checks it as `nereus plugin check` would, loading
//! it as the folder's model.
use std::path::Path;
use std::process::Command;

use anyhow::Context;

pub fn build(dir: &Path) -> anyhow::Result<bool> {
    let script = dir.join("build.sh");
    if !script.is_file() {
        anyhow::bail!("{} has no build.sh: is it a folder `nereus plugin new` wrote?", dir.display());
    }
    let config_path = dir.join("config.pbtxt");
    let text =
        std::fs::read_to_string(&config_path).with_context(|| format!("cannot read {}", config_path.display()))?;
    let config = crate::config::parse_pbtxt(&text).map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
    if config.backend.is_empty() {
        anyhow::bail!("{} names no 'backend'", config_path.display());
    }
    // The WIT this server implements, for build scripts that look for it (`$NEREUS_WIT`).
    let wit = dir.join(".nereus/wit");
    std::fs::create_dir_all(&wit)?;
    std::fs::write(wit.join("backend.wit"), super::scaffold::WIT)?;
    let out = dir.canonicalize()?.join(format!("{}.wasm", config.backend));
    println!("build      {} -> {}", script.display(), out.display());
    let status = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .env("NEREUS_WIT", wit.canonicalize()?)
        .status()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !status.success() {
        println!("build      failed ({status})");
        return Ok(false);
    }
    super::check::check(&out, Some(&config_path))
}
