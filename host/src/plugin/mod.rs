//! `nereus plugin …`: what a backend author runs between an empty folder and a deployed model —
//! write one (`new`), build it (`build`), and check a component before deploying it (`check`).
mod build;
mod check;
mod scaffold;

use crate::cli::PluginCommand;

/// Runs a `plugin` subcommand, printing to standard output; `Ok(false)` when what it checked or
/// built failed (the process exits 1), an error when it could not run at all.
pub fn run(command: PluginCommand) -> anyhow::Result<bool> {
    match command {
        PluginCommand::New { name, lang, dir } => scaffold::new(&name, lang, &dir).map(|()| true),
        PluginCommand::Build { dir } => build::build(&dir),
        PluginCommand::Check { file, config } => check::check(&file, config.as_deref()),
    }
}
